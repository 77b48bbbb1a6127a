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
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
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
    NotActive,
    SafeModeError,
    Standby,
    StorageError,
    XdfsError,
)
from xdfs.http.server import HttpServer
from xdfs.namenode import hosts
from xdfs.namenode.editlog.editlog import EditLog, EditLogSettings
from xdfs.namenode.editlog.replay import checkpoint_due
from xdfs.namenode.editlog.replicator import EditsReplicator
from xdfs.namenode.editlog.shared import SharedEdits, journal_tailer
from xdfs.namenode.ha import HaHandlers, Position, check_peers
from xdfs.namenode.handlers.backup import BackupProtocolHandlers
from xdfs.namenode.handlers.client import AdminHandlers, ClientHandlers
from xdfs.namenode.handlers.datanode import DataNodeHandlers
from xdfs.namenode.handlers.ha_service import HaServiceHandlers
from xdfs.namenode.image.background import finish_checkpoint, start_checkpoint
from xdfs.namenode.image.fsimage import header_check, image_head
from xdfs.namenode.image.recovery import check_versions, load_namespace, purge
from xdfs.namenode.image.storage import StorageDirectory, VersionInfo
from xdfs.namenode.image.upload import upload_checkpoint
from xdfs.namenode.metrics import NameNodeMetrics, StartupProgress
from xdfs.namenode.namespace.ops import NewEpochOp, Op, SetDataNodeSecretOp
from xdfs.namenode.namespace.tree import Namespace
from xdfs.namenode.namesystem import Namesystem, Plan
from xdfs.namenode.retry_cache import RetryCache, record_applied
from xdfs.namenode.security import passwords
from xdfs.namenode.security.auth import NameNodeAuth
from xdfs.namenode.standby import (
    StandbyAdminHandlers,
    StandbyTailer,
    TrackedNamespace,
    committed_txid,
    trim_unconfirmed,
)
from xdfs.protocol.backup import NAMENODE_BACKUP_PROTOCOL, ImageHead, UploadImageResponse
from xdfs.protocol.datanode import DATANODE_PROTOCOL
from xdfs.protocol.ha import (
    HA_SERVICE,
    HA_SERVICE_PROTOCOL,
    ROLE_ACTIVE,
    ROLE_STANDBY,
    STATE_ACTIVE,
    STATE_INITIALIZING,
    STATE_STANDBY,
    STATE_STOPPING,
    TRANSITION_TO_ACTIVE,
    UNHEALTHY_FAILED,
    UNHEALTHY_JOURNAL,
    UNHEALTHY_RESOURCES,
    UNHEALTHY_STARTING,
    HaStatus,
    HealthReport,
    ServiceStatus,
)
from xdfs.protocol.journal import JournalNamespace
from xdfs.protocol.namenode import ADMIN_SERVICE, CLIENT_SERVICE, NameNodeStatus
from xdfs.rpc.client import RpcClient
from xdfs.rpc.messages import PROTOCOL_VERSION, Hello
from xdfs.rpc.server import RpcServer
from xdfs.rpc.service import NotActiveHandlers, Service
from xdfs.rpc.streams import StreamReceiver
from xdfs.rpc.system import add_system_services
from xdfs.rpc.tls import client_context, server_context

log = logging.getLogger(__name__)


