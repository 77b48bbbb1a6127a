from xdfs.testing.lazyfs.driver import main

main()
