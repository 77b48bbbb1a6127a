"""The NameNode's side of the balancer (pure core): blocks to move, and moves.

The balancer (:mod:`xdfs.balancer`) is a client: it picks what to move; the NameNode only
carries out a move it can make safely. A move of a replica from ``source`` to ``target`` is a
replication with a hint: the source copies the block to the target (the heartbeat's
replicate command, as for any copy), and once the target reports it the block has one
replica too many, so the monitor's usual excess rule deletes one, the source's by
preference (HDFS's delHint) unless that would lose rack spread. Nothing is ever deleted
that the monitor could not prove surplus: a balancer killed at any moment leaves at worst a
copy that is trimmed later, and a NameNode restart loses only the hint.
"""

from __future__ import annotations

from xdfs.errors import MoveRefused
from xdfs.namenode.blocks.datanodes import DataNode, ReplicationWork
from xdfs.namenode.blocks.replication import ReplicationMonitor
from xdfs.protocol.namenode import BalancerBlock


def movable_blocks(
    monitor: ReplicationMonitor, node_id: str, bytes_max: int
) -> list[BalancerBlock]:
    """Blocks with a good replica on ``node_id`` that are fully replicated and not being
    copied or moved, in random order, until they add up to ``bytes_max``."""
    block_ids = sorted(monitor.map.node_blocks(node_id))
    monitor.rng.shuffle(block_ids)
    chosen: list[BalancerBlock] = []
    total = 0
    for block_id in block_ids:
        if total >= bytes_max:
            break
        replica = monitor.map.replica(block_id, node_id)
        if replica is None or replica.flags or not _settled(monitor, block_id):
            continue
        holders = [r.node_id for r in monitor.map.replicas(block_id) if not r.flags]
        chosen.append(BalancerBlock(block_id, replica.num_bytes, holders))
        total += replica.num_bytes
    return chosen


def _settled(monitor: ReplicationMonitor, block_id: int) -> bool:
    state = monitor.block_state(block_id)
    if state is None or not state.complete or monitor.pending.count(block_id):
        return False
    if block_id in monitor.needed or block_id in monitor.move_hints:
        return False
    counts = monitor.counts(block_id, state.file.replication)
    return counts.counted >= counts.expected and not counts.corrupt


def schedule_move(
    monitor: ReplicationMonitor, block_id: int, source_id: str, target_id: str
) -> None:
    """Ask ``source_id`` to copy ``block_id`` to ``target_id``; MoveRefused when the move
    is not safe or not possible now (nothing changed then). Never in safe mode: the
    surplus could not be trimmed, and the block map may not be complete."""
    if monitor.safe_mode.on:
        raise MoveRefused("the NameNode is in safe mode: no moves")
    source, target = _node(monitor, source_id), _node(monitor, target_id)
    replica = monitor.map.replica(block_id, source_id)
    if replica is None or replica.flags:
        raise MoveRefused(f"{source_id} holds no good replica of block {block_id}")
    if not _settled(monitor, block_id):
        raise MoveRefused(f"block {block_id} is being written, copied, moved or repaired")
    _check_target(monitor, block_id, target, replica.num_bytes)
    if _spread_lost(monitor, block_id, source, target):
        raise MoveRefused(f"moving block {block_id} to rack {target.rack} loses rack spread")
    deadline_s = monitor.clock() + monitor.config.replication_pending_timeout_s
    source.replicate.append(ReplicationWork(block_id, (target_id,)))
    monitor.pending.add(block_id, source_id, (target_id,), deadline_s)
    source.replication_load += 1
    target.replication_load += 1
    monitor.move_hints[block_id] = source_id


def _node(monitor: ReplicationMonitor, node_id: str) -> DataNode:
    node = monitor.datanodes.get(node_id)
    if node is None or not node.live:
        raise MoveRefused(f"DataNode {node_id} is not live")
    return node


def _check_target(
    monitor: ReplicationMonitor, block_id: int, target: DataNode, num_bytes: int
) -> None:
    if not target.accepts_replicas:
        raise MoveRefused(f"DataNode {target.node_id} is {target.admin_state}: no target")
    held = monitor.map.replica(block_id, target.node_id) is not None or any(
        r.node_id == target.node_id for r in monitor.map.rbw_replicas(block_id)
    )
    if held or block_id in target.deletions or block_id in target.deleting:
        raise MoveRefused(f"DataNode {target.node_id} already holds block {block_id}")
    if target.storage.free_bytes < num_bytes:
        raise MoveRefused(f"DataNode {target.node_id} has no room for block {block_id}")
    if target.replication_load >= monitor.config.replication_streams_per_node:
        raise MoveRefused(f"DataNode {target.node_id} is busy copying: try later")


def _spread_lost(
    monitor: ReplicationMonitor, block_id: int, source: DataNode, target: DataNode
) -> bool:
    holders = [r.node_id for r in monitor.map.replicas(block_id) if not r.flags]
    racks = [_rack(monitor, n) for n in holders]
    after = [_rack(monitor, n) for n in holders if n != source.node_id] + [target.rack]
    return len(set(after)) < len(set(racks))


def _rack(monitor: ReplicationMonitor, node_id: str) -> str:
    node = monitor.datanodes.get(node_id)
    return node.rack if node is not None else ""


def move_done(monitor: ReplicationMonitor, block_id: int, target_id: str) -> bool | None:
    """True once the target reported its copy, False when the move ended without it
    (its pending copy expired or was dropped), None while under way."""
    if monitor.map.replica(block_id, target_id) is not None:
        return True
    if target_id in monitor.pending.targets(block_id):
        return None
    monitor.move_hints.pop(block_id, None)
    return False