class NameNode:
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
        self._transition_lock = asyncio.Lock()
        self._uploaded_txid = 0  # the newest standby image the active is known to hold
        self._last_install_s = -1e18  # when a backup or standby last uploaded an image
        self.http: HttpServer | None = None
        self.metrics: NameNodeMetrics | None = None  # once serving (its server's registry)
        #: Startup phases, for the web UI's Startup progress page.
        self.startup = StartupProgress()

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
        self.fs = Namesystem(namespace, self.edits, self.config.namenode, clock=self.clock,
                             retry_cache=self.retry_cache)
        hosts.install(self.fs.blocks, topology_and_hosts)
        self.auth = NameNodeAuth(self.fs)
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
        log.info("namespace loaded: %d inodes, last txid %d; %s", namespace.inode_count(),
                 last_txid, self.ha_state)
        if self.fs.safe_mode.on:
            log.info("in safe mode: %s", self.fs.safe_mode.reason)
        return self.server.address

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

    async def _take_over_shared_edits(
        self, version: VersionInfo, loaded: tuple[Namespace, int] | None = None
    ) -> tuple[Namespace, int]:
        """Become the quorum journal's writer (fencing any older one), then load the
        namespace from the local dirs trimmed to the journal's end (or take the ``loaded``
        one: a standby's, whose dirs hold only committed txids) and catch it up with the
        journal (xdfs.namenode.editlog.shared)."""
        self.shared = SharedEdits(
            self.config, JournalNamespace(version.cluster_id, version.namespace_id),
            on_fatal=self._on_fatal,
        )
        currents = [d.current for d in self.dirs]
        end = await self.shared.take_over(currents, self.image_txid)
        if loaded is None:
            loaded = await asyncio.to_thread(
                load_namespace, self.dirs, Namespace, self._remember_call)
        namespace, last_txid = loaded
        last_txid = await self.shared.catch_up(
            self.dirs, namespace, last_txid, functools.partial(self._remember_call, namespace)
        )
        log.info("shared edits %s: writer epoch %d, journal ends at txid %s",
                 self.shared.uri, self.shared.writer.epoch, end)
        return namespace, last_txid

    # -- HA: standby and transitions -------------------------------------------------------

    async def _load_as_standby(self, version: VersionInfo) -> tuple[Namespace, int]:
        """A standby loads what its dirs hold of the committed history (xdfs.namenode.standby)
        and tails the rest from the journal."""
        self.ha_state = STATE_STANDBY
        reader = journal_tailer(self.config)
        try:
            committed = await committed_txid(reader.channels, reader.journal_id)
        finally:
            await reader.close()
        for d in self.dirs:
            trim_unconfirmed(d.current, max(committed, self.image_txid))
        return await asyncio.to_thread(load_namespace, self.dirs, Namespace,
                                       self._remember_call)

    def _refuse_as_standby(self) -> None:
        """Clients and backups get Standby (and move to the next address); DataNodes are
        served (a warm block map, no commands: blocks/failover.py), and so are two admin
        reads of that map (StandbyAdminHandlers)."""
        assert self.server is not None and self.fs is not None and self.auth is not None
        assert self.datanode_handlers is not None
        self.fs.blocks.become_standby()
        stub = NotActiveHandlers(lambda: "this NameNode is standby", Standby)
        admin = StandbyAdminHandlers(AdminHandlers(self.fs, self.auth, self.save_namespace,
                                                   self.roll_edits, self.status))
        services: list[tuple[Service, object]] = [
            (CLIENT_SERVICE, stub), (NAMENODE_BACKUP_PROTOCOL, stub), (ADMIN_SERVICE, admin),
            (DATANODE_PROTOCOL, self.datanode_handlers)]
        for service, impl in services:
            self.server.remove_service(service)
            self.server.add_service(service, impl)

    def _serve_standby(self, last_txid: int) -> None:
        """Tail the journal (the block map following it), checkpoint, and watch DataNode
        liveness (the services refuse or serve as a standby already)."""
        assert self.fs is not None and self.edits is not None
        nn = self.config.namenode
        self.standby = StandbyTailer(
            journal_tailer(self.config), TrackedNamespace(self.fs.ns, self.fs.blocks),
            self.edits, last_txid, batch_txns=nn.standby_tail_txns_max,
            on_applied=functools.partial(self._remember_call, self.fs.ns))
        loop = asyncio.get_running_loop()
        self._standby_task = loop.create_task(self._run_standby(self.standby),
                                              name="standby tailer")
        self._tasks = [
            loop.create_task(_every("standby checkpointer", nn.checkpoint_check_interval_s,
                                    self._maybe_standby_checkpoint)),
            loop.create_task(_every("heartbeat monitor", nn.heartbeat_interval_s,
                                    self._check_datanodes)),
        ]
        self.ha_state = STATE_STANDBY

    async def _run_standby(self, standby: StandbyTailer) -> None:
        try:
            await standby.run()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # the copy diverged or the local log failed
            self._on_fatal(exc)

    async def _stop_standby(self) -> int:
        """Stop tailing; the local log synced and finalized; returns the last txid."""
        assert self.standby is not None and self.edits is not None
        task, self._standby_task = self._standby_task, None
        await _cancel([*self._tasks, *([task] if task else [])])
        self._tasks = []
        last = self.standby.last_txid
        await self.edits.close()
        await self.standby.tailer.close()
        self.standby = None
        return last

    async def transition_to_active(self) -> ServiceStatus:
        """Standby -> active: fence every older writer through a new journal epoch,
        recover and catch up, raise the namespace epoch, serve. A failure on the way
        stops this NameNode (it may be half way: its controller sees it unhealthy)."""
        async with self._transition_lock:
            if self.ha_state == STATE_ACTIVE:
                return self.service_status()
            if self.ha_state != STATE_STANDBY or self.fatal is not None:
                raise NotActive(f"cannot become active from {self.ha_state}")
            started = time.monotonic()
            try:
                await self._become_active()
            except BaseException as exc:
                self._on_fatal(exc)
                raise
            log.warning("transitioned to active in %.2f s (epoch %d, txid %d)",
                        time.monotonic() - started, self.fs.ns.epoch if self.fs else 0,
                        self.edits.last_txid if self.edits else 0)
            return self.service_status()

    async def _become_active(self) -> None:
        assert self.fs is not None and self.version is not None
        last = await self._stop_standby()
        _namespace, last = await self._take_over_shared_edits(self.version,
                                                              loaded=(self.fs.ns, last))
        await self._open_edits(last)
        await self._serve_active(new_epoch=True)

    def _take_over_block_map(self) -> None:
        """The standby's namesystem and warm block map go on serving (no fresh one): the
        leases of the files open now, the reports that waited for the last edits placed,
        every replica judged again, deletions postponed until each DataNode heartbeats
        (blocks/failover.py), and safe mode ends as soon as the reports it has meet the
        threshold, after ``failover_safe_mode_extension_s``."""
        assert self.fs is not None
        fs = self.fs
        assert self.datanode_handlers is not None
        fs.restore_leases()
        fs.blocks.become_active()
        log.info("took over the standby's block map (%d replica(s) from the future); no "
                 "deletion until each of %d live DataNode(s) heartbeats",
                 fs.blocks.future_block_count(), len(fs.blocks.ha.stale_nodes()))
        fs.safe_mode.extension_s = self.config.namenode.failover_safe_mode_extension_s
        if fs.ns.block_count():
            fs.safe_mode.wait_for_blocks()
        fs.safe_mode.reached_s = None
        self.datanode_handlers.update_safe_mode()  # (it ends at once when the map is full)

    async def transition_to_standby(self) -> ServiceStatus:
        """Active -> standby: stop serving clients, sync and close the edits log (every
        edit in it is then on a majority), and tail the journal from there."""
        async with self._transition_lock:
            if self.ha_state == STATE_STANDBY:
                return self.service_status()
            if self.ha_state != STATE_ACTIVE or not self.ha_enabled:
                raise NotActive(f"cannot become standby from {self.ha_state}"
                                + ("" if self.ha_enabled else " (HA is not configured)"))
            try:
                await self._become_standby()
            except BaseException as exc:
                self._on_fatal(exc)
                raise
            log.warning("transitioned to standby at txid %d",
                        self.standby.last_txid if self.standby else 0)
            return self.service_status()

    async def _become_standby(self) -> None:
        assert self.edits is not None and self.server is not None
        self.ha_state = STATE_STANDBY
        self._refuse_as_standby()  # the WebHDFS gateway refuses too (it reads ha_state)
        await _cancel([*self._tasks, *self._side_tasks])
        self._tasks = []
        await self.edits.sync()
        last = self.edits.synced_txid
        await self.edits.close()  # closes the shared edits writer too
        self.shared = None
        self.replicator = None
        await self._open_edits(last)
        self._serve_standby(last)

    def service_status(self) -> ServiceStatus:
        last = (self.standby.last_txid if self.standby is not None
                else self.edits.synced_txid if self.edits is not None else 0)
        epoch = self.fs.ns.epoch if self.fs is not None else 0
        ready, reason = True, ""
        if self.fatal is not None:
            ready, reason = False, f"stopped: {self.fatal}"
        elif self.ha_state == STATE_STANDBY and self.standby is not None and self.standby.error:
            ready, reason = False, f"cannot read the journal: {self.standby.error}"
        return ServiceStatus(self.ha_state, epoch, last, ready, reason)

    def health(self) -> HealthReport:
        if self.fatal is not None:
            return HealthReport(False, UNHEALTHY_FAILED, str(self.fatal))
        if self.ha_state == STATE_INITIALIZING:
            return HealthReport(False, UNHEALTHY_STARTING, "loading the namespace")
        if self.fs is not None and self.fs.safe_mode.resources_reason:
            return HealthReport(False, UNHEALTHY_RESOURCES, self.fs.safe_mode.resources_reason)
        if self.standby is not None and self.standby.error:  # it could not become active
            return HealthReport(False, UNHEALTHY_JOURNAL, self.standby.error)
        return HealthReport(True)

    async def _maybe_standby_checkpoint(self) -> None:
        """A standby saves images of its namespace by the checkpoint rule (tailing pauses
        while one is written, in a thread; the active does not pause at all), uploads each
        to the active NameNode, and purges its own old ones."""
        standby, fs = self.standby, self.fs
        if standby is None or fs is None:
            return
        nn = self.config.namenode
        if checkpoint_due(now_s=self.clock(), last_checkpoint_s=self.last_checkpoint_s,
                          synced_txid=standby.last_txid, image_txid=self.image_txid,
                          period_s=nn.checkpoint_period_s, txns=nn.checkpoint_txns):
            async with self._checkpoint_lock:
                async with standby.lock:  # tailing pauses only for the fork
                    txid = standby.last_txid
                    checkpoint = start_checkpoint(
                        self.dirs, fs.ns, txid, nn.image_writer_timeout_s)
                await finish_checkpoint(checkpoint)
                self.image_txid = txid
                self.last_checkpoint_s = self.clock()
            log.info("standby checkpoint written at txid %d", txid)
        if self.image_txid > self._uploaded_txid:
            await self._upload_to_active(self.image_txid)
        async with self._checkpoint_lock:
            await asyncio.to_thread(purge, self.dirs, nn.images_retained)
            assert self.edits is not None
            self.edits.forget_segments_before(min(self.dirs[0].images(), default=0) + 1)

    async def _upload_to_active(self, txid: int) -> None:
        """The image goes to whichever other NameNode of ha.namenodes is active (logged in
        as client.user, a superuser, as a BackupNode does); a failure is retried at the
        next check."""
        own = self.server.address if self.server else ""
        others = [a for a in self.config.ha.namenodes.values() if a != own]
        if not others:
            return
        client = self.config.client
        hello = Hello(PROTOCOL_VERSION, client_name="xdfs-standby", user=client.user,
                      password=client.password, token=client.token)
        rpc = RpcClient(others, self.config.rpc, hello=hello,
                        ssl_context=client_context(self.config.rpc))
        try:
            await upload_checkpoint(rpc, self.dirs[0].image_path(txid), txid)
            self._uploaded_txid = txid
        except XdfsError as exc:
            log.warning("uploading the standby checkpoint %d to the active: %s", txid,
                        exc.message)
        finally:
            await rpc.close()
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

        http = HttpServer("namenode", self.config.http.body_bytes_max)
        gateway = WebHdfsGateway(self.config, self, lambda: self.address)
        http.add_routes(gateway.routes())
        http.add_routes(WebUi(self, gateway).routes())
        await http.start(address)
        self.http = http

    def ha_status(self) -> HaStatus:
        assert self.edits is not None and self.fs is not None and self.version is not None
        version = self.version
        role = ROLE_STANDBY if self.ha_state == STATE_STANDBY else ROLE_ACTIVE
        return HaStatus(role, self.fs.ns.epoch, self.service_status().last_txid,
                        version.cluster_id, version.namespace_id, os.getpid())

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
        server.authenticator = self.auth
        server.add_service(HA_SERVICE, HaHandlers(self.ha_status))
        if self.ha_enabled or not server.route(TRANSITION_TO_ACTIVE.name):
            # (a promoted BackupNode's server keeps its own transition_to_active)
            server.add_service(HA_SERVICE_PROTOCOL, HaServiceHandlers(
                self, self.auth, self.config.ha.automatic_failover))
        self.datanode_handlers = DataNodeHandlers(self.fs, self.auth, cluster_id, namespace_id)
        return server

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
        for service, impl in services:
            server.remove_service(service)
            server.add_service(service, impl)

    async def stop(self) -> None:
        """Graceful stop: no new calls, every appended edit synced, segment finalized."""
        self.ha_state = STATE_STOPPING
        standby_task = [self._standby_task] if self._standby_task else []
        await _cancel([*self._tasks, *self._side_tasks, *standby_task])
        self._tasks.clear()
        if self.standby is not None:
            await self.standby.tailer.close()
        await self._stop_http()
        if self.server is not None:
            await self.server.close()
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
        if self.fatal is not None:
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
        assert self.edits is not None and self.fs is not None
        async with self._checkpoint_lock:
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
            self.last_checkpoint_s = self.clock()
            log.info("checkpoint written at txid %d", txid)
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
            loop.create_task(_every(name, interval, duty)) for name, interval, duty in duties
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


async def _cancel(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _every(name: str, interval_s: float, duty: Callable[[], Awaitable[None]]) -> None:
    """Run ``duty`` every ``interval_s``; a failure is logged, never fatal to the loop
    (storage failures stop the NameNode through the edits log's fatal path instead)."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await duty()
        except StorageError as exc:
            log.error("%s: storage failure: %s", name, exc)
        except XdfsError as exc:
            log.warning("%s: %s", name, exc.message)
        except Exception:
            log.exception("%s failed", name)
