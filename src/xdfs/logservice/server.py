"""The log service process: serves the ``log`` API (xdfs.protocol.log) over xdfs RPC.

Start: a ZooKeeper session (the logs' metadata and the writer locks), the storage nodes'
``ledger`` service (logging in with their secret), then serve callers presenting the log
service secret (``logservice.secret_file``, the same file: one secret in a deployment).
Several instances may run on the same ZooKeeper root; a log's writer lives in the one that
holds its lock. A background task reclaims truncated ledgers of the logs this instance
writes, every ``logservice.reclaim_interval_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from xdfs.common.secrets import read_secret_file
from xdfs.config import LogServiceConfig, XdfsConfig
from xdfs.errors import ConfigError, XdfsError
from xdfs.http.server import HttpServer
from xdfs.http.ui.status import start_status_http
from xdfs.log import meta as m
from xdfs.log.engine import LogEngine
from xdfs.log.nodes import NodePool
from xdfs.log.zkmeta import SECRET_KEY, MetaStore, connect
from xdfs.logservice.keeper import Keeper, KeeperHandlers
from xdfs.protocol import log as lg
from xdfs.protocol.journal import JOURNAL_USER
from xdfs.protocol.log import LogSettings
from xdfs.protocol.system_handlers import add_system_services
from xdfs.rpc.handling import CallContext
from xdfs.rpc.messages import PROTOCOL_VERSION, Empty, Hello
from xdfs.rpc.secret_auth import SecretAuthenticator
from xdfs.rpc.server import RpcServer
from xdfs.rpc.tls import client_context, server_context

log = logging.getLogger(__name__)


def default_settings(config: XdfsConfig) -> LogSettings:
    s = config.logservice
    return m.check_settings(LogSettings(
        s.ensemble_size, s.write_quorum, s.ack_quorum, s.ledger_entries_max,
        s.ledger_bytes_max, s.ledger_age_max_s))


class LogService:
    def __init__(self, config: XdfsConfig) -> None:
        self.config = config
        self.server: RpcServer | None = None
        self.engine: LogEngine | None = None
        self.stopped = asyncio.Event()
        self.fatal: BaseException | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.keeper: Keeper | None = None
        self.http: HttpServer | None = None  # status page and /metrics (http_address)

    @property
    def http_address(self) -> str:
        return self.http.address if self.http is not None else ""

    @property
    def address(self) -> str:
        assert self.server is not None
        return self.server.address

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        settings = self.config.logservice
        secret = read_secret_file(settings.secret_file, "logservice.secret_file")
        if not settings.storage_nodes:
            raise ConfigError("logservice.storage_nodes is empty: name the JournalNodes "
                              "that store the ledgers")
        defaults = default_settings(self.config)
        zk = await asyncio.to_thread(connect, settings.zookeeper_quorum,
                                     settings.zookeeper_session_timeout_s, read_secret_file(
                                         settings.zookeeper_secret_file, SECRET_KEY))
        rpc = self.config.rpc
        pool = NodePool(rpc, Hello(PROTOCOL_VERSION, user=JOURNAL_USER, password=secret),
                        settings.call_timeout_s, client_context(rpc),
                        allowed=settings.storage_nodes)
        self.server = RpcServer("logservice", rpc,
                                authenticator=SecretAuthenticator(lg.LOG_USER, secret),
                                ssl_context=server_context(rpc))
        add_system_services(self.server, "logservice")
        try:
            store = await asyncio.to_thread(MetaStore, zk, settings.zookeeper_root)
            await self.server.start(host, port)
        except BaseException:
            zk.stop()
            zk.close()
            raise
        self.engine = LogEngine(store, pool, list(settings.storage_nodes), self.server.address,
                                defaults, settings.add_timeout_s,
                                2 * settings.zookeeper_session_timeout_s,
                                keeper_deletes=bool(settings.instances))
        self.engine.watch_session()
        self.server.add_service(lg.LOG_SERVICE, LogHandlers(self.engine, settings))
        self.keeper = Keeper(self.engine, settings.keeper_interval_s,
                             settings.node_dead_after_s, settings.copy_timeout_s)
        self.server.add_service(lg.KEEPER_SERVICE, KeeperHandlers(self.keeper))
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._reclaim_loop(), name="reclaim"),
                       loop.create_task(self.keeper.run(), name="keeper")]
        try:
            self.http = await start_status_http(
                "logservice", settings.http_address, self.config.http.body_bytes_max,
                self.server.metrics, self._status)
        except BaseException:
            await self.stop()
            raise
        return self.server.address

    def _status(self) -> list[tuple[str, object]]:
        settings = self.config.logservice
        return [("RPC address", self.address), ("ZooKeeper", settings.zookeeper_quorum),
                ("storage nodes", ", ".join(settings.storage_nodes)),
                ("logs written through here", len(self.engine.writers) if self.engine else 0)]

    async def _reclaim_loop(self) -> None:
        assert self.engine is not None
        while True:
            await asyncio.sleep(self.config.logservice.reclaim_interval_s)
            for name in list(self.engine.writers):
                try:
                    await self.engine.reclaim(name)
                except XdfsError as exc:
                    log.warning("reclaiming log %s: %s", name, exc)

    async def stop(self) -> None:
        if self.stopped.is_set():
            return
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.http is not None:
            await self.http.stop()
        if self.server is not None:
            await self.server.close()
        if self.engine is not None:
            await self.engine.close()
            await self.engine.pool.close()
            zk = self.engine.store.zk
            # Bounded: with ZooKeeper gone, closing the session must not hold the stop up
            # (the session then expires on its own, and the writer locks with it).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.to_thread(zk.stop),
                                       self.config.logservice.call_timeout_s)
        self.stopped.set()


class LogHandlers:
    def __init__(self, engine: LogEngine, settings: LogServiceConfig) -> None:
        self.engine = engine
        self.settings = settings

    async def _stat(self, name: str) -> lg.LogStat:
        meta, end = await self.engine.stat(name)
        return lg.LogStat(meta.name, meta.settings, len(meta.ledgers), meta.truncated_lsn, end,
                          meta.writer_epoch, meta.writer, dict(meta.readers), meta.created_ms,
                          [x.ledger_id for x in meta.ledgers], meta.opened_epoch)

    async def create(self, ctx: CallContext, req: lg.CreateLogRequest) -> lg.LogStat:
        await self.engine.create(req.name, req.settings, int(time.time() * 1000))
        return await self._stat(req.name)

    async def stat(self, ctx: CallContext, req: lg.NameRequest) -> lg.LogStat:
        return await self._stat(req.name)

    async def list(self, ctx: CallContext, req: Empty) -> lg.ListResponse:
        return lg.ListResponse(await self.engine.names())

    async def delete(self, ctx: CallContext, req: lg.NameRequest) -> Empty:
        await self.engine.delete(req.name)
        return Empty()

    async def open_writer(self, ctx: CallContext, req: lg.NameRequest) -> lg.EpochResponse:
        return lg.EpochResponse(await self.engine.open_writer(req.name))

    async def append(self, ctx: CallContext, req: lg.AppendRequest) -> lg.AppendResponse:
        return lg.AppendResponse(await self.engine.append_batch(req.name, req.records,
                                                                req.epoch))

    async def read(self, ctx: CallContext, req: lg.ReadRequest) -> lg.ReadResponse:
        max_bytes = max(1, min(req.max_bytes, self.settings.read_bytes_max))
        wait_s = min(req.wait_s, self.settings.read_wait_max_s)
        records, following = await self.engine.read_wait(req.name, req.from_lsn, max_bytes,
                                                         wait_s, req.reader)
        return lg.ReadResponse(records, following)

    async def truncate(self, ctx: CallContext, req: lg.TruncateRequest) -> lg.LsnResponse:
        return lg.LsnResponse(await self.engine.truncate(req.name, req.lsn))

    async def truncated_lsn(self, ctx: CallContext, req: lg.NameRequest) -> lg.LsnResponse:
        meta, _ = await self.engine.stat(req.name)
        return lg.LsnResponse(meta.truncated_lsn)

    async def set_reader(self, ctx: CallContext, req: lg.ReaderRequest) -> Empty:
        await self.engine.register_reader(req.name, req.reader, req.position)
        return Empty()

    async def tso(self, ctx: CallContext, req: lg.TsoRequest) -> lg.TsoResponse:
        return lg.TsoResponse(await self.engine.tso(req.count), req.count)
