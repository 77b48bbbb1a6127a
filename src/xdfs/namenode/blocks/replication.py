"""The replication monitor (pure core): each block's place, copies to ask, replicas to drop.

:meth:`ReplicationMonitor.check` is called whenever something about one block changes (a
replica added, lost or found corrupt, its node dead, its file's replication changed or the
file completed) and files the block: *needed* (fewer live good replicas than expected,
counting copies already asked), *missing* (no live good replica: nothing to copy from), or
neither. The same call trims: excess replicas go from the fullest nodes, corrupt ones once
enough good ones exist (before that they are kept: a reader may still need one). Replicas
with a generation stamp older than the block's (left behind by a block recovery) are
*stale* and go as soon as ``min_replication`` good ones exist (HDFS), and so do replicas in
state rbw of a complete block (a target that failed mid-write, a holder that took no part
in a recovery).

When a block lacks replicas and no node without one can take a copy, but a live node holds
a corrupt replica of it, that replica is deleted first and the copy made to the same node
once its deletion is reported (MooseFS's repair in place). A good replica is never deleted
for this, and a block whose replicas are all corrupt keeps them all.

:meth:`ReplicationMonitor.tick` (a duty every ``replication_check_interval_s``) expires
copies whose target never reported, then asks sources to copy queued blocks: a live node
holding a good replica below its stream limit copies to targets chosen by placement among
nodes that hold no replica. In safe mode it neither copies nor deletes: those decisions are
postponed until safe mode ends (the DataNodes may not all have reported yet).
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import random
from collections.abc import Callable
from typing import NamedTuple

from xdfs.config import NameNodeConfig
from xdfs.errors import NotEnoughReplicas
from xdfs.namenode.blocks import placement
from xdfs.namenode.blocks.blockmap import BAD_GENSTAMP, BAD_LENGTH, BlockMap
from xdfs.namenode.blocks.datanodes import DataNode, DataNodeManager, ReplicationWork
from xdfs.namenode.blocks.replication_queues import (
    NeededReplications,
    PendingReplications,
    PendingTask,
)
from xdfs.namenode.blocks.safemode import SafeMode
from xdfs.namenode.namespace.inodes import FileInode
from xdfs.namenode.namespace.tree import Namespace
from xdfs.protocol.blocks import BlockRecord


class BlockState(NamedTuple):
    file: FileInode
    record: BlockRecord  # as committed in the namespace
    complete: bool  # False for the last block of a file being written


def block_state(ns: Namespace, block_id: int) -> BlockState | None:
    """Where ``block_id`` stands in the namespace; None when no file holds it."""
    file = ns.block_file(block_id)
    if file is None:
        return None
    blocks = file.blocks
    index = bisect.bisect_left(blocks, block_id, key=_block_id)
    if index >= len(blocks) or blocks[index].block_id != block_id:
        # block ids grow with each add_block, so lists are sorted; a scan covers the rest
        index = next(i for i, block in enumerate(blocks) if block.block_id == block_id)
    complete = index < len(blocks) - 1 or not ns.is_open(file)
    return BlockState(file, blocks[index], complete)


def from_the_future(ns: Namespace, reported: BlockRecord) -> bool:
    """A replica whose block id or genstamp this namespace never allocated: a newer
    NameNode (one promoted while this one was away, or this one restarted from older
    edits) created it. As HDFS, it is neither an orphan nor corrupt: deleting it could
    destroy acknowledged data, so it is kept and reported."""
    return reported.block_id >= ns.next_block_id or reported.genstamp >= ns.next_genstamp


def replica_flags(state: BlockState, reported: BlockRecord) -> int:
    """Why a reported replica is corrupt (0: it is good)."""
    flags = 0
    if reported.genstamp != state.record.genstamp:
        flags |= BAD_GENSTAMP
    if state.complete and reported.num_bytes != state.record.num_bytes:
        flags |= BAD_LENGTH
    return flags


class ReplicationMonitor:
    def __init__(
        self,
        ns: Namespace,
        config: NameNodeConfig,
        safe_mode: SafeMode,
        datanodes: DataNodeManager,
        block_map: BlockMap,
        *,
        clock: Callable[[], float],
        rng: random.Random,
    ) -> None:
        self.ns = ns
        self.config = config
        self.safe_mode = safe_mode
        self.datanodes = datanodes
        self.map = block_map
        self.clock = clock
        self.rng = rng
        self.needed = NeededReplications()
        self.pending = PendingReplications()
        self.missing: set[int] = set()
        # Decisions that wait for the end of safe mode: blocks to look at again, and orphan
        # replicas (node id, block id) to delete if their block is still unknown then.
        self._postponed: dict[int, None] = {}
        self._postponed_orphans: dict[tuple[str, int], None] = {}
        #: Deletions postponed out of safe mode too: a standby, or a NameNode just made
        #: active that has not heard from every DataNode since (blocks/failover.py).
        self.held = False

    # --- events --------------------------------------------------------------------------

    def check(self, block_id: int) -> None:
        """File the block as needed, missing or neither; trim excess and corrupt replicas
        (postponed in safe mode)."""
        state = block_state(self.ns, block_id)
        if state is None or not state.complete:
            self._unqueue(block_id)
            return
        if not self._postponing:
            self._drop_leftovers(block_id, state)
        replicas = self.map.replicas(block_id)
        good = [r for r in replicas if not r.flags]
        live, expected = len(good), state.file.replication
        if live == 0:
            self.missing.add(block_id)
        else:
            self.missing.discard(block_id)
        if live > 0 and live + self.pending.count(block_id) < expected:
            self.needed.add(block_id, live)
        else:
            self.needed.remove(block_id)
        if live < expected or (live == expected and len(good) == len(replicas)):
            return
        if self._postponing:
            self._postponed[block_id] = None
            return
        for replica in [r for r in replicas if r.flags]:
            self.invalidate(block_id, replica.node_id)
        fullest_first = sorted(good, key=lambda r: (self._free_bytes(r.node_id), self.rng.random()))
        for replica in fullest_first[: live - expected]:
            self.invalidate(block_id, replica.node_id)

    def _drop_leftovers(self, block_id: int, state: BlockState) -> None:
        """Once a complete block has min_replication good replicas, delete what a write or
        a recovery left behind of it: stale replicas, and every replica in state rbw (at
        best a prefix of a good replica; left in place, it would also keep its node from
        taking a good copy)."""
        if self.map.good_count(block_id) < self.config.min_replication:
            return
        committed = state.record.genstamp
        for replica in list(self.map.replicas(block_id)):
            if replica.flags & BAD_GENSTAMP and replica.genstamp < committed:
                self.invalidate(block_id, replica.node_id)
        for replica in list(self.map.rbw_replicas(block_id)):
            self.map.remove_rbw(block_id, replica.node_id)
            self._queue_deletion(block_id, replica.node_id)

    def orphan(self, node: DataNode, block_id: int) -> None:
        """``node`` reported a replica of a block no file holds."""
        if self._postponing:
            self._postponed_orphans[(node.node_id, block_id)] = None
        else:
            node.deletions[block_id] = None

    def replica_arrived(self, block_id: int, node_id: str) -> None:
        task = self.pending.resolve(block_id, node_id)
        if task is not None:
            self._release(task)

    def invalidate(self, block_id: int, node_id: str) -> None:
        """Remove a replica from the map now and queue its deletion on the node."""
        self.map.remove(block_id, node_id)
        self._queue_deletion(block_id, node_id)

    def _queue_deletion(self, block_id: int, node_id: str) -> None:
        node = self.datanodes.get(node_id)
        if node is not None and node.live:
            node.deletions[block_id] = None

    def forget_block(self, block_id: int) -> None:
        """The block left the namespace durably: delete every replica."""
        self._unqueue(block_id)
        for task in self.pending.drop_block(block_id):
            self._release(task)
        for replica in self.map.drop_block(block_id):
            self._queue_deletion(block_id, replica.node_id)

    def node_dead(self, node: DataNode, lost_blocks: list[int]) -> None:
        """``node`` died and its replicas of ``lost_blocks`` were dropped from the map."""
        affected = set(lost_blocks)
        for task in self.pending.drop_node(node.node_id):
            self._release(task)
            affected.add(task.block_id)
        for block_id in affected:
            self.check(block_id)

    @property
    def _postponing(self) -> bool:
        return self.safe_mode.on or self.held

    # --- the duty ------------------------------------------------------------------------

    def tick(self) -> int:
        """One round: expire pending copies, then (out of safe mode) run postponed
        decisions and schedule copies. Bounded: at most ``deletions_per_heartbeat``
        postponed decisions, and twice the cluster's replication streams worth of queued
        blocks are looked at. Returns the copies asked."""
        for task in self.pending.expire(self.clock()):
            self._release(task)
            self.check(task.block_id)
        if self.safe_mode.on:
            return 0
        limit = max(1, 2 * self.config.replication_streams_per_node * self.datanodes.live_count())
        # postponed decisions mostly delete: as many as one heartbeat may carry
        if not self.held:
            self._run_postponed(self.config.deletions_per_heartbeat)
        return sum(self._schedule(block_id) for block_id in self.needed.pop_batch(limit))

    def _schedule(self, block_id: int) -> int:
        """Ask a source to copy ``block_id`` to enough new targets; 0 when it cannot now."""
        state = block_state(self.ns, block_id)
        if state is None or not state.complete:
            return 0
        replicas = self.map.replicas(block_id)
        good = [r for r in replicas if not r.flags]
        need = state.file.replication - len(good) - self.pending.count(block_id)
        if need <= 0 or not good:
            self.check(block_id)
            return 0
        streams = self.config.replication_streams_per_node
        sources = [
            node
            for node in map(self.datanodes.get, (r.node_id for r in good))
            if node is not None and node.live and node.replication_load < streams
        ]
        if not sources:
            self.needed.add(block_id, len(good))  # to the end of its level: others go first
            return 0
        source = min(sources, key=lambda node: (node.replication_load, self.rng.random()))
        holders = {r.node_id for r in replicas} | set(self.pending.targets(block_id))
        holders.update(r.node_id for r in self.map.rbw_replicas(block_id))
        # a node still to delete its old replica of this block must not receive it again
        # before it says the old one is gone
        holders.update(
            n.node_id
            for n in self.datanodes.live_nodes()
            if block_id in n.deletions or block_id in n.deleting
        )
        count = min(need, streams - source.replication_load)  # each target is a stream
        targets = self._targets(count, holders, state)
        if not targets:
            self._repair_in_place(block_id, holders, state)
            self.needed.add(block_id, len(good))
            return 0
        target_ids = tuple(node.node_id for node in targets)
        source.replicate.append(ReplicationWork(block_id, target_ids))
        deadline_s = self.clock() + self.config.replication_pending_timeout_s
        self.pending.add(block_id, source.node_id, target_ids, deadline_s)
        source.replication_load += len(targets)
        for target in targets:
            target.replication_load += 1
        self.check(block_id)  # still short (too few targets)? then back in the queue
        return len(targets)

    def _targets(
        self, count: int, excluded: set[str], state: BlockState, *, busy_too: bool = False
    ) -> list[DataNode]:
        """Nodes with room for the block below their stream limit (``busy_too``: at it,
        too), none of ``excluded``."""
        streams = None if busy_too else self.config.replication_streams_per_node
        with contextlib.suppress(NotEnoughReplicas):  # no room now: the block waits
            return placement.choose_targets(
                self.datanodes.live_nodes(), count, excluded=excluded,
                block_size_bytes=state.record.num_bytes, replication_load_max=streams,
                rng=self.rng,
            )
        return []

    def _repair_in_place(self, block_id: int, holders: set[str], state: BlockState) -> None:
        """No other node could ever take a copy (busy ones will, later): delete one corrupt
        replica on a node that can then take a good copy; the copy is scheduled once the
        node reports the deletion."""
        corrupt = {r.node_id for r in self.map.replicas(block_id) if r.flags}
        if not corrupt or self.held or self._targets(1, holders, state, busy_too=True):
            return
        chosen = self._targets(1, holders - corrupt, state)
        if chosen and chosen[0].node_id in corrupt:
            self.invalidate(block_id, chosen[0].node_id)

    def _run_postponed(self, limit: int) -> None:
        for block_id in list(itertools.islice(self._postponed, limit)):
            del self._postponed[block_id]
            self.check(block_id)
        for node_id, block_id in list(itertools.islice(self._postponed_orphans, limit)):
            del self._postponed_orphans[(node_id, block_id)]
            node = self.datanodes.get(node_id)
            if node is not None and node.live and self.ns.block_file(block_id) is None:
                node.deletions[block_id] = None

    # --- counts and helpers --------------------------------------------------------------

    def under_replicated_count(self) -> int:
        return len(set(self.needed) | set(self.pending.blocks()))

    def _release(self, task: PendingTask) -> None:
        for node_id in (task.source, task.target):
            node = self.datanodes.get(node_id)
            if node is not None and node.replication_load > 0:
                node.replication_load -= 1

    def _unqueue(self, block_id: int) -> None:
        self.needed.remove(block_id)
        self.missing.discard(block_id)
        self._postponed.pop(block_id, None)

    def _free_bytes(self, node_id: str) -> int:
        node = self.datanodes.get(node_id)
        return node.storage.free_bytes if node is not None else 0


def _block_id(block: BlockRecord) -> int:
    return block.block_id
