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

import contextlib
import itertools
import random
from collections.abc import Callable

from xdfs.config import NameNodeConfig
from xdfs.errors import NotEnoughReplicas
from xdfs.namenode.blocks import decommission, placement
from xdfs.namenode.blocks.admin_states import IN_MAINTENANCE, NORMAL
from xdfs.namenode.blocks.block_state import (
    BlockState,
    ReplicaCounts,
    block_state,
)
from xdfs.namenode.blocks.blockmap import BAD_GENSTAMP, BlockMap
from xdfs.namenode.blocks.datanodes import DataNode, DataNodeManager, ReplicationWork
from xdfs.namenode.blocks.replication_queues import (
    NeededReplications,
    PendingReplications,
    PendingTask,
)
from xdfs.namenode.blocks.safemode import SafeMode
from xdfs.namenode.blocks.topology import DEFAULT_RACK
from xdfs.namenode.namespace.tree import Namespace


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
        #: Replicas of nodes that died in maintenance: block id -> node ids, still counted
        #: until the maintenance ends (the map dropped them: they are not readable).
        self.maintenance_held: dict[int, set[str]] = {}
        #: Balancer moves: block id -> source node id, the replica to drop once the
        #: target's copy makes one too many (HDFS's delHint).
        self.move_hints: dict[int, str] = {}
        self._admin_checked_s = float("-inf")
        self._racks_seen = 1
        self._rescan: list[int] = []
        #: Deletions postponed out of safe mode too: a standby, or a NameNode just made
        #: active that has not heard from every DataNode since (blocks/failover.py).
        self.deletions_held = False

    # --- events --------------------------------------------------------------------------

    def check(self, block_id: int) -> None:
        """File the block as needed, missing or neither; trim excess and corrupt replicas
        (postponed in safe mode).

        Replicas on decommissioning nodes do not count (they are copied elsewhere, and are
        never deleted for being in excess); those on nodes in maintenance count, down or
        not, as long as ``maintenance_min_replicas`` others do (see admin_states.py)."""
        self.check_state(block_id, block_state(self.ns, block_id))

    def check_state(self, block_id: int, state: BlockState | None) -> None:
        """:meth:`check` for a caller that has just looked up the block's state (and
        changed nothing in the namespace since): it is not looked up again."""
        try:
            self._check(block_id, state)
        finally:
            if block_id in self.move_hints and not self.pending.count(block_id):
                del self.move_hints[block_id]  # the move ended: its hint served or not

    def _check(self, block_id: int, state: BlockState | None) -> None:
        if state is None or not state.complete:
            self._unqueue(block_id)
            return
        if not self._postponing:
            self._drop_leftovers(block_id, state)
        counts = self.counts(block_id, state.file.replication)
        if counts.any_good == 0:
            self.missing.add(block_id)
        else:
            self.missing.discard(block_id)
        pending = self.pending.count(block_id)
        if counts.any_good > 0 and (
            counts.short > pending or (pending == 0 and self._mis_replicated(counts))
        ):
            self.needed.add(block_id, max(1, counts.counted))
        else:
            self.needed.remove(block_id)
        if counts.counted < counts.expected or not (counts.surplus > 0 or counts.corrupt):
            return
        if self._postponing:
            self._postponed[block_id] = None
            return
        for node_id in counts.corrupt:
            self.invalidate(block_id, node_id)
        for node_id in self._excess(block_id, counts):
            self.invalidate(block_id, node_id)

    def counts(self, block_id: int, expected: int) -> ReplicaCounts:
        """The block's replicas by what they count for (see :class:`ReplicaCounts`)."""
        normal: list[str] = []
        maintenance = set(self.maintenance_held.get(block_id, ()))
        corrupt: list[str] = []
        any_good = 0
        for replica in self.map.replicas(block_id):
            if replica.flags:
                corrupt.append(replica.node_id)
                continue
            any_good += 1
            node = self.datanodes.get(replica.node_id)
            if node is None or node.admin_state == NORMAL:
                normal.append(replica.node_id)
            elif node.in_maintenance:
                maintenance.add(replica.node_id)
        floor = min(self.config.maintenance_min_replicas, expected) if maintenance else 0
        return ReplicaCounts(expected, tuple(normal), tuple(maintenance), tuple(corrupt),
                             any_good, floor)

    def _mis_replicated(self, counts: ReplicaCounts) -> bool:
        cluster_racks = self.datanodes.rack_count()
        if cluster_racks <= 1:
            return False  # the common case, without a look at the replicas' racks
        racks = [self._rack(node_id) for node_id in counts.normal + counts.maintenance]
        return placement.mis_replicated(racks, cluster_racks, counts.expected)

    def _excess(self, block_id: int, counts: ReplicaCounts) -> list[str]:
        """Which normal replicas to delete: never below the replication nor below the
        maintenance floor; first where a rack keeps another replica (rack spread is not
        lost), then a balancer's source (``move_hints``), then the fullest nodes."""
        trim = min(counts.surplus, len(counts.normal) - counts.floor)
        if trim <= 0:
            return []
        hint = self.move_hints.get(block_id)
        chosen: list[str] = []
        racks = [self._rack(n) for n in counts.normal + counts.maintenance]
        left = list(counts.normal)
        for _ in range(trim):
            pick = min(left, key=lambda n: (
                racks.count(self._rack(n)) < 2 and len(set(racks)) > 1,
                n != hint, self._free_bytes(n), self.rng.random(),
            ))
            left.remove(pick)
            racks.remove(self._rack(pick))
            chosen.append(pick)
        return chosen

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
        if self.move_hints.get(block_id) == node_id:
            del self.move_hints[block_id]
        self.map.remove(block_id, node_id)
        self._queue_deletion(block_id, node_id)

    def _queue_deletion(self, block_id: int, node_id: str) -> None:
        node = self.datanodes.get(node_id)
        if node is not None and node.live:
            node.deletions[block_id] = None

    def forget_block(self, block_id: int) -> None:
        """The block left the namespace durably: delete every replica."""
        self._unqueue(block_id)
        self.maintenance_held.pop(block_id, None)
        self.move_hints.pop(block_id, None)
        for task in self.pending.drop_block(block_id):
            self._release(task)
        for replica in self.map.drop_block(block_id):
            self._queue_deletion(block_id, replica.node_id)

    def node_dead(self, node: DataNode, lost_blocks: list[int]) -> None:
        """``node`` died and its replicas of ``lost_blocks`` were dropped from the map."""
        affected = set(lost_blocks)
        if node.admin_state == IN_MAINTENANCE:  # still counted until the maintenance ends
            for block_id in lost_blocks:
                self.maintenance_held.setdefault(block_id, set()).add(node.node_id)
        for task in self.pending.drop_node(node.node_id):
            self._release(task)
            affected.add(task.block_id)
        for block_id in affected:
            self.check(block_id)

    @property
    def _postponing(self) -> bool:
        return self.safe_mode.on or self.deletions_held

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
        self._admin_progress()
        self._rack_rescan(self.config.deletions_per_heartbeat)
        limit = max(1, 2 * self.config.replication_streams_per_node * self.datanodes.live_count())
        # postponed decisions mostly delete: as many as one heartbeat may carry
        if not self.deletions_held:
            self._run_postponed(self.config.deletions_per_heartbeat)
        return sum(self._schedule(block_id) for block_id in self.needed.pop_batch(limit))

    def block_state(self, block_id: int) -> BlockState | None:
        return block_state(self.ns, block_id)

    def _admin_progress(self) -> None:
        now_s = self.clock()
        if now_s - self._admin_checked_s < self.config.decommission_check_interval_s:
            return
        self._admin_checked_s = now_s
        decommission.progress(self, now_s)

    def _rack_rescan(self, batch: int) -> None:
        """When the cluster gains a second rack, blocks placed while it had one are
        mis-replicated: look at every block again (``batch`` per round, HDFS's
        processMisReplicatedBlocks); nothing else would (no replica of theirs changes)."""
        racks = self.datanodes.rack_count()
        if racks > 1 and self._racks_seen <= 1:
            self._rescan = sorted(set().union(
                *(self.map.node_blocks(n.node_id) for n in self.datanodes.live_nodes())))
        self._racks_seen = racks
        for block_id in self._rescan[:batch]:
            self.check(block_id)
        del self._rescan[:batch]

    def release_held(self, node_id: str) -> None:
        """The maintenance of ``node_id`` ended while it was down: its replicas stop
        counting."""
        for block_id in [b for b, nodes in self.maintenance_held.items() if node_id in nodes]:
            self.maintenance_held[block_id].discard(node_id)
            if not self.maintenance_held[block_id]:
                del self.maintenance_held[block_id]
            self.check(block_id)

    def _schedule(self, block_id: int) -> int:
        """Ask a source to copy ``block_id`` to enough new targets; 0 when it cannot now."""
        state = block_state(self.ns, block_id)
        if state is None or not state.complete:
            return 0
        replicas = self.map.replicas(block_id)
        good = [r for r in replicas if not r.flags]
        counts = self.counts(block_id, state.file.replication)
        pending = self.pending.count(block_id)
        need = counts.short - pending
        if need <= 0 and pending == 0 and self._mis_replicated(counts):
            need = 1  # one more on another rack; the surplus goes once it is reported
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
            # to the end of its level: others go first
            self.needed.add(block_id, max(1, counts.counted))
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
        racks = [self._rack(n) for n in counts.normal + counts.maintenance]
        targets = self._targets(count, holders, state, racks=racks)
        if not targets:
            self._repair_in_place(block_id, holders, state)
            self.needed.add(block_id, max(1, counts.counted))
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
        self, count: int, excluded: set[str], state: BlockState, *, busy_too: bool = False,
        racks: list[str] | None = None,
    ) -> list[DataNode]:
        """Nodes with room for the block below their stream limit (``busy_too``: at it,
        too), none of ``excluded``."""
        streams = None if busy_too else self.config.replication_streams_per_node
        with contextlib.suppress(NotEnoughReplicas):  # no room now: the block waits
            return placement.choose_targets(
                self.datanodes.live_nodes(), count, excluded=excluded,
                block_size_bytes=state.record.num_bytes, replication_load_max=streams,
                rng=self.rng, existing_racks=racks or (),
            )
        return []

    def _repair_in_place(self, block_id: int, holders: set[str], state: BlockState) -> None:
        """No other node could ever take a copy (busy ones will, later): delete one corrupt
        replica on a node that can then take a good copy; the copy is scheduled once the
        node reports the deletion."""
        corrupt = {r.node_id for r in self.map.replicas(block_id) if r.flags}
        if not corrupt or self.deletions_held or self._targets(1, holders, state, busy_too=True):
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

    def _rack(self, node_id: str) -> str:
        node = self.datanodes.get(node_id)
        return node.rack if node is not None else DEFAULT_RACK

    def _free_bytes(self, node_id: str) -> int:
        node = self.datanodes.get(node_id)
        return node.storage.free_bytes if node is not None else 0
