"""One HTTP server per process, shared by every subsystem that serves HTTP.

A subsystem adds its routes (``add_routes``) before :meth:`HttpServer.start`; the server
runs on the caller's event loop (no thread) and is stopped with its process. Unexpected
exceptions of a handler are logged and answered 500 by aiohttp; handlers turn expected
failures into their own bodies (WebHDFS: RemoteException JSON)."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterable

from aiohttp import web

from xdfs.common.addresses import format_address, parse_address

log = logging.getLogger(__name__)


class HttpServer:
    def __init__(self, name: str, client_max_size_bytes: int) -> None:
        self.name = name
        # aiohttp's limit on bodies read whole (request.read/json); streamed bodies
        # (request.content) are not bounded by it.
        self.app = web.Application(client_max_size=client_max_size_bytes)
        self._runner: web.AppRunner | None = None
        self._address = ""

    def add_routes(self, routes: Iterable[web.AbstractRouteDef]) -> None:
        self.app.add_routes(list(routes))

    @property
    def address(self) -> str:
        """``host:port`` once started (the real port when 0 was asked for)."""
        return self._address

    async def start(self, address: str) -> str:
        host, port = parse_address(address)
        try:
            sock = _listen(host, port)
        except OSError as exc:  # say which server could not bind (the RPC one did)
            raise OSError(exc.errno, f"{self.name} cannot serve HTTP on {address}: "
                                     f"{exc.strerror}") from None
        runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        try:
            await runner.setup()
            await web.SockSite(runner, sock).start()
        except BaseException:
            await runner.cleanup()
            sock.close()
            raise
        self._runner = runner
        self._address = format_address(host, sock.getsockname()[1])
        log.info("%s http serving on %s", self.name, self._address)
        return self._address

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def _listen(host: str, port: int) -> socket.socket:
    """A bound listening socket (its port is known before serving: 0 picks a free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock
