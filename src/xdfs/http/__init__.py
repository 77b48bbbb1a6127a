"""The HTTP side of a server process: one aiohttp application on the server's own event
loop (:mod:`xdfs.http.server`), credentials of a request (:mod:`xdfs.http.auth`) and the
WebHDFS wire shapes both NameNode and DataNodes speak (:mod:`xdfs.http.webhdfs`)."""
