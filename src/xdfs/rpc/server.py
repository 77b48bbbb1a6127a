"""The RPC server: accepts connections, hands each to a
:class:`~xdfs.rpc.server_connection.ServerConnection` (the handshake, dispatch of calls to
handlers, limits), sweeps their deadlines and closes them.

Handlers are methods of an implementation object named after the :class:`Method`:

* unary: ``def|async def name(ctx, request) -> response`` (a plain ``def`` runs inline
  on the event loop, the fast path for cheap reads, and, marked :func:`deferring`, may
  return a :class:`Deferred` answered later without a task; ``async def`` runs as a task,
  or, marked :func:`eager`, starts inline and becomes a task only when it waits);
* upload: ``async def name(ctx, request, chunks: StreamReceiver) -> response``;
* download: ``async def name(ctx, request) -> Download(head, chunks)``.

At ``connections_max`` connections, the longest-idle connection that has not authenticated
as anyone is closed to make room for a new one (:meth:`RpcServer.make_room`).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from typing import TYPE_CHECKING

from xdfs.config import RpcConfig
from xdfs.errors import Overloaded
from xdfs.rpc.handling import Authenticator, Route, TrustingAuthenticator, routes_of
from xdfs.rpc.server_connection import ServerConnection
from xdfs.rpc.service import Service, method_table

if TYPE_CHECKING:
    from xdfs.metrics import ServerMetrics

#: How long RpcServer.close() lets peers take their last replies before dropping them.
_CLOSE_GRACE_S = 1.0


class RpcServer:
    def __init__(
        self,
        name: str,
        config: RpcConfig,
        *,
        cluster_id: str = "",
        authenticator: Authenticator | None = None,
        ssl_context: ssl.SSLContext | None = None,
        metrics: ServerMetrics | None = None,
    ) -> None:
        self.name = name
        if metrics is None:  # (imported here: clients load this module, not the metrics)
            from xdfs.metrics import ServerMetrics

            metrics = ServerMetrics(name, config.loop_lag_interval_s, config.slow_call_s,
                                    config.slow_calls_kept)
        #: The server's Prometheus series (its calls here; its owner adds its own figures).
        self.metrics = metrics
        self.config = config
        self.cluster_id = cluster_id
        self.authenticator: Authenticator = authenticator or TrustingAuthenticator()
        self.ssl_context = ssl_context
        self.started_at_s = time.time()
        #: Every method's route by name (its connections use this table, not a copy).
        self.routes: dict[str, Route] = {}
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self.connections: set[ServerConnection] = set()
        self.host = ""
        self.port = 0

    def add_service(self, service: Service, impl: object) -> None:
        """Route every method of ``service`` to the same-named method of ``impl``."""
        for name, route in routes_of(service, impl):
            assert name not in self.routes, f"method {name} registered twice"
            self.routes[name] = route

    def remove_service(self, service: Service) -> None:
        """Stop routing ``service``'s methods (calls to them get UnknownMethod)."""
        for name in method_table([service]):
            self.routes.pop(name, None)

    def route(self, name: str) -> Route | None:
        return self.routes.get(name)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: ServerConnection(self), host, port, ssl=self.ssl_context, backlog=1024
        )
        sockname = self._server.sockets[0].getsockname()
        self.host, self.port = sockname[0], sockname[1]
        self._sweeper = loop.create_task(self._sweep(), name=f"{self.name} connection sweeper")
        self.metrics.loop_lag.start()
        return self.address

    async def _sweep(self) -> None:
        """Close connections past their idle or partial-frame deadlines (one pass over all
        connections per interval, instead of a timer per frame)."""
        config = self.config
        interval_s = min(
            1.0, config.unauthenticated_idle_timeout_s / 4, config.partial_frame_timeout_s / 4
        )
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval_s)
            now = loop.time()
            for conn in list(self.connections):
                conn.check_deadlines(now)

    def make_room(self) -> bool:
        """At the connection limit: close the longest-idle connection that has not
        authenticated as anyone and runs nothing; False when there is none."""
        idle = [conn for conn in self.connections if conn.evictable]
        if not idle:
            return False
        victim = min(idle, key=lambda conn: conn.last_active_s)
        self.connections.discard(victim)
        victim.abort_with(Overloaded(
            "closed to make room for another client: idle without authenticating"
        ))
        return True

    async def close(self) -> None:
        """Stop accepting, drop every connection and cancel the calls they were running."""
        await self.metrics.loop_lag.stop()
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
            self._sweeper = None
        if self._server is not None:
            self._server.close()
        conns = list(self.connections)
        for conn in conns:
            conn.shutdown()
        # Closing flushes what is buffered for each peer; a peer that reads nothing would
        # keep its connection (and this call) waiting forever, so it is dropped after a grace.
        deadline = asyncio.get_running_loop().time() + _CLOSE_GRACE_S
        for conn in conns:
            try:
                async with asyncio.timeout_at(deadline):
                    await conn.wait_closed()
            except TimeoutError:
                if conn.transport is not None:
                    conn.transport.abort()
            await conn.wait_finished()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
