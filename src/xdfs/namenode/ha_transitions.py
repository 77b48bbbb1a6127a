"""The NameNode's HA half: serving as a standby (tailing the shared journal, a warm block
map, checkpoints uploaded to the active), the transitions between standby and active, and
the answers the failover controller and peers ask for (service state, health, ha_status).

A mixin of :class:`~xdfs.namenode.server.NameNode`: the two halves share the NameNode's
state (its name dirs, edits log, namesystem, RPC server), which the class body below names
for the type checker; the NameNode's ``__init__`` sets it. A transition that fails half
way stops the NameNode (its controller then sees it unhealthy).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from xdfs.config import XdfsConfig
from xdfs.errors import Fenced, NotActive, Standby, XdfsError
from xdfs.namenode import hosts
from xdfs.namenode.editlog.editlog import EditLog
from xdfs.namenode.editlog.replay import Backoff, checkpoint_due
from xdfs.namenode.editlog.replicator import EditsReplicator
from xdfs.namenode.editlog.shared import SharedEdits, journal_tailer
from xdfs.namenode.handlers.client import AdminHandlers
from xdfs.namenode.handlers.datanode import DataNodeHandlers
from xdfs.namenode.image.background import finish_checkpoint, start_checkpoint
from xdfs.namenode.image.recovery import load_namespace, purge
from xdfs.namenode.image.storage import StorageDirectory, VersionInfo
from xdfs.namenode.image.upload import upload_checkpoint
from xdfs.namenode.namespace.tree import Namespace
from xdfs.namenode.namesystem import Namesystem
from xdfs.namenode.retry_cache import RetryCache
from xdfs.namenode.security.auth import NameNodeAuth
from xdfs.namenode.standby import (
    StandbyAdminHandlers,
    StandbyTailer,
    TrackedNamespace,
    committed_txid,
    trim_unconfirmed,
)
from xdfs.namenode.tasks import cancel, every
from xdfs.protocol.backup import NAMENODE_BACKUP_PROTOCOL
from xdfs.protocol.datanode import DATANODE_PROTOCOL
from xdfs.protocol.ha import (
    ROLE_ACTIVE,
    ROLE_STANDBY,
    STATE_ACTIVE,
    STATE_INITIALIZING,
    STATE_STANDBY,
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
from xdfs.quorum.fanout import QuorumFailed
from xdfs.rpc.client import RpcClient
from xdfs.rpc.messages import PROTOCOL_VERSION, Hello
from xdfs.rpc.server import RpcServer
from xdfs.rpc.service import NotActiveHandlers, Service
from xdfs.rpc.tls import client_context

if TYPE_CHECKING:
    from xdfs.namenode.blocks.admin_states import HostLists
    from xdfs.namenode.blocks.topology import Topology
    from xdfs.namenode.namespace.ops import Op

log = logging.getLogger(__name__)


def journal_lost(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) is the shared journal refusing this writer
    (Fenced) or failing its majority, rather than a local name dir failing."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, Fenced | QuorumFailed):
            return True
        seen = seen.__cause__
    return False


class HaTransitions:
    """Standby duties and HA transitions of a NameNode (mixed into it)."""

    # The NameNode's state this half reads and sets (see NameNode.__init__).
    config: XdfsConfig
    clock: Callable[[], float]
    dirs: list[StorageDirectory]
    server: RpcServer | None
    edits: EditLog | None
    fs: Namesystem | None
    auth: NameNodeAuth | None
    datanode_handlers: DataNodeHandlers | None
    replicator: EditsReplicator | None
    shared: SharedEdits | None
    version: VersionInfo | None
    image_txid: int
    last_checkpoint_s: float
    fatal: BaseException | None
    ha_enabled: bool
    ha_state: str
    standby: StandbyTailer | None
    _tasks: list[asyncio.Task[None]]
    _side_tasks: set[asyncio.Task[None]]
    _standby_task: asyncio.Task[None] | None
    _rejoin_task: asyncio.Task[None] | None
    retry_cache: RetryCache
    _checkpoint_lock: asyncio.Lock
    _transition_lock: asyncio.Lock
    _uploaded_txid: int

    if TYPE_CHECKING:  # the NameNode's own steps this half calls

        def _on_fatal(self, error: BaseException) -> None: ...

        async def _open_edits(self, last_txid: int) -> None: ...

        async def _serve_active(self, *, new_epoch: bool) -> None: ...

        def _remember_call(self, namespace: Namespace, txid: int, op: Op) -> None: ...

        async def _check_datanodes(self) -> None: ...

        async def save_namespace(self) -> int: ...

        async def roll_edits(self) -> int: ...

        def status(self) -> NameNodeStatus: ...

        def _install_namesystem(self, namespace: Namespace,
                                topology_and_hosts: tuple[Topology, HostLists]) -> None: ...

        def _attach_namesystem(self, server: RpcServer, cluster_id: str, namespace_id: int,
                               *, ha_protocol: bool) -> None: ...

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
        end = await self.shared.take_over(currents, self.image_txid,
                                          local_is_committed=loaded is not None)
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

    async def _load_as_standby(self, version: VersionInfo) -> tuple[Namespace, int]:
        """A standby loads what its dirs hold of the committed history (xdfs.namenode.standby)
        and tails the rest from the journal."""
        reader = journal_tailer(self.config)
        try:
            committed = await committed_txid(reader.channels, reader.journal_id)
            for d in self.dirs:
                await trim_unconfirmed(d.current, committed, reader.channels,
                                       reader.journal_id)
        finally:
            await reader.close()
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
            loop.create_task(every("standby checkpointer", nn.checkpoint_check_interval_s,
                                    self._maybe_standby_checkpoint)),
            loop.create_task(every("heartbeat monitor", nn.heartbeat_interval_s,
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
        await cancel([*self._tasks, *([task] if task else [])])
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
        await cancel([*self._tasks, *self._side_tasks])
        self._tasks = []
        await self.edits.sync()
        last = self.edits.synced_txid
        await self.edits.close()  # closes the shared edits writer too
        self.shared = None
        self.replicator = None
        await self._open_edits(last)
        self._serve_standby(last)

    # -- fenced: back to standby ------------------------------------------------------------

    @property
    def rejoining(self) -> bool:
        """Fenced, and on its way back to standby."""
        return self._rejoin_task is not None and not self._rejoin_task.done()

    def _fenced(self, error: BaseException) -> None:
        """The shared journal refused this NameNode (a newer writer fenced it) or lost its
        majority: nothing more it logs can be acknowledged. It stops answering at once
        (connections dropped, as at a fatal error: a caller whose edit may or may not be
        durable retries elsewhere, never hears a failure), then goes back to standby in
        the background (:meth:`_rejoin_as_standby`)."""
        log.critical("the shared journal refused this NameNode (%s); nothing after txid "
                     "%s is acknowledged; going back to standby", error,
                     self.edits.synced_txid if self.edits else "?")
        self.ha_state = STATE_INITIALIZING  # unhealthy (starting) until it is standby
        if self.server is not None and self.fs is not None:
            self._refuse_as_standby()  # (and its block map sends DataNodes no command)
            for conn in list(self.server.connections):
                conn.shutdown()
        self._rejoin_task = asyncio.get_running_loop().create_task(
            self._rejoin_as_standby(), name="rejoin as standby")

    async def _rejoin_as_standby(self) -> None:
        """Drop everything held in memory and load the namespace again as a restart would:
        the local dirs cut back to what the journal holds identically (what this NameNode
        applied but never got onto a majority goes, kept aside as ``.unacked``), the image
        and local edits replayed into a fresh namesystem (block map, leases, retry cache:
        DataNodes register and report again), then tail the journal as a standby. Tried
        again until it works (the journal may be unreachable for a while): unhealthy
        meanwhile, so its controller keeps it out of the election."""
        backoff = Backoff(0.5, 10.0)
        async with self._transition_lock:
            await self._drop_active_state()
            while True:
                try:
                    await self._reload_as_standby()
                    break
                except XdfsError as exc:
                    delay = backoff.next_s()
                    log.error("rejoining as standby: %s (next try in %.1f s)", exc.message,
                              delay)
                    await asyncio.sleep(delay)
            assert self.standby is not None
            log.warning("rejoined as standby at txid %d", self.standby.last_txid)

    async def _drop_active_state(self) -> None:
        """Stop the active's duties and close its logs without finalizing anything on the
        journal (a failed log closes its files only)."""
        standby_task = [self._standby_task] if self._standby_task else []
        self._standby_task = None
        await cancel([*self._tasks, *self._side_tasks, *standby_task])
        self._tasks = []
        if self.standby is not None:
            await self.standby.tailer.close()
            self.standby = None
        if self.edits is not None:
            try:
                await self.edits.close()
            except Exception as exc:  # the failure that fenced it, or one more
                log.info("closing the edits log after the fence: %s", exc)
        if self.shared is not None:
            await self.shared.close()
        self.shared = None
        self.replicator = None
        if self.auth is not None:
            self.auth.close()

    async def _reload_as_standby(self) -> None:
        assert self.version is not None and self.server is not None
        version = self.version
        topology_and_hosts = hosts.load(self.config.namenode)
        self.retry_cache = RetryCache(self.config.namenode.retry_cache_entries_max,
                                      self.config.namenode.retry_cache_expiry_s)
        self.image_txid = max(max(d.images(), default=0) for d in self.dirs)
        namespace, last_txid = await self._load_as_standby(version)
        await self._open_edits(last_txid)
        self._install_namesystem(namespace, topology_and_hosts)
        self._attach_namesystem(self.server, version.cluster_id, version.namespace_id,
                                ha_protocol=True)
        self._refuse_as_standby()
        self._serve_standby(last_txid)

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
            return HealthReport(False, UNHEALTHY_STARTING,
                                "fenced: loading the namespace again to rejoin as standby"
                                if self.rejoining else "loading the namespace")
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

    def ha_status(self) -> HaStatus:
        assert self.edits is not None and self.fs is not None and self.version is not None
        version = self.version
        role = ROLE_ACTIVE if self.ha_state == STATE_ACTIVE else ROLE_STANDBY
        return HaStatus(role, self.fs.ns.epoch, self.service_status().last_txid,
                        version.cluster_id, version.namespace_id, os.getpid())
