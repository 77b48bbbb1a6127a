"""Replicate commands: copy a local replica to other DataNodes (as a client would write it).

Each command runs as a background task, at most ``replication_concurrency_max`` at once,
with at most ``replication_queue_max`` more waiting (the NameNode schedules a command
again when its replica is not reported in time, so one dropped here is not lost). The
targets of one command are written in parallel, each from its own verified read of the
replica; a failure is logged and affects only its target.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Protocol

from xdfs.datanode.peers import Peers, log_failure
from xdfs.datanode.replica import Replica
from xdfs.datanode.transfer import PieceStream
from xdfs.protocol.datanode import WRITE_BLOCK, ReplicateTask, WriteBlockRequest

if TYPE_CHECKING:
    from xdfs.common.aio import KernelSyncs
    from xdfs.config.datanode import DataNodeConfig
    from xdfs.datanode.replica import ReplicaReader
    from xdfs.datanode.storage import DataStorage
    from xdfs.datanode.transfer import Transfers
    from xdfs.errors import CorruptReplica

log = logging.getLogger(__name__)


class ReplicaSource(Protocol):
    """What a copy reads through its DataNode (``server.DataNode`` is one; this module
    never imports it): the replica map, and verified reads whose failures it deals with."""

    storage: DataStorage
    transfers: Transfers
    syncs: KernelSyncs | None

    def open_replica(self, replica: Replica, offset: int, length: int) -> ReplicaReader: ...
    def on_corrupt(self, replica: Replica, error: CorruptReplica) -> None: ...


class Replicator:
    def __init__(self, node: ReplicaSource, config: DataNodeConfig, peers: Peers) -> None:
        self.node = node
        self._slots = asyncio.Semaphore(config.replication_concurrency_max)
        self._limit = config.replication_concurrency_max + config.replication_queue_max
        self._jobs: dict[int, asyncio.Task[None]] = {}
        self._peers = peers

    @property
    def running(self) -> int:
        return len(self._jobs)

    def submit(self, task: ReplicateTask) -> None:
        block_id = task.block.block_id
        if block_id in self._jobs:
            return  # the same copy is already under way
        if len(self._jobs) >= self._limit:
            log.warning("dropping replication of block %d: %d already queued",
                        block_id, len(self._jobs))
            return
        job = asyncio.get_running_loop().create_task(self._run(task))
        self._jobs[block_id] = job
        job.add_done_callback(lambda _job: self._jobs.pop(block_id, None))

    async def _run(self, task: ReplicateTask) -> None:
        async with self._slots:
            replica = self.node.storage.get(task.block.block_id)
            if (
                replica is None
                or replica.corrupt
                or not replica.finalized
                or replica.genstamp != task.block.genstamp
                or replica.num_bytes < task.block.num_bytes  # shorter than the file says
            ):
                state = "missing" if replica is None else (
                    "corrupt" if replica.corrupt else
                    "in rbw" if not replica.finalized else str(replica.record))
                log.warning("cannot replicate %s: local replica is %s", task.block, state)
                return
            results = await asyncio.gather(
                *(self._copy(replica, task.token, target) for target in task.targets),
                return_exceptions=True,
            )
        for target, result in zip(task.targets, results, strict=True):
            if isinstance(result, BaseException):
                log_failure(f"replication of block {replica.block_id}", target, result)
            else:
                log.info("replicated block %d to %s", replica.block_id, target)

    async def _copy(self, replica: Replica, token: str, target: str) -> None:
        node = self.node
        reader = node.open_replica(replica, 0, replica.num_bytes)
        stream = PieceStream(reader, node.on_corrupt, node.transfers, node.syncs)
        request = WriteBlockRequest(replica.record, token, client=self._peers.client_name)
        try:
            async with self._peers.connect(target) as rpc:
                await rpc.upload(WRITE_BLOCK, request, stream)
        finally:
            stream.close()

    async def close(self) -> None:
        jobs = list(self._jobs.values())
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
