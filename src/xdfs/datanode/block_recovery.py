"""Block recovery on a DataNode (HDFS's BlockRecoveryWorker and InterDatanodeProtocol), in
both roles:

* **primary**: a ``RecoverBlockTask`` in a heartbeat reply names the block, its new
  generation stamp and the DataNodes that may hold it. The primary asks each
  (``init_replica_recovery``), lets :func:`~xdfs.datanode.recovery_plan.plan_recovery`
  decide the length and who takes part, has each participant cut and finalize its replica
  (``update_replica_under_recovery``) and tells the NameNode
  (``commit_block_synchronization``), which closes the file. Any failure ends the attempt
  (logged); the NameNode starts another after ``block_recovery_timeout_s``.
* **holder**: ``init_replica`` stops a write of the replica still in progress (it keeps its
  bytes in rbw), claims the replica for the recovery's genstamp (a newer recovery wins) and
  says its state and length; ``update_replica`` cuts it, renames its checksum file to the
  new genstamp, finalizes it and reports it received.

Calls to holders go over RPC, to this node too, authorised by the task's block token;
at most ``datanode.block_recovery_max`` recoveries run at once.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Protocol

from xdfs.common.faults import FAULTS, fault_point
from xdfs.datanode.peers import Peers, log_failure
from xdfs.datanode.recovery_plan import RecoveryPlan, plan_recovery
from xdfs.datanode.replica import Replica
from xdfs.datanode.transfer import in_thread
from xdfs.errors import (
    BlockNotFound,
    CorruptReplica,
    DataError,
    InvalidArgument,
    Unavailable,
    XdfsError,
)
from xdfs.protocol.blocks import BlockRecord
from xdfs.protocol.datanode import (
    INIT_REPLICA_RECOVERY,
    UPDATE_REPLICA_UNDER_RECOVERY,
    CommitBlockSyncRequest,
    InitReplicaRecoveryRequest,
    RecoverBlockTask,
    ReplicaRecoveryInfo,
    UpdateReplicaRequest,
    WriteBlockResponse,
)
from xdfs.rpc.service import Method

if TYPE_CHECKING:
    from xdfs.config.datanode import DataNodeConfig
    from xdfs.datanode.storage import DataStorage

log = logging.getLogger(__name__)

FAULTS.register(
    "datanode.recovery_before_commit",
    "a block recovery's replicas are finalized with the new genstamp, not yet committed",
)


class NameNodeReports(Protocol):
    """What a recovery tells the NameNode (``offer.NameNodeOffer`` is one)."""

    async def report_received(self, record: BlockRecord) -> None: ...
    async def commit_block_sync(self, request: CommitBlockSyncRequest) -> None: ...


class RecoveringNode(Protocol):
    """What a recovery needs of its DataNode in either role (``server.DataNode`` is one;
    this module never imports it). ``offer_of`` names the actors of a block's shard."""

    storage: DataStorage

    def offer_of(self, block_id: int) -> NameNodeReports: ...
    async def stop_writer(self, block_id: int) -> None: ...
    def on_corrupt(self, replica: Replica, error: CorruptReplica) -> None: ...


