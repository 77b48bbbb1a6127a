"""The BackupNode process (seed 000, seed 003): a hot copy of the namespace that can take over.

Start: lock the name dir; bootstrap it from the NameNode's newest image when it has none
(:mod:`.bootstrap`); load the newest local image (md5 checked) and replay the local edits;
open its own edits log after them; serve ``backupnode`` (status, takeover) and answer
client, admin and DataNode calls with NotActive, so callers with both addresses fail over
to the NameNode. Then two duties run until a takeover or the end: following the
NameNode's edits (:mod:`.follow`) and checkpointing (:mod:`.checkpoint`). A takeover
(:mod:`.takeover`) fences the NameNode and serves as a NameNode from the same process.

The pieces share one :class:`~.local.Local`. The BackupNode is a NameNode in waiting, so it
depends on :mod:`xdfs.namenode`; nothing depends on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from xdfs.backupnode.bootstrap import open_storage
from xdfs.backupnode.checkpoint import Checkpointer
from xdfs.backupnode.follow import Follower
from xdfs.backupnode.handlers import BackupHandlers
from xdfs.backupnode.local import BackupState, Local
from xdfs.backupnode.takeover import Takeover
from xdfs.common.fencing import parse_methods
from xdfs.common.files import make_dirs
from xdfs.config import XdfsConfig
from xdfs.errors import StorageError
from xdfs.http.server import HttpServer
from xdfs.http.ui.status import start_status_http
from xdfs.namenode.editlog.shared import journal_tailer
from xdfs.namenode.ha import HaHandlers
from xdfs.namenode.image.storage import StorageDirectory
from xdfs.namenode.security.auth import NamespaceAuthenticator
from xdfs.namenode.server import NameNode
from xdfs.protocol import namenode as nn_protocol
from xdfs.protocol.backup import (
    BACKUP_SERVICE,
    NAMENODE_BACKUP_PROTOCOL,
    BackupStatus,
    TakeoverResponse,
)
from xdfs.protocol.datanode import DATANODE_PROTOCOL
from xdfs.protocol.ha import HA_SERVICE, ROLE_BACKUP, HaStatus
from xdfs.protocol.system_handlers import add_system_services
from xdfs.quorum.reader import JournalTailer
from xdfs.rpc.client import RpcClient
from xdfs.rpc.messages import PROTOCOL_VERSION, Hello
from xdfs.rpc.server import RpcServer
from xdfs.rpc.service import NotActiveHandlers
from xdfs.rpc.tls import client_context, server_context

#: Services a promoted backup serves as a NameNode; before that they answer NotActive.
NAMENODE_SERVICES = (
    nn_protocol.CLIENT_SERVICE, nn_protocol.ADMIN_SERVICE, DATANODE_PROTOCOL,
    NAMENODE_BACKUP_PROTOCOL,
)


class BackupNode:
    def __init__(
        self,
        config: XdfsConfig,
        name_dir: Path,
        namenodes: list[str],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        assert namenodes, "a BackupNode follows a NameNode"
        self.config = config
        self.clock = clock
        self.local = Local(config, StorageDirectory(name_dir), namenodes, clock)
        self.checkpointer = Checkpointer(self.local)
        self.server: RpcServer | None = None
        self.namenode: NameNode | None = None  # the NameNode this backup became
        self._follower: Follower | None = None
        self._takeover: Takeover | None = None
        self._ids = ("", 0)  # cluster and namespace ids, once the name dir is open
        self._tasks: list[asyncio.Task[None]] = []
        self.http: HttpServer | None = None  # status page and /metrics (http_address)

    @property
    def http_address(self) -> str:
        return self.http.address if self.http is not None else ""

    @property
    def stopped(self) -> asyncio.Event:
        return self.local.stopped

    @property
    def fatal(self) -> BaseException | None:
        return self.namenode.fatal if self.namenode is not None else self.local.fatal

    @property
    def address(self) -> str:
        assert self.server is not None
        return self.server.address

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        local = self.local
        rpc = self.config.rpc
        client = self.config.client
        hello = Hello(PROTOCOL_VERSION, client_name="backupnode", user=client.user,
                      password=client.password, token=client.token)
        local.rpc = RpcClient(local.namenodes, rpc, hello=hello, ssl_context=client_context(rpc))
        try:
            fencing = parse_methods(self.config.backupnode.fencing_methods)
            await asyncio.to_thread(make_dirs, local.dir.root)  # durable in its parent
            local.dir.lock()
            await open_storage(local)
            self.server = self._make_server()
            await self.server.start(host, port)
            await self._start_http(self.server)
        except BaseException:
            await self.stop()
            raise
        self._takeover = Takeover(local, fencing)
        self._follower = Follower(local, self.server.address, self._journal_tailer())
        local.state = BackupState.FOLLOWING
        self._spawn("edits follower", self._follower.run())
        self._spawn("checkpointer", self.checkpointer.run())
        return self.server.address

    async def _start_http(self, server: RpcServer) -> None:
        from xdfs.backupnode import metrics

        server.metrics.add_collector("backupnode", lambda: metrics.families(self.local))
        self.http = await start_status_http(
            "backupnode", self.config.backupnode.http_address, self.config.http.body_bytes_max,
            server.metrics, lambda: metrics.status_facts(self.status()))

    def _journal_tailer(self) -> JournalTailer | None:
        """With namenode.shared_edits, the backup follows the quorum journal."""
        return journal_tailer(self.config) if self.config.namenode.shared_edits else None

    def _make_server(self) -> RpcServer:
        rpc = self.config.rpc
        version = self.local.dir.read_version()
        self._ids = (version.cluster_id, version.namespace_id)
        server = RpcServer(
            "backupnode", rpc, cluster_id=version.cluster_id,
            authenticator=NamespaceAuthenticator(lambda: self.local.namespace, self.local.now_ms),
            ssl_context=server_context(rpc),
        )
        add_system_services(server, "backupnode")
        server.add_service(HA_SERVICE, HaHandlers(self.ha_status))
        server.add_service(BACKUP_SERVICE, BackupHandlers(self.local, self))
        following = self.local.namenodes[0]
        stub = NotActiveHandlers(lambda: f"this is a BackupNode following {following}")
        for service in NAMENODE_SERVICES:
            server.add_service(service, stub)
        return server

    def _spawn(self, name: str, work: Coroutine[Any, Any, None]) -> None:
        self._tasks.append(asyncio.get_running_loop().create_task(work, name=name))

    async def stop(self) -> None:
        local = self.local
        await self._stop_tasks()
        if self.http is not None:
            await self.http.stop()
        if self.namenode is not None:
            await self.namenode.stop()  # it owns the server, the edits and the dir now
        else:
            if self.server is not None:
                await self.server.close()
            if local.edits is not None and local.fatal is None:
                with contextlib.suppress(StorageError):
                    await local.edits.close()
            with contextlib.suppress(Exception):
                local.dir.unlock()
        if local.rpc is not None:
            await local.rpc.close()
        local.stopped.set()

    async def _stop_tasks(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    # -- the duties, one step at a time (tests, benchmarks) --

    async def fetch_once(self) -> int:
        assert self._follower is not None, "not started"
        return await self._follower.fetch_once()

    async def checkpoint(self) -> int:
        return await self.checkpointer.checkpoint()

    # -- status and takeover ------------------------------------------------------------

    def status(self) -> BackupStatus:
        local = self.local
        return BackupStatus(
            local.state.value, self.server.address if self.server else "", local.namenodes,
            local.synced_txid, local.namenode_synced_txid, local.last_fetch_ms,
            local.image_txid, int(local.last_checkpoint_s * 1000),
            local.checkpoints_uploaded, local.bootstraps,
            local.namespace.inode_count() if local.namespace else 0,
        )

    def ha_status(self) -> HaStatus:
        namespace = self.local.namespace
        cluster_id, namespace_id = self._ids
        return HaStatus(ROLE_BACKUP, namespace.epoch if namespace else 0,
                        self.local.synced_txid, cluster_id, namespace_id, os.getpid())

    async def transition_to_active(self) -> TakeoverResponse:
        assert self.server is not None and self._takeover is not None, "not started"
        namenode, answer = await self._takeover.run(
            self.server, (*NAMENODE_SERVICES, HA_SERVICE), self._stop_tasks
        )
        self.namenode = namenode
        self._spawn("namenode watch", self._watch_namenode(namenode))
        return answer

    async def _watch_namenode(self, namenode: NameNode) -> None:
        await namenode.stopped.wait()
        self.local.stopped.set()
