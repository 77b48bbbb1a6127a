"""``python -m xdfs.analytics ARGS``: ``xdfs analyze ARGS`` (see xdfs.analytics.submit)."""

from xdfs.analytics.submit import main

main()
