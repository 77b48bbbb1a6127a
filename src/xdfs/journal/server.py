"""The JournalNode process: one of the 2N+1 acceptors of the quorum journal (seed 001).

Start: lock the journal dir (a second JournalNode on it refuses to start), load every
journal found there (a subdirectory per journal id), then serve the ``journal`` service to
callers presenting the journal secret (``journalnode.secret_file``).

Each journal has its own worker thread (xdfs.journal.workers): a journal's calls run there
one at a time, in the order they arrived, off the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from xdfs.common.files import DirLock, make_dirs
from xdfs.common.secrets import read_secret_file
from xdfs.config import XdfsConfig
from xdfs.http.server import HttpServer
from xdfs.http.ui.status import start_status_http
from xdfs.journal.workers import Journals, JournalWorker
from xdfs.ledger.handlers import LedgerHandlers, LedgerWorker
from xdfs.ledger.storage import LEDGER_DIR
from xdfs.protocol.journal import JOURNAL_SERVICE, JOURNAL_USER
from xdfs.protocol.ledger import LEDGER_SERVICE
from xdfs.protocol.system_handlers import add_system_services
from xdfs.rpc.messages import PROTOCOL_VERSION, Hello
from xdfs.rpc.secret_auth import SecretAuthenticator
from xdfs.rpc.server import RpcServer
from xdfs.rpc.tls import client_context, server_context

if TYPE_CHECKING:
    from xdfs.journal.syncer import Syncer
    from xdfs.ledger.heartbeat import KeeperLink

log = logging.getLogger(__name__)


class JournalNode:
    def __init__(self, config: XdfsConfig, journal_dir: Path) -> None:
        self.config = config
        self.journal_dir = journal_dir
        self.server: RpcServer | None = None
        self.journals = Journals(journal_dir)
        self.stopped = asyncio.Event()
        self.fatal: BaseException | None = None
        self._lock = DirLock(journal_dir)
        self.syncer: Syncer | None = None
        self._syncing: asyncio.Task[None] | None = None
        #: The log service's ledgers, served next to the journals (xdfs.ledger).
        self.ledgers: LedgerWorker | None = None
        self.keeper_link: KeeperLink | None = None
        self._heartbeats: asyncio.Task[None] | None = None
        self.http: HttpServer | None = None  # status page and /metrics (http_address)

    @property
    def http_address(self) -> str:
        return self.http.address if self.http is not None else ""

    @property
    def address(self) -> str:
        assert self.server is not None
        return self.server.address

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        from xdfs.journal.handlers import JournalHandlers

        settings = self.config.journalnode
        secret = read_secret_file(settings.secret_file, "journalnode.secret_file")
        await asyncio.to_thread(make_dirs, self.journal_dir)
        self._lock.lock()
        try:
            await asyncio.to_thread(self.journals.load)
            self.ledgers = LedgerWorker(self.journal_dir / LEDGER_DIR, settings.read_bytes_max)
            await asyncio.to_thread(self.ledgers.load)
            rpc = self.config.rpc
            self.server = RpcServer(
                "journalnode", rpc, authenticator=SecretAuthenticator(JOURNAL_USER, secret),
                ssl_context=server_context(rpc),
            )
            add_system_services(self.server, "journalnode")
            self.server.add_service(
                JOURNAL_SERVICE, JournalHandlers(self.journals, settings))
            self.server.add_service(LEDGER_SERVICE, LedgerHandlers(self.ledgers))
            await self._start_http(self.server)
            await self.server.start(host, port)
            self._start_syncer(secret)
            self._start_heartbeats(secret)
        except BaseException:
            if self.http is not None:
                await self.http.stop()
            self._close_workers()
            self._lock.unlock()
            raise
        log.info("journals in %s: %s", self.journal_dir,
                 ", ".join(name for name, _ in self.journals.by_name()) or "none yet")
        return self.server.address

    async def _start_http(self, server: RpcServer) -> None:
        from xdfs.journal import metrics

        server.metrics.add_collector("journalnode", lambda: metrics.families(self.journals))
        self.http = await start_status_http(
            "journalnode", self.config.journalnode.http_address,
            self.config.http.body_bytes_max, server.metrics,
            lambda: metrics.status_facts(self.address if self.server else "", self.journals))

    def _start_syncer(self, secret: str) -> None:
        from xdfs.journal.syncer import Syncer
        from xdfs.quorum.channel import RpcJournalChannel

        settings = self.config.journalnode
        hello = Hello(PROTOCOL_VERSION, user=JOURNAL_USER, password=secret)
        rpc = self.config.rpc
        self.syncer = Syncer(
            lambda: [worker for _, worker in self.journals.by_name()],
            lambda peer: RpcJournalChannel(peer, rpc, hello, call_timeout_s=rpc.call_timeout_s,
                                           ssl_context=client_context(rpc)),
            self.address, settings.sync_interval_s, settings.read_bytes_max,
        )
        self._syncing = asyncio.get_running_loop().create_task(self.syncer.run(),
                                                               name="journal syncer")

    def _start_heartbeats(self, secret: str) -> None:
        """The ledger service's heartbeats to the log service's keeper (xdfs.ledger)."""
        from xdfs.ledger.heartbeat import start_keeper_link

        assert self.ledgers is not None
        self.keeper_link = start_keeper_link(self.config, self.ledgers, self.address, secret)
        if self.keeper_link is not None:
            self._heartbeats = asyncio.get_running_loop().create_task(
                self.keeper_link.run(), name="keeper heartbeats")

    def worker(self, journal_id: str, *, create: bool = False) -> JournalWorker:
        """The worker of ``journal_id`` (tests and tools; see Journals.worker)."""
        return self.journals.worker(journal_id, create=create)

    async def stop(self) -> None:
        if self.stopped.is_set():
            return
        for task in (self._syncing, self._heartbeats):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self.keeper_link is not None:
            await self.keeper_link.close()
        if self.http is not None:
            await self.http.stop()
        if self.server is not None:
            await self.server.close()
        await asyncio.to_thread(self._close_workers)
        self._lock.unlock()
        self.stopped.set()

    def _close_workers(self) -> None:
        self.journals.close()
        if self.ledgers is not None:
            self.ledgers.close()
            self.ledgers = None
