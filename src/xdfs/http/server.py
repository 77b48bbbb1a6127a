"""One HTTP server per process, shared by every subsystem that serves HTTP.

A subsystem adds its routes (``add_routes``) before :meth:`HttpServer.start`; the server
runs on the caller's event loop (no thread) and is stopped with its process. Unexpected
exceptions of a handler are logged and answered 500 by aiohttp; handlers turn expected
failures into their own bodies (WebHDFS: RemoteException JSON).

Connections are bounded, so that HTTP cannot take the descriptors the process's RPC
server needs (a flood of half-open connections once left a NameNode at its descriptor
limit, every RPC client refused): at most ``http.connections_max`` (and never more than
half the process's descriptor limit, raised to its hard limit at start), at most
``http.connections_per_address_max`` from one source address; a connection over either is
answered 503 and closed at once. A connection whose request headers are not complete
``http.header_timeout_s`` after it opened or after its previous response (slowloris; an
idle keep-alive connection too) is closed: aiohttp's keep-alive timer, which runs from the
connection's start and fires while no complete request has arrived. A body that stalls is
cut by :func:`body_chunks` and :func:`read_form` (``http.body_idle_timeout_s``)."""

from __future__ import annotations

import asyncio
import logging
import resource
import socket
from collections.abc import AsyncIterator, Iterable
from typing import Any, cast

from aiohttp import web
from multidict import MultiDictProxy

from xdfs.common.addresses import format_address, parse_address
from xdfs.config import HttpConfig
from xdfs.errors import InvalidArgument

log = logging.getLogger(__name__)

_REFUSAL = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
            b"Content-Length: 33\r\nConnection: close\r\n\r\ntoo many connections; try later\r\n")


class HttpServer:
    def __init__(self, name: str, client_max_size_bytes: int,
                 limits: HttpConfig | None = None) -> None:
        self.name = name
        self.limits = limits or HttpConfig()
        # aiohttp's limit on bodies read whole (request.read/json); streamed bodies
        # (request.content) are not bounded by it.
        self.app = web.Application(client_max_size=client_max_size_bytes)
        self._runner: web.AppRunner | None = None
        self._listener: asyncio.Server | None = None
        self._address = ""
        self.connections: ConnectionCap | None = None

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
        runner = web.AppRunner(self.app, access_log=None, handle_signals=False,
                               keepalive_timeout=self.limits.header_timeout_s)
        try:
            await runner.setup()
            server = runner.server
            assert server is not None
            cap = ConnectionCap(connections_cap(self.limits.connections_max, self.name),
                                self.limits.connections_per_address_max)
            self._listener = await asyncio.get_running_loop().create_server(
                lambda: _Capped(server(), cap), sock=sock, backlog=128)
        except BaseException:
            await runner.cleanup()
            sock.close()
            raise
        self._runner = runner
        self.connections = cap
        self._address = format_address(host, sock.getsockname()[1])
        log.info("%s http serving on %s (at most %d connections, %d per address)",
                 self.name, self._address, cap.total_max, cap.per_address_max)
        return self._address

    async def stop(self) -> None:
        if self._listener is not None:
            self._listener.close()  # no new connections; the runner closes the open ones
            self._listener = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


class ConnectionCap:
    """Open connections, in total and per source address (pure counting)."""

    def __init__(self, total_max: int, per_address_max: int) -> None:
        self.total_max = total_max
        self.per_address_max = per_address_max
        self.open = 0
        self.refused = 0
        self._per_address: dict[str, int] = {}

    def admit(self, address: str) -> bool:
        held = self._per_address.get(address, 0)
        if self.open >= self.total_max or held >= self.per_address_max:
            self.refused += 1
            return False
        self.open += 1
        self._per_address[address] = held + 1
        return True

    def release(self, address: str) -> None:
        self.open -= 1
        left = self._per_address[address] - 1
        if left:
            self._per_address[address] = left
        else:
            del self._per_address[address]


class _Capped(asyncio.Protocol):
    """aiohttp's protocol of one connection, admitted by the cap or refused at once."""

    def __init__(self, inner: asyncio.Protocol, cap: ConnectionCap) -> None:
        self._inner = inner
        self._cap = cap
        self._address: str | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        if not self._cap.admit(address):
            writer = cast(asyncio.Transport, transport)  # (uvloop's is no asyncio subclass)
            writer.write(_REFUSAL)
            writer.close()
            return
        self._address = address
        self._inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._address is None:
            return
        self._cap.release(self._address)
        self._address = None
        self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._address is not None:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._address is not None else None

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


def connections_cap(configured: int, name: str) -> int:
    """``configured``, but at most half the process's descriptors (whose soft limit is
    raised to the hard one first): the rest stay for RPC, files and peers."""
    soft = raise_descriptor_limit()
    if soft == resource.RLIM_INFINITY or configured <= soft // 2:
        return configured
    log.warning("%s: http.connections_max %d lowered to %d, half the descriptor limit %d",
                name, configured, soft // 2, soft)
    return max(1, soft // 2)


def raise_descriptor_limit() -> int:
    """Raise RLIMIT_NOFILE's soft limit to its hard limit; the soft limit after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:  # e.g. an infinite hard limit on macOS
            log.debug("cannot raise the descriptor limit to %s: %s", hard, exc)
    return soft


async def body_chunks(request: web.BaseRequest, chunk_bytes: int,
                      idle_s: float) -> AsyncIterator[bytes]:
    """A streamed request body in chunks of at most ``chunk_bytes``; BadRequest when the
    client sends no byte of it for ``idle_s`` (InvalidArgument: a stalled body would hold
    its connection, and a DataNode's write pipeline, for ever)."""
    content = request.content
    while True:
        try:
            async with asyncio.timeout(idle_s):
                data = await content.read(chunk_bytes)
        except TimeoutError:
            raise InvalidArgument(f"no byte of the request body came for {idle_s:g} s") from None
        if not data:
            return
        yield data


async def read_form(request: web.BaseRequest, timeout_s: float) -> MultiDictProxy[Any]:
    """A form body (bounded by the app's client_max_size), within ``timeout_s``."""
    try:
        async with asyncio.timeout(timeout_s):
            return await request.post()
    except TimeoutError:
        raise InvalidArgument(f"the request body did not come within {timeout_s:g} s") from None


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
