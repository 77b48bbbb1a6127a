"""The NameNode process: storage, recovery, RPC serving and background duties.

Start: lock every name dir (a second NameNode on the same dir refuses to start), load the
newest valid image and replay the edits after it, refuse to go on when a configured peer
is ahead (:mod:`xdfs.namenode.ha`), open the edits log for writing at the next txid (a
promoted backup logs its new epoch first), then serve (in safe mode until enough blocks
are reported, when the namespace has any). Background duties: checkpoints by time or txn
count, lease recovery, the trash emptier, token-key rotation, and the block manager's:
DataNode liveness, the replication monitor and the end of startup safe mode. Stop
(SIGTERM): stop serving, sync and finalize the edits log, release the locks. A failing
name dir is fatal: the edits log fails every waiter (nothing is acknowledged) and the
NameNode stops serving at once.

Serving as a standby and the transitions between standby and active are the NameNode's
HA half, :mod:`xdfs.namenode.ha_transitions` (a mixin sharing this state).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from xdfs.common.files import atomic_write
from xdfs.common.images import image_chunks, receive_image
from xdfs.config import XdfsConfig
from xdfs.errors import (
    InvalidArgument,
    SafeModeError,
    StorageError,
    XdfsError,
)
from xdfs.http.server import HttpServer
from xdfs.namenode import hosts
from xdfs.namenode.blocks.admin_states import HostLists
from xdfs.namenode.blocks.topology import Topology
from xdfs.namenode.editlog.editlog import EditLog, EditLogSettings
from xdfs.namenode.editlog.replicator import EditsReplicator
from xdfs.namenode.editlog.shared import SharedEdits
from xdfs.namenode.ha import HaHandlers, Position, check_peers
from xdfs.namenode.ha_transitions import HaTransitions, journal_lost
from xdfs.namenode.handlers.backup import BackupProtocolHandlers
from xdfs.namenode.handlers.client import AdminHandlers, ClientHandlers
from xdfs.namenode.handlers.datanode import DataNodeHandlers
from xdfs.namenode.handlers.ha_service import HaServiceHandlers
from xdfs.namenode.image.background import finish_checkpoint, start_checkpoint
from xdfs.namenode.image.fsimage import header_check, image_head
from xdfs.namenode.image.recovery import check_versions, load_namespace, purge
from xdfs.namenode.image.storage import StorageDirectory, VersionInfo
from xdfs.namenode.metrics import NameNodeMetrics, StartupProgress
from xdfs.namenode.namespace.ops import NewEpochOp, Op, SetDataNodeSecretOp
from xdfs.namenode.namespace.tree import Namespace
from xdfs.namenode.namesystem import Namesystem, Plan
from xdfs.namenode.retry_cache import RetryCache, record_applied
from xdfs.namenode.security import passwords
from xdfs.namenode.security.auth import NameNodeAuth
from xdfs.namenode.sharded import (
    ShardingHandlers,
    ShardState,
    check_namespace_shard,
    guarded,
)
from xdfs.namenode.standby import (
    StandbyTailer,
)
from xdfs.namenode.tasks import cancel, every
from xdfs.protocol.backup import NAMENODE_BACKUP_PROTOCOL, ImageHead, UploadImageResponse
from xdfs.protocol.datanode import DATANODE_PROTOCOL
from xdfs.protocol.ha import (
    HA_SERVICE,
    HA_SERVICE_PROTOCOL,
    STATE_ACTIVE,
    STATE_INITIALIZING,
    STATE_STANDBY,
    STATE_STOPPING,
    TRANSITION_TO_ACTIVE,
)
from xdfs.protocol.namenode import ADMIN_SERVICE, CLIENT_SERVICE, NameNodeStatus
from xdfs.protocol.sharding import SHARDING_SERVICE
from xdfs.protocol.system_handlers import add_system_services
from xdfs.rpc.server import RpcServer
from xdfs.rpc.service import Service
from xdfs.rpc.streams import StreamReceiver
from xdfs.rpc.tls import server_context

log = logging.getLogger(__name__)


class NameNode(HaTransitions):
    def __init__(
        self,
        config: XdfsConfig,
        name_dirs: list[Path],
        *,
        clock: Callable[[], float] = time.time,
        free_bytes: Callable[[Path], int] = lambda path: shutil.disk_usage(path).free,
    ) -> None:
        """``free_bytes``: how free space on a name dir is read (tests inject readings)."""
        assert name_dirs, "a NameNode needs at least one name dir"
        self.config = config
        self.clock = clock
        self.free_bytes = free_bytes
        self.dirs = [StorageDirectory(d) for d in name_dirs]
        self.dir_free_bytes: dict[str, int] = {}  # as last read by the resource checker
        self.server: RpcServer | None = None
        self.edits: EditLog | None = None
        self.fs: Namesystem | None = None
        self.auth: NameNodeAuth | None = None
        self.datanode_handlers: DataNodeHandlers | None = None
        self.replicator: EditsReplicator | None = None
        self.shared: SharedEdits | None = None
        #: Filled while the edits are replayed at start, then the namesystem's.
        self.retry_cache = RetryCache(
            config.namenode.retry_cache_entries_max, config.namenode.retry_cache_expiry_s
        )
        self.version: VersionInfo | None = None
        self.image_txid = 0
        self.last_checkpoint_s = clock()
        self.started_at_ms = int(clock() * 1000)
        self.stopped = asyncio.Event()
        self.fatal: BaseException | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._side_tasks: set[asyncio.Task[None]] = set()
        self._checkpoint_lock = asyncio.Lock()
        self._lease_failures: set[tuple[str, str]] = set()  # logged once each
        # HA (a NameNode of ha.namenodes on a quorum journal): starts standby
        self.ha_enabled = bool(config.namenode.shared_edits and config.ha.namenodes)
        self.ha_state = STATE_INITIALIZING
        self.standby: StandbyTailer | None = None
        self._standby_task: asyncio.Task[None] | None = None
        self._rejoin_task: asyncio.Task[None] | None = None  # fenced: back to standby
        self._transition_lock = asyncio.Lock()
        self._uploaded_txid = 0  # the newest standby image the active is known to hold
        self._last_install_s = -1e18  # when a backup or standby last uploaded an image
        self.http: HttpServer | None = None
        self.metrics: NameNodeMetrics | None = None  # once serving (its server's registry)
        #: Startup phases, for the web UI's Startup progress page.
        self.startup = StartupProgress()
        #: This NameNode's shard of a sharded namespace (None: unsharded).
        self.shards = ShardState(config.sharding, trash_enabled=config.namenode.trash_interval_s > 0
                                 ) if config.sharding.enabled else None

    @property
    def address(self) -> str:
        assert self.server is not None
        return self.server.address

    @property
    def http_address(self) -> str:
        """host:port of the HTTP server (WebHDFS); "" when namenode.http_address is unset."""
        return self.http.address if self.http is not None else ""

    # -- lifecycle ----------------------------------------------------------------------

    async def start(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        loaded: tuple[Namespace, int] | None = None,
        server: RpcServer | None = None,
        new_epoch: bool = False,
    ) -> str:
        """``loaded``: the namespace and its last txid, already read from these dirs (a
        promoted BackupNode's hot copy); ``server``: serve on this running server (its
        address) instead of starting one; ``new_epoch``: a promotion (the old NameNode is
        fenced): log a higher active epoch before anything is served."""
        topology_and_hosts = hosts.load(self.config.namenode)  # a bad hosts file: no start
        try:
            for d in self.dirs:
                d.lock()
            version = self.version = check_versions(self.dirs)
            self.image_txid = max(max(d.images(), default=0) for d in self.dirs)
            self.startup.begin("load image and replay edits", self.clock())
            if self.ha_enabled and loaded is None and not new_epoch:
                self.ha_state = STATE_STANDBY
                namespace, last_txid = await self._load_as_standby(version)
            elif self.config.namenode.shared_edits:  # (loaded: a promoted BackupNode's)
                namespace, last_txid = await self._take_over_shared_edits(version, loaded)
            else:
                namespace, last_txid = loaded or load_namespace(
                    self.dirs, Namespace, self._remember_call
                )
            if not new_epoch and not self.shared:  # a promotion fenced the others already
                await check_peers(self.config, self.config.namenode.peers,
                                  Position(namespace.epoch, last_txid),
                                  (version.cluster_id, version.namespace_id))
            self.startup.end(f"image at txid {self.image_txid}, edits replayed to txid "
                             f"{last_txid}; {namespace.inode_count()} inodes", self.clock())
            await self._open_edits(last_txid)
        except BaseException:
            if self.shared is not None:
                await self.shared.close()
            self._unlock()
            raise
        assert self.edits is not None
        self._install_namesystem(namespace, topology_and_hosts)
        assert self.fs is not None
        self.server = self._make_server(version.cluster_id, version.namespace_id, server)
        self.metrics = NameNodeMetrics(self, self.server.metrics)
        self.edits.on_flushed = self.metrics.flushed
        if self.ha_state == STATE_STANDBY:
            self._refuse_as_standby()
            self._serve_standby(last_txid)
            await self._start_http(starting=True)  # answers StandbyException until active
        else:
            await self._serve_active(new_epoch=new_epoch)
        if server is None:
            await self.server.start(host, port)
        await self._join_shards()
        log.info("namespace loaded: %d inodes, last txid %d; %s", namespace.inode_count(),
                 last_txid, self.ha_state)
        if self.fs.safe_mode.on:
            log.info("in safe mode: %s", self.fs.safe_mode.reason)
        return self.server.address

    async def _join_shards(self) -> None:
        """A shard registers in ZooKeeper once it serves (at the address clients reach);
        it answers NoSlotMap until it holds a map."""
        if self.shards is None:
            return
        assert self.server is not None and self.fs is not None
        try:
            check_namespace_shard(self.fs.ns.next_inode_id, self.config.sharding.shard)
            await self.shards.start(self.server.address)
        except BaseException:
            await self.stop()
            raise

    def _install_namesystem(self, namespace: Namespace,
                            topology_and_hosts: tuple[Topology, HostLists]) -> None:
        """A namesystem (block map, leases, safe mode) and its login checks over the loaded
        ``namespace``, writing to the open edits log."""
        assert self.edits is not None
        self.fs = Namesystem(namespace, self.edits, self.config.namenode, clock=self.clock,
                             retry_cache=self.retry_cache)
        hosts.install(self.fs.blocks, topology_and_hosts)
        self.auth = NameNodeAuth(self.fs)

    async def _open_edits(self, last_txid: int) -> None:
        """The edits log from ``last_txid + 1``: local dirs, and the shared journal when
        this NameNode is its writer."""
        settings = EditLogSettings.from_config(self.config.namenode)
        extra = [self.shared.journal()] if self.shared else []
        self.edits = EditLog.for_storage(self.dirs, settings, on_fatal=self._on_fatal,
                                         extra_journals=extra)
        await self.edits.open_for_write(last_txid + 1)
        if self.metrics is not None:
            self.edits.on_flushed = self.metrics.flushed

    async def _serve_active(self, *, new_epoch: bool) -> None:
        """Serve as the active NameNode: log a raised epoch first when this is a
        promotion, then the services and duties of an active one."""
        assert self.fs is not None and self.edits is not None and self.auth is not None
        assert self.server is not None
        self.fs.edits = self.edits
        if new_epoch:
            await self._raise_epoch()
        if self.fs.blocks.ha.standby:  # (after the raise: answers say active from here)
            self._take_over_block_map()
        await self._check_resources()
        nn = self.config.namenode
        self.replicator = EditsReplicator(
            self.edits, self.dirs, nn.edits_fetch_bytes_max, nn.edits_fetch_wait_max_s,
            self.clock,
        )
        self._add_active_services(self.server)
        await self.auth.rotate_keys()
        await self._publish_datanode_secret()
        await self._start_http()
        self._start_duties()
        self.ha_state = STATE_ACTIVE

    # -- replay and promotion -------------------------------------------------------------

    def _remember_call(self, namespace: Namespace, txid: int, op: Op) -> None:
        """Replay: an op logged by an at-most-once call becomes its retry-cache entry."""
        record_applied(self.retry_cache, op, namespace, txid, self.clock())

    async def _raise_epoch(self) -> None:
        """The first op of a promoted NameNode, durable before any call is served: every
        image, edit and follower after it carries the new epoch, and DataNodes that saw it
        obey nobody with an older one (the fenced NameNode)."""
        assert self.fs is not None
        ns = self.fs.ns
        await self.fs.mutate("new epoch", lambda: Plan.of([NewEpochOp(ns.epoch + 1)], None),
                             allowed_in_safe_mode=True)
        log.warning("active epoch is now %d (txid %d)", ns.epoch, self.fs.edits.last_txid)

    async def _start_http(self, *, starting: bool = False) -> None:
        """The WebHDFS gateway, the web UI and /metrics on namenode.http_address (when set),
        on this event loop, for the process's whole life: a standby's gateway answers
        StandbyException and its UI shows its state (browsing is the active's). A
        NameNode that is starting stops on a busy port (saying why); one just made active
        by a failover logs it and serves RPC, what clients fail over to (the port may
        still be held by a paused old active on this host)."""
        starting = starting or self.ha_state == STATE_INITIALIZING
        try:
            await self._start_http_server()
        except OSError as exc:
            if starting:
                await self.stop()
                raise
            log.error("WebHDFS gateway not started on %s: %s", self.config.namenode.http_address,
                      exc)
        except BaseException:
            if starting:
                await self.stop()
            raise

    async def _stop_http(self) -> None:
        if self.http is not None:
            await self.http.stop()
            self.http = None

    async def _start_http_server(self) -> None:
        # One server for the process's life (HA transitions keep it): the address others
        # know holds, and a standby answers at it.
        address = self.config.namenode.http_address
        if not address or self.http is not None:
            return
        assert self.fs is not None and self.auth is not None and self.server is not None
        from xdfs.namenode.webhdfs.gateway import WebHdfsGateway
        from xdfs.namenode.webui import WebUi

        http = HttpServer("namenode", self.config.http.body_bytes_max, self.config.http)
        gateway = WebHdfsGateway(self.config, self, lambda: self.address, path_check=(
            self.shards.check_http if self.shards is not None else None))
        http.add_routes(gateway.routes())
        http.add_routes(WebUi(self, gateway).routes())
        await http.start(address)
        self.http = http

    async def _publish_datanode_secret(self) -> None:
        """Write the DataNode secret to ``datanode.secret`` (0600) in every name dir, for
        the DataNodes' ``datanode.secret_file``; a namespace formatted before secrets
        existed gets one first."""
        assert self.fs is not None
        fs = self.fs

        def plan() -> Plan[None]:
            if fs.ns.datanode_secret:
                return Plan.of((), None)
            secret = os.urandom(passwords.DATANODE_SECRET_BYTES)
            return Plan.of([SetDataNodeSecretOp(secret)], None)

        if not fs.ns.datanode_secret:
            await fs.mutate("set the DataNode secret", plan, allowed_in_safe_mode=True)
        text = passwords.datanode_secret_text(fs.ns.datanode_secret).encode("ascii")
        for d in self.dirs:
            path = d.root / passwords.DATANODE_SECRET_FILE
            if not path.exists() or path.read_bytes() != text:
                atomic_write(path, text, mode=0o600)

    def _make_server(
        self, cluster_id: str, namespace_id: int, server: RpcServer | None
    ) -> RpcServer:
        assert self.fs is not None and self.auth is not None
        if server is None:
            rpc = self.config.rpc
            server = RpcServer(
                "namenode", rpc, cluster_id=cluster_id, ssl_context=server_context(rpc)
            )
            add_system_services(server, "namenode")
        server.add_service(HA_SERVICE, HaHandlers(self.ha_status))
        ha_protocol = self.ha_enabled or not server.route(TRANSITION_TO_ACTIVE.name)
        # (a promoted BackupNode's server keeps its own transition_to_active)
        self._attach_namesystem(server, cluster_id, namespace_id, ha_protocol=ha_protocol)
        return server

    def _attach_namesystem(self, server: RpcServer, cluster_id: str, namespace_id: int, *,
                           ha_protocol: bool) -> None:
        """Point the server's logins, HA transitions and DataNode service at the current
        namesystem (at start, and when a fenced NameNode rejoins as standby)."""
        assert self.fs is not None and self.auth is not None
        server.authenticator = self.auth
        if ha_protocol:
            server.remove_service(HA_SERVICE_PROTOCOL)
            server.add_service(HA_SERVICE_PROTOCOL, HaServiceHandlers(
                self, self.auth, self.config.ha.automatic_failover))
        self.datanode_handlers = DataNodeHandlers(self.fs, self.auth, cluster_id, namespace_id)
        server.remove_service(SHARDING_SERVICE)
        server.add_service(SHARDING_SERVICE, ShardingHandlers(self.fs, self.shards))

    def _add_active_services(self, server: RpcServer) -> None:
        assert self.fs is not None and self.auth is not None and self.replicator is not None
        assert self.datanode_handlers is not None
        services: list[tuple[Service, object]] = [
            (CLIENT_SERVICE, ClientHandlers(self.fs, self.auth)),
            (ADMIN_SERVICE, AdminHandlers(self.fs, self.auth, self.save_namespace,
                                          self.roll_edits, self.status)),
            (DATANODE_PROTOCOL, self.datanode_handlers),
            (NAMENODE_BACKUP_PROTOCOL, BackupProtocolHandlers(
                self.fs, self.auth, self.replicator, self.newest_image, self.install_image)),
        ]
        if self.shards is not None:  # every path checked against the slot map first
            services[:2] = [(service, guarded(impl, service, self.shards.check))
                            for service, impl in services[:2]]
        for service, impl in services:
            server.remove_service(service)
            server.add_service(service, impl)

    async def stop(self) -> None:
        """Graceful stop: no new calls, every appended edit synced, segment finalized."""
        self.ha_state = STATE_STOPPING
        standby_task = [self._standby_task] if self._standby_task else []
        if self._rejoin_task is not None:
            standby_task.append(self._rejoin_task)
        await cancel([*self._tasks, *self._side_tasks, *standby_task])
        self._tasks.clear()
        if self.standby is not None:
            await self.standby.tailer.close()
        await self._stop_http()
        if self.server is not None:
            await self.server.close()
        if self.shards is not None:
            await self.shards.stop()
        if self.edits is not None and self.fatal is None:
            await self.edits.close()  # closes the shared edits too, as one of its journals
        elif self.shared is not None:
            await self.shared.close()
        if self.auth is not None:
            self.auth.close()
        self._unlock()
        self.stopped.set()

    def _unlock(self) -> None:
        for d in self.dirs:
            with contextlib.suppress(Exception):
                d.unlock()

    def _on_fatal(self, error: BaseException) -> None:
        if self.fatal is not None or self.rejoining:
            return  # (rejoining: whatever else of the old state fails is dropped anyway)
        if self.ha_enabled and journal_lost(error):
            self._fenced(error)  # back to standby (ha_transitions), not a stop
            return
        log.critical(
            "NameNode stopping: edits log failed (%s); nothing after txid %s is acknowledged",
            error,
            self.edits.synced_txid if self.edits else "?",
        )
        self.fatal = error
        if self.server is not None:
            for conn in list(self.server.connections):
                conn.shutdown()
        self.stopped.set()

    # -- checkpoints --------------------------------------------------------------------

    async def save_namespace(self) -> int:
        """Roll the edits log and write an image at the segment boundary, then purge.

        The image is written by a forked child (:mod:`.image.background`): the NameNode
        serves on while it is written, from a copy of the namespace as it was at ``txid``."""
        async with self._checkpoint_lock:
            try:
                txid = await self._checkpoint()
            except OSError as exc:  # a disk that fails (or loses power) under the save
                raise StorageError(f"checkpoint failed: {exc}") from exc
            self.last_checkpoint_s = self.clock()
            log.info("checkpoint written at txid %d", txid)
            return txid

    async def _checkpoint(self) -> int:
        assert self.edits is not None and self.fs is not None
        await self.edits.roll()
        await self.edits.sync()
        # No await from here to the fork: the image must hold exactly the ops up to
        # ``txid`` (ops appended during the sync above are in it and in the log).
        txid = self.edits.last_txid
        if txid > self.image_txid or not any(d.images() for d in self.dirs):
            await finish_checkpoint(start_checkpoint(
                self.dirs, self.fs.ns, txid, self.config.namenode.image_writer_timeout_s))
            self.image_txid = txid
        self._purge()
        return txid

    def _purge(self) -> int:
        """Delete images beyond the retained ones and the edits only they needed."""
        assert self.edits is not None
        deleted = purge(self.dirs, self.config.namenode.images_retained)
        oldest = min(self.dirs[0].images(), default=0)
        self.edits.forget_segments_before(oldest + 1)
        if self.shared is not None:  # the journal keeps what the local dirs keep
            self._background(self.shared.purge(oldest + 1), "purge shared edits")
        return len(deleted)

    def _background(self, work: Awaitable[None], what: str) -> None:
        async def run() -> None:
            try:
                await work
            except XdfsError as exc:
                log.warning("%s: %s", what, exc.message)

        task = asyncio.get_running_loop().create_task(run(), name=what)
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)

    async def newest_image(self) -> tuple[ImageHead, Path]:
        """The newest image of the first dir that has one (for fetch_image)."""
        for d in self.dirs:
            txids = d.images()
            if txids:
                path = d.image_path(max(txids))
                return image_head(path, max(txids)), path
        raise StorageError("this NameNode has no fsimage")

    async def install_image(self, head: ImageHead, chunks: StreamReceiver) -> UploadImageResponse:
        """Install a checkpoint uploaded by the backup: verified, then atomically renamed
        into every name dir, then old images and edits purged (seed 003)."""
        assert self.edits is not None
        if head.txid > self.edits.synced_txid:
            raise InvalidArgument(
                f"checkpoint at txid {head.txid} is from the future: this NameNode's log "
                f"ends at txid {self.edits.synced_txid}"
            )
        if head.txid <= self.image_txid:
            raise InvalidArgument(
                f"checkpoint at txid {head.txid} is stale: this NameNode has an image at "
                f"txid {self.image_txid}"
            )
        version = self.dirs[0].read_version()
        ids = (version.namespace_id, version.cluster_id)
        async with self._checkpoint_lock:
            check = header_check(head, ids)
            first = await receive_image(head, chunks, self.dirs[0].current, check=check)
            for d in self.dirs[1:]:  # verified again on the way: a local copy can fail too
                await receive_image(head, image_chunks(first), d.current, check=check)
            self.image_txid = max(self.image_txid, head.txid)
            self.last_checkpoint_s = self._last_install_s = self.clock()
            purged = self._purge()
        log.info("installed the checkpoint uploaded at txid %d (%d bytes)",
                 head.txid, head.size_bytes)
        return UploadImageResponse(True, self.image_txid, purged)

    async def roll_edits(self) -> int:
        assert self.edits is not None
        await self.edits.roll()
        return self.edits.current_segment_start

    def status(self) -> NameNodeStatus:
        assert self.edits is not None and self.fs is not None
        version = self.dirs[0].read_version()
        return NameNodeStatus(
            version.cluster_id,
            version.namespace_id,
            self.edits.last_txid,
            self.edits.synced_txid,
            self.image_txid,
            self.edits.current_segment_start,
            self.fs.safe_mode.on,
            self.fs.ns.inode_count(),
            len(self.fs.ns.files_under_construction()),
            [str(d.root) for d in self.dirs],
            self.started_at_ms,
            self.replicator.backup_infos(self.config.namenode.backup_forget_s)
            if self.replicator else [],
            self.fs.safe_mode.reason,
            [self.dir_free_bytes.get(str(d.root), -1) for d in self.dirs],
        )

    # -- background duties --------------------------------------------------------------

    def _start_duties(self) -> None:
        nn = self.config.namenode
        duties: list[tuple[str, float, Callable[[], Awaitable[None]]]] = [
            ("checkpointer", nn.checkpoint_check_interval_s, self._maybe_checkpoint),
            ("lease monitor", nn.lease_check_interval_s, self._recover_leases),
            ("token keys", max(1.0, min(nn.token_key_rotation_s / 4, 3600.0)), self._rotate),
            ("heartbeat monitor", nn.heartbeat_interval_s, self._check_datanodes),
            ("replication monitor", nn.replication_check_interval_s, self._replicate),
            ("safe mode monitor", nn.safe_mode_check_interval_s, self._check_safe_mode),
            ("resource checker", nn.resource_check_interval_s, self._check_resources),
        ]
        if nn.trash_interval_s > 0:
            duties.append(("trash emptier", nn.trash_checkpoint_interval_s, self._empty_trash))
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(every(name, interval, duty)) for name, interval, duty in duties
        ]

    async def _maybe_checkpoint(self) -> None:
        assert self.edits is not None and self.fs is not None
        if self.fs.safe_mode.resources_reason:
            return  # an image could take the last of the space the edits log needs
        nn = self.config.namenode
        # A backup that follows, or a standby that uploads, checkpoints for us (without
        # pausing this loop); we step in only when its checkpoints are twice overdue.
        followed = self.replicator is not None and self.replicator.followed_within(
            nn.backup_active_window_s)
        uploading = self.clock() - self._last_install_s < max(nn.backup_active_window_s,
                                                              2 * nn.checkpoint_period_s)
        factor = 2 if followed or uploading else 1
        due_by_time = self.clock() - self.last_checkpoint_s >= factor * nn.checkpoint_period_s
        due_by_txns = self.edits.last_txid - self.image_txid >= factor * nn.checkpoint_txns
        if due_by_time or due_by_txns:
            await self.save_namespace()

    async def _recover_leases(self) -> None:
        """Recover each expired lease on its own: a file that fails is logged (once) and
        skipped, the others are recovered."""
        assert self.fs is not None
        fs = self.fs
        for path in fs.due_lease_recoveries():
            try:
                await fs.recover_abandoned(path)
            except SafeModeError:
                return
            except XdfsError as exc:
                if (path, exc.message) not in self._lease_failures:
                    self._lease_failures.add((path, exc.message))
                    log.warning("lease recovery of %s failed: %s", path, exc.message)

    async def _empty_trash(self) -> None:
        assert self.fs is not None
        fs = self.fs
        for user in fs.trash_users():
            with contextlib.suppress(SafeModeError):
                await fs.expunge(user, immediate=False)

    async def _check_datanodes(self) -> None:
        assert self.fs is not None
        for node in self.fs.blocks.check_heartbeats():
            log.warning(
                "DataNode %s at %s declared dead: no heartbeat for %.1f s",
                node.node_id, node.address, self.clock() - node.last_heartbeat_s,
            )

    async def _replicate(self) -> None:
        assert self.fs is not None
        self.fs.blocks.replication_tick()

    async def _check_resources(self) -> None:
        """HDFS's NameNodeResourceChecker: safe mode while a name dir is low on space."""
        assert self.fs is not None
        readings: dict[str, int] = {}
        for d in self.dirs:
            try:
                readings[str(d.root)] = self.free_bytes(d.root)
            except OSError as exc:
                log.error("cannot read the free space of %s: %s", d.root, exc)
                readings[str(d.root)] = 0  # unreadable: as good as full
        self.dir_free_bytes = readings
        message = self.fs.safe_mode.resources_checked(
            readings, self.config.namenode.resource_free_bytes_min
        )
        if message and self.fs.safe_mode.resources_reason:
            log.warning("%s", message)
        elif message:
            log.info("%s", message)

    async def _check_safe_mode(self) -> None:
        assert self.datanode_handlers is not None
        self.datanode_handlers.update_safe_mode()

    async def _rotate(self) -> None:
        assert self.auth is not None
        with contextlib.suppress(SafeModeError):
            await self.auth.rotate_keys()

