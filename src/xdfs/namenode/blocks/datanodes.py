"""DataNodes as the NameNode sees them (pure core): registry, liveness, command queues.

A DataNode is known by its ``node_id`` (stable across its restarts; its address may change).
It is *live* while its heartbeats keep coming; silent for ``heartbeat_misses_dead``
heartbeat intervals it is *dead*: it stays listed (admin reports show dead nodes) but holds
no replicas any more, and its next heartbeat is answered with UnknownDataNode so that it
registers and reports again (seed 003). The NameNode never calls a DataNode: commands wait
in per-node queues for the node's next heartbeat, and each heartbeat carries a bounded
amount of work.

Pure: times are passed in (seconds), nothing here reads a clock or does I/O.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from xdfs.errors import DisallowedDataNode, InvalidArgument, UnknownDataNode
from xdfs.namenode.blocks.admin_states import (
    DECOMMISSION_STATES,
    MAINTENANCE_STATES,
    NORMAL,
    HostLists,
)
from xdfs.namenode.blocks.topology import DEFAULT_RACK, Topology
from xdfs.protocol.datanode import StorageReport


class ReplicationWork(NamedTuple):
    """A copy the node must make of its replica of ``block_id`` to ``targets`` (node ids);
    turned into a ReplicateTask (addresses, token) when the heartbeat reply is built."""

    block_id: int
    targets: tuple[str, ...]


class RecoveryWork(NamedTuple):
    """A block recovery the node must coordinate as its primary (see block_recovery.py);
    turned into a RecoverBlockTask when the heartbeat reply is built."""

    block_id: int
    recovery_genstamp: int


@dataclass(eq=False)
class DataNode:
    node_id: str
    address: str
    storage: StorageReport
    registered_s: float
    last_heartbeat_s: float
    live: bool = True
    #: Block reads/writes/replications the node says it is running (its last heartbeat).
    transfers_in_progress: int = 0
    #: Replications scheduled with this node as source or target and not finished yet.
    replication_load: int = 0
    #: Commands for the next heartbeats (deletions are an ordered set of block ids).
    replicate: deque[ReplicationWork] = field(default_factory=deque)
    deletions: dict[int, None] = field(default_factory=dict)
    #: Deletions sent and not yet confirmed by a report: the node is no target for those
    #: blocks until it says the old replica is gone (delete-then-recopy relies on it).
    deleting: set[int] = field(default_factory=set)
    recover: list[RecoveryWork] = field(default_factory=list)
    full_reports: int = 0  # full reports completed since the node (re)registered
    #: Replicas of blocks "from the future" (an id or genstamp this namespace never
    #: allocated: a newer NameNode did): kept on the node, never deleted, only reported.
    future: set[int] = field(default_factory=set)
    #: Replicas it reported of another metadata shard's blocks (``block_state.
    #: another_shards``): ignored, never deleted (its pool is that shard's, not ours).
    foreign: set[int] = field(default_factory=set)
    report_requested_s: float = 0.0  # registration, or when a full report was last asked
    http_address: str = ""  # its HTTP server (WebHDFS redirects go there); "": none
    rack: str = DEFAULT_RACK
    #: admin_states.NORMAL, DECOMMISSIONING, ... (see admin_states.py)
    admin_state: str = NORMAL
    maintenance_expiry_s: float = 0.0  # when its maintenance ends (seconds since the epoch)
    #: Blocks it holds that lack their replication elsewhere (decommission / maintenance
    #: progress; recomputed by the replication monitor).
    admin_blocks_left: int = 0

    @property
    def accepts_replicas(self) -> bool:
        """Live and in service: a target for new replicas."""
        return self.live and self.admin_state == NORMAL

    @property
    def decommissioning(self) -> bool:
        return self.admin_state in DECOMMISSION_STATES

    @property
    def in_maintenance(self) -> bool:
        return self.admin_state in MAINTENANCE_STATES

    @property
    def load(self) -> int:
        """What placement weighs against: transfers running plus replications planned."""
        return self.transfers_in_progress + self.replication_load


class DataNodeManager:
    def __init__(self, heartbeat_interval_s: float, heartbeat_misses_dead: int) -> None:
        self.dead_after_s = heartbeat_interval_s * heartbeat_misses_dead
        self._nodes: dict[str, DataNode] = {}
        self._live_by_address: dict[str, DataNode] = {}
        self.topology = Topology()
        self.hosts = HostLists()
        self._rack_count: int | None = None

    # --- membership ----------------------------------------------------------------------

    def register(
        self, node_id: str, address: str, storage: StorageReport, now_s: float
    ) -> tuple[DataNode, list[DataNode]]:
        """Add or refresh a node; also returns the live nodes it displaces (another node
        id at the same address: that DataNode was replaced, e.g. its data dir wiped). The
        caller declares those dead, which removes their replicas."""
        if not node_id or not address:
            raise InvalidArgument("a DataNode registers with a node id and an address")
        _check_storage(storage)
        if not self.hosts.allowed(address):
            raise DisallowedDataNode(
                f"DataNode {node_id} at {address} is not in the include file: not allowed"
            )
        displaced = [
            other
            for other in (self._live_by_address.get(address),)
            if other is not None and other.node_id != node_id
        ]
        node = self._nodes.get(node_id)
        if node is None:
            node = DataNode(node_id, address, storage, now_s, now_s, report_requested_s=now_s)
            self._nodes[node_id] = node
        else:
            if self._live_by_address.get(node.address) is node:
                del self._live_by_address[node.address]
            node.address, node.storage = address, storage
            node.registered_s = node.last_heartbeat_s = now_s
            node.live = True
            node.deleting.clear()  # the full report that follows is the truth
            node.full_reports = 0
            node.report_requested_s = now_s
        self._live_by_address[address] = node
        node.rack = self.topology.rack_of(address)
        self.apply_hosts(node, now_s)
        self.states_changed()
        return node, displaced

    def apply_hosts(self, node: DataNode, now_s: float) -> bool:
        """Move ``node`` to the admin state the host lists want; True when it changed (a
        decommissioned node stays so while excluded, a node in maintenance keeps its
        progress and takes the new expiry)."""
        wanted, expiry = self.hosts.wanted(node.address, now_s)
        before = (node.admin_state, node.maintenance_expiry_s)
        if wanted == NORMAL:
            node.admin_state, node.maintenance_expiry_s = NORMAL, 0.0
        elif wanted in DECOMMISSION_STATES:
            if not node.decommissioning:
                node.admin_state, node.maintenance_expiry_s = wanted, 0.0
        elif node.in_maintenance:
            node.maintenance_expiry_s = expiry
        else:
            node.admin_state, node.maintenance_expiry_s = wanted, expiry
        return (node.admin_state, node.maintenance_expiry_s) != before

    def refresh(self, hosts: HostLists, now_s: float) -> tuple[list[DataNode], list[DataNode]]:
        """New host lists: (nodes whose admin state changed, live nodes no longer allowed:
        the caller declares those dead)."""
        self.hosts = hosts
        self.states_changed()
        changed = [node for node in self._nodes.values() if self.apply_hosts(node, now_s)]
        refused = [node for node in self.live_nodes() if not hosts.allowed(node.address)]
        return changed, refused

    def heartbeat(
        self, node_id: str, storage: StorageReport, transfers: int, now_s: float
    ) -> DataNode:
        node = self.get_live(node_id)
        _check_storage(storage)
        node.storage = storage
        node.transfers_in_progress = max(0, transfers)
        node.last_heartbeat_s = now_s
        return node

    def get_live(self, node_id: str) -> DataNode:
        """The live node ``node_id``; UnknownDataNode (register again) otherwise."""
        node = self._nodes.get(node_id)
        if node is None or not node.live:
            state = "unknown" if node is None else "declared dead"
            raise UnknownDataNode(f"DataNode {node_id} is {state}: register and report again")
        return node

    def get(self, node_id: str) -> DataNode | None:
        return self._nodes.get(node_id)

    def live_at(self, address: str) -> DataNode | None:
        return self._live_by_address.get(address)

    def expired(self, now_s: float) -> list[DataNode]:
        """Live nodes whose last heartbeat is older than the dead interval."""
        return [
            node
            for node in self._live_by_address.values()
            if now_s - node.last_heartbeat_s > self.dead_after_s
        ]

    def mark_dead(self, node: DataNode) -> None:
        """The node stops being a target or a source; its queued commands are dropped (it
        will register again, report, and be told what to do then)."""
        node.live = False
        self.states_changed()
        if self._live_by_address.get(node.address) is node:
            del self._live_by_address[node.address]
        node.replicate.clear()
        node.deletions.clear()
        node.future.clear()
        node.foreign.clear()
        node.deleting.clear()
        node.recover.clear()
        node.replication_load = 0
        node.transfers_in_progress = 0

    # --- views ---------------------------------------------------------------------------

    def live_nodes(self) -> list[DataNode]:
        return list(self._live_by_address.values())

    def live_count(self) -> int:
        return len(self._live_by_address)

    def rack_count(self) -> int:
        """Racks with a live in-service node (placement and fsck judge spread by it);
        cached: every block check asks."""
        if self._rack_count is None:
            self._rack_count = len({node.rack for node in self._live_by_address.values()
                                    if node.accepts_replicas})
        return self._rack_count

    def states_changed(self) -> None:
        """A node joined, died, or changed admin state: count the racks again."""
        self._rack_count = None

    def __iter__(self) -> Iterator[DataNode]:
        return iter(self._nodes.values())

    # --- commands ------------------------------------------------------------------------

    @staticmethod
    def take_commands(
        node: DataNode, deletions_max: int
    ) -> tuple[list[ReplicationWork], list[int]]:
        """What the node's heartbeat reply carries: every queued replication (the
        scheduler already bounds them per node) and at most ``deletions_max`` deletions."""
        work = list(node.replicate)
        node.replicate.clear()
        deletions: list[int] = []
        for block_id in node.deletions:
            if len(deletions) >= deletions_max:
                break
            deletions.append(block_id)
        for block_id in deletions:
            del node.deletions[block_id]
        node.deleting.update(deletions)
        return work, deletions


def _check_storage(storage: StorageReport) -> None:
    if min(storage.capacity_bytes, storage.used_bytes, storage.free_bytes) < 0:
        raise InvalidArgument(f"negative storage figures: {storage!r}")
