from xdfs.cli.main import main

main()
