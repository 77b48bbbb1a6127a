"""The DataNode's side of the conversation with its NameNode (seed 003, docs/architecture.md).

One loop: register (storing the cluster id in VERSION the first time), install the block
keys, send a full block report in batches (finalized and rbw replicas), then heartbeat
every ``heartbeat_interval_s`` (the NameNode's setting, from the register reply) and carry
out what each reply says: replicate, delete, recover a block, new block keys, a full
report now. A full report also goes out every
``full_report_interval_s``. ``UnknownDataNode`` on any call means the NameNode forgot us
(it restarted, or declared us dead): register and report again. An unreachable NameNode is
retried with backoff; repeated failures are logged once per ``_LOG_INTERVAL_S``. Each call
has ``datanode.namenode_call_timeout_s``: a paused NameNode (connection open, no answer)
is left for the next address like a dead one (:meth:`RpcClient.avoid` via the timeout).

Epochs (:mod:`xdfs.datanode.epochs`): every register and heartbeat answer is judged before
anything in it is obeyed (:mod:`xdfs.datanode.offer`, shared by the actors of an HA pair).
A higher epoch is persisted first; a lower one than this DataNode has seen means a fenced
NameNode: nothing of its answer is obeyed, one line is logged, and the next address is
tried. In HA only the actor of the NameNode believed active carries out commands.

Incremental reports (received, kept in rbw, deleted or found missing) are sent as they
happen; those that fail stay queued (``PendingReports``) and go out after the next
heartbeat.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import msgspec

from xdfs import __version__
from xdfs.common.tokens import BlockKey
from xdfs.datanode.reports import LogThrottle, PendingReports, backoff_s, report_batches
from xdfs.datanode.transfer import in_thread
from xdfs.errors import (
    Fenced,
    SecurityError,
    StorageError,
    Unavailable,
    UnknownDataNode,
    VersionMismatch,
    WrongCluster,
    XdfsError,
)
from xdfs.protocol.blocks import BlockRecord
from xdfs.protocol.datanode import (
    BLOCK_REPORT,
    COMMIT_BLOCK_SYNC,
    HEARTBEAT,
    INCREMENTAL_REPORT,
    REGISTER_DATANODE,
    BadReplica,
    BadReplicasRequest,
    BlockReportRequest,
    CommitBlockSyncRequest,
    HeartbeatRequest,
    HeartbeatResponse,
    IncrementalReportRequest,
    RegisterRequest,
    RegisterResponse,
)
from xdfs.protocol.namenode import REPORT_BAD_REPLICAS
from xdfs.rpc.client import RpcClient
from xdfs.sharding.ids import shard_of_id

if TYPE_CHECKING:
    from xdfs.config import XdfsConfig
    from xdfs.datanode.block_recovery import BlockRecovery
    from xdfs.datanode.replication import Replicator
    from xdfs.datanode.storage import DataStorage
    from xdfs.datanode.transfer import Transfers

log = logging.getLogger(__name__)

#: Failures that retrying cannot fix: the DataNode stops with a clear message.
FATAL_ERRORS = (WrongCluster, VersionMismatch, SecurityError)
#: At most one log line per this many seconds about an unreachable NameNode.
_LOG_INTERVAL_S = 60.0
#: Backoff before the first registration (the NameNode's heartbeat interval is not known).
_FIRST_BACKOFF_S = 1.0


class ActorNode(Protocol):
    """What an actor needs of its DataNode (``server.DataNode`` is one; this module never
    imports it): what it reports, where commands go, and how it tells the node what the
    NameNode said."""

    config: XdfsConfig
    storage: DataStorage
    transfers: Transfers
    replicator: Replicator
    block_recovery: BlockRecovery

    @property
    def address(self) -> str: ...
    @property
    def http_address(self) -> str: ...
    def joined_cluster(self, cluster_id: str) -> None: ...
    def install_keys(self, keys: list[BlockKey], shard: int) -> None: ...
    def on_fatal(self, error: BaseException) -> None: ...


class BelievedActive(Protocol):
    """The NameNode the actors obey (``offer.ActiveChoice`` is one); None: none yet."""

    @property
    def active(self) -> str | None: ...


class ActorGroup(Protocol):
    """What an actor needs of the offer that runs it with its siblings and the choice they
    share (``offer.NameNodeOffer`` is one; this module never imports it)."""

    ha: bool
    persist: asyncio.Lock
    commands: asyncio.Lock

    @property
    def actors(self) -> Sequence[NameNodeActor]: ...
    @property
    def choice(self) -> BelievedActive: ...
    async def judge(self, address: str, ha_state: str, epoch: int) -> None: ...
    def obeys(self, address: str) -> bool: ...


class NameNodeActor:
    def __init__(self, node: ActorNode, rpc: RpcClient, *, shard: int = 0) -> None:
        self.node = node
        self.rpc = rpc
        #: The metadata shard of this NameNode: it hears of its block pool's replicas
        #: only, and its commands may touch nothing else.
        self.shard = shard
        self.offer: ActorGroup | None = None  # set by the offer that runs this actor
        self.settings: RegisterResponse | None = None
        self.registered = False
        self._registered_with = ""  # the NameNode address of the registration
        self.full_reports_sent = 0
        self._report_needed = True
        self._last_full_report_s = 0.0
        self._next_heartbeat_s = 0.0
        self._pending = PendingReports()
        self._bad_pending: set[int] = set()
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._throttle = LogThrottle(_LOG_INTERVAL_S)
        self._flush_lock = asyncio.Lock()  # one incremental report in flight at a time
        #: The next received-replica report: its replicas, and a future for each one's
        #: waiter (``_join_received``).
        self._received_next: _ReceivedBatch | None = None
        #: Tasks sending received-replica reports (``reports_in_flight_max`` at most).
        self._received_senders = 0
        #: Block ids of the received-replica reports queued or in flight, each with how
        #: many (the heartbeats' flush leaves them to those reports).
        self._reporting: dict[int, int] = {}
        self._timeout_s = node.config.datanode.namenode_call_timeout_s
        self._fenced_seen: set[tuple[str, int]] = set()  # logged once each

    @property
    def failed_attempts(self) -> int:
        """Exchanges with the NameNode that failed in a row (0 while it answers)."""
        return self._throttle.failures

    @property
    def _node_id(self) -> str:
        return self.node.storage.node_id

    # -- the loop -----------------------------------------------------------------------

    @property
    def _offer(self) -> ActorGroup:
        assert self.offer is not None
        return self.offer

    async def run(self) -> None:
        unknown_in_a_row = 0
        while True:
            self._wake.clear()  # a wake-up during the step cuts the next sleep short
            try:
                await self._step()
            except UnknownDataNode as exc:
                unknown_in_a_row += 1
                log.info("NameNode does not know this DataNode (%s): registering again",
                         exc.message)
                self.registered = False
                if unknown_in_a_row > 1:  # it keeps forgetting us: do not spin
                    await self._pause_after_failure(exc)
                continue
            except FATAL_ERRORS as exc:
                storage = self.node.storage
                detail = f" (data dir {storage.root}, cluster {storage.cluster_id or 'none yet'})"
                self.node.on_fatal(type(exc)(
                    f"NameNode {self.rpc.current_address} refused this DataNode: "
                    f"{exc.message}{detail}"
                ))
                return
            except Fenced as exc:  # logged by _check_epoch
                await self._pause_after_failure(exc, quiet=True)
                continue
            except XdfsError as exc:
                await self._pause_after_failure(exc)
                continue
            unknown_in_a_row = 0
            if self._throttle.failures:
                count = self._throttle.recovered()
                log.info("NameNode %s reachable again after %d failed attempt(s)",
                         self.rpc.current_address, count)
            await self._sleep(self._next_heartbeat_s - time.monotonic())

    async def _step(self) -> None:
        if self.registered and self.rpc.current_address != self._registered_with:
            # A failover moved us to another NameNode (a standby become active, a promoted
            # backup): whatever it remembers of us is from an earlier time of its own, so
            # register and report everything again.
            log.info("NameNode is now %s (registered with %s): registering again",
                     self.rpc.current_address, self._registered_with)
            self.registered = False
        if not self.registered:
            await self._register()
        if self._report_needed or self._full_report_due():
            await self._full_report()
        # What a command changed is reported before the heartbeat: a NameNode just made
        # active may delete again only once every DataNode heartbeated (blocks/failover.py)
        async with self._offer.commands:
            pass
        await self._flush_pending()
        response = await self._heartbeat()
        await self._check_epoch(response.epoch, response.ha_state)
        await self._handle(response)
        if self._report_needed:  # asked for by the heartbeat reply
            await self._full_report()
        await self._flush_pending()
        await self._flush_bad()

    async def _pause_after_failure(self, exc: XdfsError, *, quiet: bool = False) -> None:
        suppressed = self._throttle.failure(time.monotonic())
        if suppressed is not None and not quiet:
            more = f" ({suppressed} similar failures not logged)" if suppressed else ""
            log.warning("exchange with NameNode %s failed (%s: %s)%s; retrying",
                        ",".join(self.rpc.addresses), type(exc).__name__, exc.message, more)
        initial = self.settings.heartbeat_interval_s if self.settings else _FIRST_BACKOFF_S
        limit = self.node.config.datanode.namenode_retry_max_s
        await self._sleep(backoff_s(self._throttle.failures, min(initial, limit), limit))

    async def _sleep(self, delay_s: float) -> None:
        """Sleep, or less when something needs the NameNode now (``_wake``)."""
        if delay_s <= 0:
            return
        try:
            async with asyncio.timeout(delay_s):
                await self._wake.wait()
        except TimeoutError:
            pass

    def _wake_up(self) -> None:
        self._wake.set()

    # -- exchanges ----------------------------------------------------------------------

    async def _register(self) -> None:
        node = self.node
        storage = node.storage
        request = RegisterRequest(storage.node_id, node.address, storage.storage_report(self.shard),
                                  __version__, http_address=node.http_address)
        response = await self.rpc.call(REGISTER_DATANODE, request, timeout_s=self._timeout_s)
        await self._check_epoch(response.epoch, response.ha_state)
        async with self._offer.persist:
            stored = storage.cluster_id
            if stored and response.cluster_id and response.cluster_id != stored:
                raise WrongCluster(
                    f"data dir {storage.root} belongs to cluster {stored}, but the NameNode "
                    f"serves cluster {response.cluster_id}"
                )
            if response.cluster_id and not stored:
                await in_thread(storage.set_cluster_id, response.cluster_id)
                log.info("data dir %s joined cluster %s", storage.root, response.cluster_id)
        if response.cluster_id:
            self.rpc.hello = msgspec.structs.replace(self.rpc.hello, cluster_id=response.cluster_id)
            node.joined_cluster(response.cluster_id)
        self.settings = response
        if self._obeyed:
            self.node.install_keys(response.block_keys, self.shard)
        self.registered = True
        self._registered_with = self.rpc.current_address
        self._report_needed = True
        log.info("registered with NameNode %s as %s (%s)", self.rpc.current_address,
                 storage.node_id, node.address)

    async def _check_epoch(self, epoch: int, ha_state: str) -> None:
        """Obey this answer only if its epoch is not below the highest seen (a higher one
        is made durable first); Fenced otherwise, and the next address is tried."""
        address = self.rpc.current_address
        try:
            await self._offer.judge(address, ha_state, epoch)
        except Fenced as exc:
            self.registered = False
            self.rpc.avoid(address)
            if (address, epoch) not in self._fenced_seen:
                self._fenced_seen.add((address, epoch))
                log.warning("%s", exc.message)
            raise

    @property
    def _obeyed(self) -> bool:
        return self._offer.obeys(self.rpc.current_address)

    def _full_report_due(self) -> bool:
        assert self.settings is not None
        elapsed_s = time.monotonic() - self._last_full_report_s
        return elapsed_s >= self.settings.full_report_interval_s

    async def _full_report(self) -> None:
        assert self.settings is not None
        storage = self.node.storage
        records, rbw = storage.report_records(self.shard), storage.rbw_records(self.shard)
        batches = report_batches(records, self.settings.block_report_batch_max, rbw)
        report_id = secrets.randbits(63)
        for index, (blocks, partial) in enumerate(batches):
            request = BlockReportRequest(
                self._node_id, report_id, index, len(batches), blocks, partial
            )
            await self.rpc.call(BLOCK_REPORT, request, timeout_s=self._timeout_s)
        self._report_needed = False
        self._last_full_report_s = time.monotonic()
        self.full_reports_sent += 1
        log.info("full block report sent: %d replica(s) and %d in rbw in %d batch(es)",
                 len(records), len(rbw), len(batches))

    async def _heartbeat(self) -> HeartbeatResponse:
        assert self.settings is not None
        storage = self.node.storage
        request = HeartbeatRequest(
            self._node_id, storage.storage_report(self.shard), self.node.transfers.count
        )
        self._next_heartbeat_s = time.monotonic() + self.settings.heartbeat_interval_s
        return await self.rpc.call(HEARTBEAT, request, timeout_s=self._timeout_s)

    async def _handle(self, response: HeartbeatResponse) -> None:
        if response.send_full_report:  # about this NameNode's own map: from any
            self._report_needed = True
        if not self._obeyed:
            if response.replicate or response.recover or response.delete:
                log.warning("ignoring %d replication(s), %d recovery(ies) and %d deletion(s) "
                            "from NameNode %s: it is not the one believed active (%s)",
                            len(response.replicate), len(response.recover),
                            len(response.delete), self.rpc.current_address,
                            self._offer.choice.active or "none")
            return
        async with self._offer.commands:
            self.node.install_keys(response.block_keys, self.shard)
            for task in response.replicate:
                if self._owns(task.block.block_id, "replicate"):
                    self.node.replicator.submit(task)
            for recovery in response.recover:
                if self._owns(recovery.block.block_id, "recover"):
                    self.node.block_recovery.submit(recovery)
            delete = [block_id for block_id in response.delete if self._owns(block_id, "delete")]
            if delete:
                await self._delete(delete)

    def _owns(self, block_id: int, command: str) -> bool:
        """Whether this NameNode's shard owns ``block_id``: a shard never deletes, copies
        or recovers a replica of a block it does not own (another shard's pool, or one
        this node keeps no pool for); such a command is refused with one line."""
        if shard_of_id(block_id) == self.shard:
            return True
        log.error("refusing to %s block %d as NameNode %s of shard %d asks: the block "
                  "belongs to shard %d", command, block_id, self.rpc.current_address,
                  self.shard, shard_of_id(block_id))
        return False

    async def _delete(self, block_ids: list[int]) -> None:
        storage = self.node.storage
        busy = [block_id for block_id in block_ids if storage.is_busy(block_id)]
        if busy:  # written right now: the NameNode repeats the command after its report
            log.info("not deleting block(s) being written: %s", busy)
        claimed = [block_id for block_id in block_ids if block_id not in busy]
        for block_id in claimed:
            storage.claim(block_id)
        try:
            taken = [r for r in map(storage.take, claimed) if r is not None]
            await in_thread(storage.delete_files, taken)
        except StorageError as exc:
            log.error("deleting %d replica(s) failed: %s", len(claimed), exc.message)
            return
        finally:
            for block_id in claimed:
                storage.release(block_id)
        log.info("deleted %d replica(s) as the NameNode asked", len(taken))
        self._pending.add_deleted(claimed)
        for other in self._offer.actors:  # every NameNode hears of it
            if other is not self:
                other.report_soon(deleted=claimed)

    async def _flush_pending(self) -> None:
        async with self._flush_lock:
            batch = self._pending.take(self._reporting)
            if batch is None:
                return
            request = IncrementalReportRequest(
                self._node_id, batch.received, batch.deleted, batch.rbw
            )
            try:
                await self.rpc.call(INCREMENTAL_REPORT, request, timeout_s=self._timeout_s)
            except BaseException:
                self._pending.restore(batch)
                raise

    async def _flush_bad(self) -> None:
        if not self._bad_pending or not self._obeyed:
            return  # (a standby refuses the client service: it waits for its turn)
        ids = sorted(self._bad_pending)
        address = self.node.address
        request = BadReplicasRequest([BadReplica(block_id, address) for block_id in ids])
        # Out of the pending set while the call is under way, so a flush started meanwhile
        # (a heartbeat's, another report's) does not report them a second time; back in it
        # if the call fails (retried with the heartbeats).
        self._bad_pending.difference_update(ids)
        try:
            await self.rpc.call(REPORT_BAD_REPLICAS, request, timeout_s=self._timeout_s)
        except BaseException:
            self._bad_pending.update(ids)
            raise
        log.info("reported %d corrupt replica(s) to the NameNode: %s", len(ids), ids)

    # -- called by the data path --------------------------------------------------------

    async def report_received(self, record: BlockRecord) -> None:
        """Tell the NameNode about a just-finalized replica before the writer hears "ok"
        (its ``complete`` waits for these reports). Within ``report_timeout_s``; a report
        that does not make it stays queued and goes out after the next heartbeat."""
        self._pending.add_received(record)
        if not self.registered or (self._offer.ha and self._throttle.failures):
            return  # (one of a pair not answering now: it goes with the heartbeats)
        try:
            # Its own future, failed with TimeoutError by its batch's deadline (one timer
            # per report, not a timeout scope per replica; no shield, whose extra future
            # and callback cost the write's answer a loop turn).
            await self._join_received(record)
        except UnknownDataNode:
            self.registered = False
            self._wake_up()
            return
        except (XdfsError, TimeoutError) as exc:
            log.warning("report of block %d not delivered (%s); retrying with the heartbeats",
                        record.block_id, exc)
            return
        # (confirmed in the pending reports by _send_received)

    def _join_received(self, record: BlockRecord) -> asyncio.Future[None]:
        """Put ``record`` in the next received-replica report; returns the outcome of that
        report, for this replica's waiter alone. The next report takes every replica
        finalized until a sender is free to send it (a group commit: replicas finalized in
        one loop turn go in one call); up to ``reports_in_flight_max`` are in flight at
        once, so a replica does not wait for the answer of a report it is not in (one
        report at a time cost a replica finalized meanwhile ~1 ms more at 8 writers)."""
        loop = asyncio.get_running_loop()
        if self._received_next is None:
            self._received_next = _ReceivedBatch([], [])
            # Every waiter of the batch hears within report_timeout_s of joining it (the
            # batch is at most that old when a waiter joins: sooner, never later).
            self._received_next.deadline = loop.call_later(
                self.node.config.datanode.report_timeout_s, self._received_next.settle,
                TimeoutError("no answer to the received-replica report in time"))
            if self._received_senders < self.node.config.datanode.reports_in_flight_max:
                self._received_senders += 1
                task = loop.create_task(self._send_received())
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        batch = self._received_next
        future: asyncio.Future[None] = loop.create_future()
        batch.waiters.append(future)
        batch.records.append(record)
        self._reporting[record.block_id] = self._reporting.get(record.block_id, 0) + 1
        return future

    async def _send_received(self) -> None:
        timeout_s = self.node.config.datanode.report_timeout_s
        in_flight: _ReceivedBatch | None = None  # unsettled if this task is stopped
        try:
            while self._received_next is not None:
                in_flight = batch = self._received_next
                self._received_next = None
                request = IncrementalReportRequest(self._node_id, received=batch.records)
                try:
                    await self.rpc.call(INCREMENTAL_REPORT, request, timeout_s=timeout_s)
                except Exception as exc:
                    batch.settle(exc)
                else:
                    for record in batch.records:  # before the flush may take them again
                        self._pending.confirm_received(record)
                    batch.settle(None)
                finally:
                    self._reported(batch.records)
        finally:
            self._received_senders -= 1
            stopping = Unavailable("the DataNode is stopping")
            if in_flight is not None:
                in_flight.settle(stopping)  # (no-op for the waiters already settled)
            if self._received_next is not None:  # stopped (the actor closes)
                self._received_next.settle(stopping)
                self._received_next = None
                self._reporting.clear()

    def _reported(self, records: list[BlockRecord]) -> None:
        """The report of ``records`` is answered (or failed): their ids leave
        ``_reporting`` (a plain dict: a Counter's subtract and the copy that drops the ids
        at zero cost ~6 us per report of 5 replicas here, this loop ~0.5 us)."""
        reporting = self._reporting
        for record in records:
            left = reporting[record.block_id] - 1
            if left:
                reporting[record.block_id] = left
            else:
                del reporting[record.block_id]

    def report_bad(self, block_id: int) -> None:
        """Report a corrupt local replica in the background (the caller reports each
        replica once: ``DataStorage.mark_corrupt``); retried with the heartbeats."""
        self._bad_pending.add(block_id)
        task = asyncio.get_running_loop().create_task(self._report_bad_now())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _report_bad_now(self) -> None:
        try:
            await self._flush_bad()
        except XdfsError as exc:
            log.warning("corrupt replica report not delivered (%s); retrying later", exc)

    def report_soon(
        self,
        *,
        received: Iterable[BlockRecord] = (),
        rbw: Iterable[BlockRecord] = (),
        deleted: Iterable[int] = (),
    ) -> None:
        """Tell the NameNode now, in the background (retried with the heartbeats), about
        replicas found on disk (``received``), writes kept in state rbw (a lease recovery
        needs to know where they are) and replicas whose files vanished (``deleted``: it
        copies the block again at once)."""
        for record in received:
            self._pending.add_received(record)
        for record in rbw:
            self._pending.add_rbw(record)
        self._pending.add_deleted(list(deleted))
        task = asyncio.get_running_loop().create_task(self._report_pending_now())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _report_pending_now(self) -> None:
        try:
            await self._flush_pending()
        except XdfsError as exc:
            log.warning("incremental report not delivered (%s); retrying later", exc)

    async def commit_block_sync(self, request: CommitBlockSyncRequest) -> None:
        """The end of a block recovery this node coordinated (see block_recovery.py)."""
        await self.rpc.call(COMMIT_BLOCK_SYNC, request)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


@dataclass
class _ReceivedBatch:
    """The replicas of one received-replica report and a future per waiter."""

    records: list[BlockRecord]
    waiters: list[asyncio.Future[None]]
    #: Fails the waiters still waiting once ``report_timeout_s`` passed (the call may go
    #: on: its outcome then confirms the reports for the heartbeats).
    deadline: asyncio.TimerHandle | None = None

    def settle(self, error: BaseException | None) -> None:
        """Tell every waiter still waiting (a cancelled one's future is done already)."""
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None
        for future in self.waiters:
            if future.done():
                continue
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)
