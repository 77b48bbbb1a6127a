"""Decommission and maintenance progress (pure core; HDFS's DatanodeAdminManager).

Run by the replication monitor every ``decommission_check_interval_s``: a live node
*decommissioning* whose every block has its full replication on other in-service (or
in-maintenance) nodes becomes *decommissioned*; one *entering maintenance* whose every
block keeps ``maintenance_min_replicas`` in-service replicas elsewhere is *in
maintenance*; a maintenance that reached its expiry ends (the node is in service again,
and if it is down its replicas stop counting). A node's progress is only judged once it
sent a full report since it registered (before, the NameNode does not know what it holds).
A change of admin state (host lists refreshed, a node registering) files every block of
the node again, which queues the copies decommissioning needs.
"""

from __future__ import annotations

from typing import Protocol

from xdfs.config import NameNodeConfig
from xdfs.namenode.blocks.admin_states import (
    DECOMMISSIONED,
    DECOMMISSIONING,
    ENTERING_MAINTENANCE,
    IN_MAINTENANCE,
    NORMAL,
    HostLists,
)
from xdfs.namenode.blocks.block_state import BlockState, ReplicaCounts
from xdfs.namenode.blocks.blockmap import BlockMap
from xdfs.namenode.blocks.datanodes import DataNode, DataNodeManager


class ReplicationMonitor(Protocol):
    """What a drain needs of the replication monitor (which runs it: see replication.py)."""

    config: NameNodeConfig
    datanodes: DataNodeManager
    map: BlockMap

    def check(self, block_id: int) -> None: ...
    def release_held(self, node_id: str) -> None: ...
    def block_state(self, block_id: int) -> BlockState | None: ...
    def counts(self, block_id: int, expected: int) -> ReplicaCounts: ...


def node_changed(monitor: ReplicationMonitor, node: DataNode) -> None:
    """``node``'s admin state changed: look at each of its blocks again."""
    if node.admin_state == NORMAL:
        node.admin_blocks_left = 0
        if not node.live:
            monitor.release_held(node.node_id)
    for block_id in list(monitor.map.node_blocks(node.node_id)):
        monitor.check(block_id)


def refresh(monitor: ReplicationMonitor, hosts: HostLists, now_s: float) -> list[DataNode]:
    """Apply new host lists; the live nodes no longer allowed (the caller declares them
    dead: they cannot register again)."""
    changed, refused = monitor.datanodes.refresh(hosts, now_s)
    for node in changed:
        node_changed(monitor, node)
    return refused


def progress(monitor: ReplicationMonitor, now_s: float) -> list[DataNode]:
    """One round over the nodes being drained; the nodes whose state changed."""
    changed: list[DataNode] = []
    for node in list(monitor.datanodes):
        before = node.admin_state
        if node.in_maintenance and node.maintenance_expiry_s <= now_s:
            node.admin_state, node.maintenance_expiry_s = NORMAL, 0.0
        elif before in (DECOMMISSIONING, ENTERING_MAINTENANCE) and node.live:
            node.admin_blocks_left = blocks_left(monitor, node)
            if node.admin_blocks_left == 0 and node.full_reports > 0:
                node.admin_state = (
                    DECOMMISSIONED if before == DECOMMISSIONING else IN_MAINTENANCE
                )
        if node.admin_state != before:
            monitor.datanodes.states_changed()
            changed.append(node)
            if node.admin_state == NORMAL:
                node_changed(monitor, node)
    return changed


def blocks_left(monitor: ReplicationMonitor, node: DataNode) -> int:
    """Blocks of ``node`` not yet safe without it (see the module doc)."""
    left = 0
    maintenance_min = monitor.config.maintenance_min_replicas
    for block_id in monitor.map.node_blocks(node.node_id):
        state = monitor.block_state(block_id)
        if state is None:
            continue  # leaving the namespace
        if not state.complete:
            left += 1
            continue
        expected = state.file.replication
        counts = monitor.counts(block_id, expected)
        if node.admin_state == DECOMMISSIONING:
            safe = counts.counted >= expected
        else:
            safe = len(counts.normal) >= min(maintenance_min, expected)
        left += not safe
    return left
