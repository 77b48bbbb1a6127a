"""The BackupNode process (seed 000, seed 003): a hot copy of the namespace that can take over.

Start: lock the name dir; when it is empty, format it with the NameNode's ids and download
the NameNode's newest image; load the newest local image (md5 checked) and replay the local
edits; open its own edits log after them; serve ``backupnode`` (status, takeover) and
answer client, admin and DataNode calls with NotActive, so callers with both addresses
fail over to the NameNode.

Following: ``fetch_edits(synced_txid)`` in a loop (long-polled at the NameNode), each batch
checked, applied to the namespace and appended to the local edits log, then synced: the
next fetch's ``synced_txid`` -- the backup's acknowledgement -- never passes what is
durable here. When the NameNode no longer has the next txid (purged), the backup
re-bootstraps from its image. Unreachable NameNode: exponential backoff.

Checkpoints: by time or txn count, replay pauses while the image is written (in a thread),
then the image is uploaded in chunks (head, bodies, tail) and the NameNode installs it.

Takeover (``transition_to_active``): refused while the NameNode answers a ping; otherwise
the NameNode is *fenced* first (:mod:`xdfs.common.fencing`: a paused NameNode must
never come back as a second active one) and the takeover is refused when no configured
method succeeds. Then: stop following, sync and close the local edits log, and run a
NameNode on the same name dir, namespace (already in memory) and RPC server, which logs a
raised active epoch before it serves anything. The BackupNode is a NameNode in waiting, so
it depends on :mod:`xdfs.namenode`; nothing depends on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from xdfs.backupnode.handlers import BackupHandlers, NotActiveHandlers
from xdfs.backupnode.replay import Backoff, apply_batch, checkpoint_due, decode_batch
from xdfs.common.faults import FAULTS, fault_point
from xdfs.common.fencing import FenceMethod, Target, fence, parse_methods
from xdfs.common.files import fsync_dir, make_dirs
from xdfs.common.images import image_chunks, md5_name, receive_image
from xdfs.config import XdfsConfig
from xdfs.editlog.segments import segment_index
from xdfs.errors import (
    EditsPurged,
    InvalidArgument,
    RpcError,
    StorageError,
    TakeoverRefused,
    XdfsError,
)
from xdfs.namenode.editlog.editlog import EditLog, EditLogSettings
from xdfs.namenode.ha import HaHandlers, call_once
from xdfs.namenode.image.fsimage import header_check, image_head
from xdfs.namenode.image.recovery import load_namespace, purge, save_checkpoint
from xdfs.namenode.image.storage import StorageDirectory
from xdfs.namenode.namespace.tree import Namespace
from xdfs.namenode.security.auth import NamespaceAuthenticator
from xdfs.protocol import namenode as nn_protocol
from xdfs.protocol.backup import (
    BACKUP_SERVICE,
    FETCH_EDITS,
    FETCH_IMAGE,
    NAMENODE_BACKUP_PROTOCOL,
    UPLOAD_IMAGE,
    BackupStatus,
    FetchEditsRequest,
    TakeoverResponse,
)
from xdfs.protocol.datanode import DATANODE_PROTOCOL
from xdfs.protocol.ha import HA_SERVICE, ROLE_BACKUP, HaStatus
from xdfs.protocol.system import PING
from xdfs.rpc.client import RpcClient
from xdfs.rpc.messages import PROTOCOL_VERSION, Empty, Hello
from xdfs.rpc.server import RpcServer
from xdfs.rpc.system import add_system_services
from xdfs.rpc.tls import client_context, server_context

log = logging.getLogger(__name__)

FAULTS.register("backup.replayed_not_synced",
                "a fetched batch is applied and buffered in the backup's edits, not synced")
FAULTS.register("backup.checkpoint_saved", "the backup saved its image, not yet uploaded")

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
        self.dir = StorageDirectory(name_dir)
        self.namenodes = namenodes
        self.state = "starting"
        self.namespace: Namespace | None = None
        self.edits: EditLog | None = None
        self.server: RpcServer | None = None
        self.rpc: RpcClient | None = None
        self.namenode: Any = None  # the NameNode this backup became
        self.synced_txid = 0
        self.namenode_synced_txid = 0
        self.namenode_pid = 0  # as the NameNode's last fetch answer said (for fencing)
        self.fencing: list[FenceMethod] = []
        self._ids = ("", 0)  # cluster and namespace ids, once the name dir is open
        self.last_fetch_ms = 0
        self.image_txid = 0
        self.uploaded_txid = 0
        self.last_checkpoint_s = clock()
        self.checkpoints_uploaded = 0
        self.bootstraps = 0
        self.stopped = asyncio.Event()
        self._fatal: BaseException | None = None
        self._tasks: list[asyncio.Task[None]] = []
        # Held while the namespace and the local edits log change together (replay) and
        # while an image of them is written: a checkpoint sees exactly txids <= its txid.
        self._replay_lock = asyncio.Lock()
        self._checkpoint_lock = asyncio.Lock()

    @property
    def fatal(self) -> BaseException | None:
        return self.namenode.fatal if self.namenode is not None else self._fatal

    @property
    def address(self) -> str:
        assert self.server is not None
        return self.server.address

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        rpc = self.config.rpc
        client = self.config.client
        hello = Hello(PROTOCOL_VERSION, client_name="backupnode", user=client.user,
                      password=client.password, token=client.token)
        self.rpc = RpcClient(self.namenodes, rpc, hello=hello, ssl_context=client_context(rpc))
        try:
            self.fencing = parse_methods(self.config.backupnode.fencing_methods)
            await asyncio.to_thread(make_dirs, self.dir.root)  # durable in its parent
            self.dir.lock()
            await self._open_storage()
            self.server = self._make_server()
            await self.server.start(host, port)
        except BaseException:
            await self.stop()
            raise
        self.state = "following"
        self._spawn("edits follower", self._follow())
        self._spawn("checkpointer", self._checkpoints())
        return self.server.address

    def _make_server(self) -> RpcServer:
        rpc = self.config.rpc
        version = self.dir.read_version()
        self._ids = (version.cluster_id, version.namespace_id)
        server = RpcServer(
            "backupnode", rpc, cluster_id=version.cluster_id,
            authenticator=NamespaceAuthenticator(lambda: self.namespace, self._now_ms),
            ssl_context=server_context(rpc),
        )
        add_system_services(server, "backupnode")
        server.add_service(HA_SERVICE, HaHandlers(self.ha_status))
        server.add_service(BACKUP_SERVICE, BackupHandlers(self))
        stub = NotActiveHandlers(lambda: f"this is a BackupNode following {self.namenodes[0]}")
        for service in NAMENODE_SERVICES:
            server.add_service(service, stub)
        return server

    def _spawn(self, name: str, work: Coroutine[Any, Any, None]) -> None:
        self._tasks.append(asyncio.get_running_loop().create_task(work, name=name))

    async def stop(self) -> None:
        await self._stop_tasks()
        if self.namenode is not None:
            await self.namenode.stop()  # it owns the server, the edits and the dir now
        else:
            if self.server is not None:
                await self.server.close()
            if self.edits is not None and self._fatal is None:
                with contextlib.suppress(StorageError):
                    await self.edits.close()
            with contextlib.suppress(Exception):
                self.dir.unlock()
        if self.rpc is not None:
            await self.rpc.close()
        self.stopped.set()

    async def _stop_tasks(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    def _go_fatal(self, error: BaseException) -> None:
        log.critical("BackupNode stopping: %s", error)
        self._fatal = error
        self.stopped.set()

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    # -- local storage and bootstrap ----------------------------------------------------

    async def _open_storage(self) -> None:
        if not self.dir.is_formatted() or not self.dir.images():
            await self._bootstrap()
            return
        await self._load_local()

    async def _load_local(self) -> None:
        namespace, last_txid = await asyncio.to_thread(load_namespace, [self.dir], Namespace)
        self.namespace = namespace
        self.image_txid = max(self.dir.images(), default=0)
        self.uploaded_txid = 0  # unknown: the checkpointer asks the NameNode
        settings = EditLogSettings.from_config(self.config.namenode)
        self.edits = EditLog.for_storage([self.dir], settings, on_fatal=self._go_fatal)
        await self.edits.open_for_write(last_txid + 1)
        self.synced_txid = last_txid
        log.info("backup namespace loaded: %d inodes, txid %d",
                 namespace.inode_count(), last_txid)

    async def _bootstrap(self) -> None:
        """Replace the local state with the NameNode's newest image (first start, or the
        NameNode purged the edits this backup still needed)."""
        assert self.rpc is not None
        previous, self.state = self.state, "bootstrapping"
        status = await self.rpc.call(nn_protocol.STATUS, Empty())
        if not self.dir.is_formatted():
            await asyncio.to_thread(self.dir.format, status.cluster_id, status.namespace_id,
                                    self._now_ms())
        version = self.dir.read_version()
        ids = (version.namespace_id, version.cluster_id)
        if (status.namespace_id, status.cluster_id) != ids:
            raise StorageError(
                f"{self.dir.root} holds namespace {ids[0]} of cluster {ids[1]}; the NameNode "
                f"at {self.rpc.current_address} serves {status.namespace_id} of "
                f"{status.cluster_id}"
            )
        if self.edits is not None:
            await self.edits.close()
            self.edits = None
        async with await self.rpc.download(FETCH_IMAGE, Empty()) as stream:
            path = await receive_image(stream.head, stream, self.dir.current,
                                       check=header_check(stream.head, ids))
            txid = stream.head.txid
        await asyncio.to_thread(_drop_local_state_before, self.dir, txid)
        log.info("bootstrapped from the NameNode's image %s", path.name)
        self.bootstraps += 1
        await self._load_local()
        self.uploaded_txid = txid  # the NameNode has this one
        self.state = previous

    # -- following ----------------------------------------------------------------------

    async def _follow(self) -> None:
        cfg = self.config.backupnode
        failures = Backoff(0.05, cfg.fetch_retry_max_s)
        idle = Backoff(0.01, max(cfg.fetch_wait_s, 0.01))
        while True:
            try:
                count = await self.fetch_once()
            except EditsPurged as exc:
                log.warning("%s", exc.message)
                await self._rebootstrap(failures)
                continue
            except (RpcError, InvalidArgument) as exc:
                delay = failures.next_s()
                log.warning("fetching edits from %s: %s (next try in %.2f s)",
                            self.namenodes[0], exc, delay)
                await asyncio.sleep(delay)
                continue
            except StorageError as exc:
                self._go_fatal(exc)
                return
            failures.reset()
            if count:
                idle.reset()
            elif not cfg.fetch_wait_s:
                await asyncio.sleep(idle.next_s())  # no long poll configured: back off

    async def _rebootstrap(self, failures: Backoff) -> None:
        try:
            async with self._replay_lock:
                await self._bootstrap()
        except (RpcError, InvalidArgument) as exc:
            delay = failures.next_s()
            log.warning("bootstrap from %s failed: %s (next try in %.2f s)",
                        self.namenodes[0], exc, delay)
            await asyncio.sleep(delay)

    async def fetch_once(self) -> int:
        """One fetch: apply and make durable what came; returns how many edits."""
        assert self.rpc is not None and self.server is not None
        cfg = self.config.backupnode
        request = FetchEditsRequest(self.synced_txid, cfg.fetch_batch_max, cfg.fetch_wait_s,
                                    self.server.address)
        answer = await self.rpc.call(
            FETCH_EDITS, request, timeout_s=self.config.rpc.call_timeout_s + cfg.fetch_wait_s
        )
        self.last_fetch_ms = self._now_ms()
        self.namenode_synced_txid = answer.namenode_synced_txid
        self.namenode_pid = answer.namenode_pid
        if not answer.count:
            return 0
        if answer.first_txid != self.synced_txid + 1:
            raise InvalidArgument(f"asked for txid {self.synced_txid + 1}, got "
                                  f"{answer.first_txid}")
        records = decode_batch(answer.first_txid, answer.count, answer.records)
        async with self._replay_lock:
            if self.synced_txid + 1 != answer.first_txid:
                return 0  # a bootstrap moved us meanwhile
            assert self.namespace is not None and self.edits is not None
            last = apply_batch(records, self.namespace, self.edits)
            fault_point("backup.replayed_not_synced")
            await self.edits.sync(last)  # durable here before it is acknowledged
            self.synced_txid = last
        return answer.count

    # -- checkpoints --------------------------------------------------------------------

    async def _checkpoints(self) -> None:
        cfg = self.config.backupnode
        while True:
            await asyncio.sleep(cfg.checkpoint_check_interval_s)
            due = checkpoint_due(
                now_s=self.clock(), last_checkpoint_s=self.last_checkpoint_s,
                synced_txid=self.synced_txid, image_txid=self.image_txid,
                period_s=cfg.checkpoint_period_s, txns=cfg.checkpoint_txns,
            )
            if due or self.image_txid > self.uploaded_txid:
                try:
                    await self.checkpoint()
                except XdfsError as exc:
                    log.warning("checkpoint: %s", exc.message)

    async def checkpoint(self) -> int:
        """Save an image of the namespace at the synced txid and upload it; returns its
        txid. Replay pauses only while the image is written."""
        async with self._checkpoint_lock:
            async with self._replay_lock:
                assert self.namespace is not None
                txid = self.synced_txid
                if txid > self.image_txid:
                    await asyncio.to_thread(save_checkpoint, [self.dir], self.namespace, txid)
                    self.image_txid = txid
                    fault_point("backup.checkpoint_saved")
            self.last_checkpoint_s = self.clock()
            if self.image_txid > self.uploaded_txid:
                await self._upload(self.image_txid)
            await asyncio.to_thread(purge, [self.dir], self.config.backupnode.images_retained)
            return self.image_txid

    async def _upload(self, txid: int) -> None:
        assert self.rpc is not None
        status = await self.rpc.call(nn_protocol.STATUS, Empty())
        if status.image_txid >= txid:
            self.uploaded_txid = txid  # it has this image (or a newer one) already
            return
        path = self.dir.image_path(txid)
        head = await asyncio.to_thread(image_head, path, txid)
        try:
            answer = await self.rpc.upload(UPLOAD_IMAGE, head, image_chunks(path))
        except InvalidArgument as exc:
            if "stale" not in exc.message:
                raise
            log.info("checkpoint %d not needed by the NameNode: %s", txid, exc.message)
        else:
            self.checkpoints_uploaded += 1
            log.info("checkpoint %d uploaded (%d bytes); the NameNode purged %d files",
                     txid, head.size_bytes, answer.purged_files)
        self.uploaded_txid = txid

    # -- status and takeover ------------------------------------------------------------

    def status(self) -> BackupStatus:
        return BackupStatus(
            self.state, self.server.address if self.server else "", self.namenodes,
            self.synced_txid, self.namenode_synced_txid, self.last_fetch_ms, self.image_txid,
            int(self.last_checkpoint_s * 1000), self.checkpoints_uploaded, self.bootstraps,
            self.namespace.inode_count() if self.namespace else 0,
        )

    def ha_status(self) -> HaStatus:
        namespace = self.namespace
        cluster_id, namespace_id = self._ids
        return HaStatus(ROLE_BACKUP, namespace.epoch if namespace else 0, self.synced_txid,
                        cluster_id, namespace_id, os.getpid())

    async def transition_to_active(self) -> TakeoverResponse:
        started = time.monotonic()
        if self.state in ("fencing", "promoting", "active"):
            raise TakeoverRefused(f"this BackupNode is already {self.state}")
        if await self._namenode_answers():
            raise TakeoverRefused(
                f"the NameNode at {', '.join(self.namenodes)} still answers: stop it first "
                "(two active NameNodes would diverge)"
            )
        previous, self.state = self.state, "fencing"
        try:
            fenced_by = await self._fence()
        except BaseException:
            self.state = previous
            raise
        self.state = "promoting"
        await self._stop_tasks()
        async with self._replay_lock:
            await self._become_namenode()
        self.state = "active"
        took_s = time.monotonic() - started
        assert self.namenode is not None and self.namespace is not None
        last_txid = self.namenode.edits.last_txid
        log.warning("promoted: serving as the NameNode at %s at epoch %d from txid %d "
                    "(%.2f s)", self.address, self.namespace.epoch, last_txid, took_s)
        return TakeoverResponse(self.address, last_txid, took_s, self.namespace.epoch,
                                fenced_by)

    async def _fence(self) -> str:
        """Fence the NameNode last followed; TakeoverRefused when no method succeeds."""
        assert self.rpc is not None
        target = Target(self.rpc.current_address, self.namenode_pid)
        fenced_by = await fence(self.fencing, target,
                                self.config.backupnode.fencing_timeout_s)
        if self.synced_txid < self.namenode_synced_txid:
            log.warning(
                "the NameNode had synced txid %d, this backup holds txid %d: edits %d..%d "
                "were never fetched and are not in the promoted namespace",
                self.namenode_synced_txid, self.synced_txid, self.synced_txid + 1,
                self.namenode_synced_txid,
            )
        return fenced_by

    async def _namenode_answers(self) -> bool:
        timeout_s = self.config.backupnode.takeover_probe_timeout_s
        try:
            await call_once(self.config, self.namenodes, PING, timeout_s)
        except RpcError:
            return False
        return True

    async def _become_namenode(self) -> None:
        from xdfs.namenode.server import NameNode

        assert self.namespace is not None and self.edits is not None
        assert self.server is not None
        await self.edits.close()  # synced and finalized: the NameNode opens the next txid
        self.edits = None
        self.dir.unlock()  # the NameNode takes the lock again
        for service in (*NAMENODE_SERVICES, HA_SERVICE):
            self.server.remove_service(service)
        namenode = NameNode(self.config, [self.dir.root], clock=self.clock)
        await namenode.start(loaded=(self.namespace, self.synced_txid), server=self.server,
                             new_epoch=True)
        self.namenode = namenode
        self._spawn("namenode watch", self._watch_namenode(namenode))

    async def _watch_namenode(self, namenode: Any) -> None:
        await namenode.stopped.wait()
        self.stopped.set()


def _drop_local_state_before(directory: StorageDirectory, txid: int) -> None:
    """After installing the NameNode's image at ``txid``: older images and every segment
    ending before it are useless (a gap follows them), so they go."""
    current = directory.current
    for old in directory.images():
        if old < txid:
            directory.image_path(old).unlink(missing_ok=True)
            (current / md5_name(old)).unlink(missing_ok=True)
    for seg in segment_index(current):
        if seg.start <= txid:
            seg.path.unlink(missing_ok=True)
    directory.write_seen_txid(txid)
    fsync_dir(current)