class BlockRecovery:
    def __init__(self, node: RecoveringNode, config: DataNodeConfig, peers: Peers) -> None:
        self.node = node
        self._limit = config.block_recovery_max
        self._jobs: dict[int, asyncio.Task[None]] = {}
        self._peers = peers  # a dead holder: the attempt goes on without it

    @property
    def running(self) -> int:
        return len(self._jobs)

    # -- as the primary ---------------------------------------------------------------

    def submit(self, task: RecoverBlockTask) -> None:
        block_id = task.block.block_id
        previous = self._jobs.pop(block_id, None)
        if previous is not None:
            previous.cancel()  # superseded: the NameNode gave up on that attempt
        if len(self._jobs) >= self._limit:
            log.warning("dropping recovery of block %d: %d under way", block_id, len(self._jobs))
            return
        job = asyncio.get_running_loop().create_task(self._run(task))
        self._jobs[block_id] = job
        job.add_done_callback(lambda done: self._finished(block_id, done))

    def _finished(self, block_id: int, job: asyncio.Task[None]) -> None:
        if self._jobs.get(block_id) is job:
            del self._jobs[block_id]

    async def _run(self, task: RecoverBlockTask) -> None:
        block = task.block
        try:
            plan, stored = await self._recover(task)
        except (XdfsError, OSError) as exc:
            log.warning("recovery of block %d (genstamp %d) failed: %s; the NameNode will "
                        "start it again", block.block_id, task.recovery_genstamp, exc)
            return
        log.info("recovered block %d: genstamp %d, length %d%s, replicas on %s",
                 block.block_id, task.recovery_genstamp, plan.length,
                 " (dropped: no holder had a byte)" if plan.delete_block else "",
                 ", ".join(stored) or "none")

    async def _recover(self, task: RecoverBlockTask) -> tuple[RecoveryPlan, list[str]]:
        block = task.block
        init = InitReplicaRecoveryRequest(block, task.recovery_genstamp, task.token)
        results = await asyncio.gather(
            *(self._ask(address, INIT_REPLICA_RECOVERY, init) for address in task.targets),
            return_exceptions=True,
        )
        answers: list[tuple[str, ReplicaRecoveryInfo]] = []
        everyone = bool(task.targets)
        for address, result in zip(task.targets, results, strict=True):
            if isinstance(result, ReplicaRecoveryInfo):
                answers.append((address, result))
            elif not isinstance(result, BlockNotFound):  # BlockNotFound: it has none
                everyone = False
                log_failure(f"recovery of block {block.block_id}", address, result)
        plan = plan_recovery(block.block_id, block.genstamp, answers, everyone, task.new_length)
        stored = [] if plan.delete_block else await self._update_all(task, plan)
        fault_point("datanode.recovery_before_commit")
        await self.node.offer_of(block.block_id).commit_block_sync(CommitBlockSyncRequest(
            block, task.recovery_genstamp, plan.length, plan.delete_block, stored
        ))
        return plan, stored

    async def _update_all(self, task: RecoverBlockTask, plan: RecoveryPlan) -> list[str]:
        """Addresses whose replicas are now finalized with the new genstamp (at least one,
        else DataError)."""
        block_id = task.block.block_id
        update = UpdateReplicaRequest(block_id, task.recovery_genstamp, plan.length, task.token)
        results = await asyncio.gather(
            *(self._ask(a, UPDATE_REPLICA_UNDER_RECOVERY, update) for a in plan.participants),
            return_exceptions=True,
        )
        stored = []
        for address, result in zip(plan.participants, results, strict=True):
            if isinstance(result, WriteBlockResponse):
                stored.append(address)
            elif isinstance(result, BaseException):
                log_failure(f"recovery of block {block_id}", address, result)
        if not stored:
            raise DataError(f"no replica of block {block_id} could be finalized")
        return stored

    async def _ask(self, address: str, method: Method[Any, Any], request: Any) -> Any:
        async with self._peers.connect(address) as rpc:
            return await rpc.call(method, request)

    async def close(self) -> None:
        jobs = list(self._jobs.values())
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)

    # -- as a holder ------------------------------------------------------------------

    async def init_replica(self, block: BlockRecord, recovery_genstamp: int) -> ReplicaRecoveryInfo:
        """Stop any write of the replica, claim it for ``recovery_genstamp`` and describe
        it. BlockNotFound when this node has no usable replica (none, corrupt, or older
        than the block)."""
        node = self.node
        block_id = block.block_id
        await node.stop_writer(block_id)
        replica = node.storage.get(block_id)
        if replica is None or replica.corrupt or replica.genstamp < block.genstamp:
            raise BlockNotFound(f"no usable replica of block {block_id} here")
        if node.storage.is_busy(block_id):
            raise Unavailable(f"block {block_id} is being deleted or recovered here")
        newest = max(replica.genstamp, replica.recovery_genstamp)
        if newest >= recovery_genstamp:
            raise InvalidArgument(
                f"block {block_id}: a recovery with genstamp {newest} came first "
                f"(this one has {recovery_genstamp})"
            )
        replica.recovery_genstamp = recovery_genstamp
        return ReplicaRecoveryInfo(replica.record, replica.finalized)

    async def update_replica(self, block_id: int, recovery_genstamp: int, length: int) -> Replica:
        """Cut the claimed replica to ``length`` and finalize it with the new genstamp."""
        node = self.node
        storage = node.storage
        replica = storage.get(block_id)
        if replica is None or replica.recovery_genstamp != recovery_genstamp:
            raise InvalidArgument(
                f"block {block_id} is not claimed by a recovery with genstamp "
                f"{recovery_genstamp} here"
            )
        if not 0 <= length <= replica.num_bytes:
            raise InvalidArgument(
                f"block {block_id}: cannot recover {length} bytes from {replica.num_bytes}"
            )
        storage.claim(block_id)
        done: list[Replica] = []  # set even if we are cancelled while the thread runs
        try:
            await in_thread(lambda: done.append(storage.recover(replica, recovery_genstamp,
                                                                length)))
        except CorruptReplica as exc:
            node.on_corrupt(replica, exc)
            raise
        finally:
            if done:
                storage.add(done[0])
            storage.release(block_id)
        recovered = done[0]
        await node.offer_of(block_id).report_received(recovered.record)
        return recovered
