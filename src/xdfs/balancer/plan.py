"""What the balancer moves (pure core), as HDFS's Balancer decides it.

A node's *utilization* is its used share of its capacity (percent); the cluster's is the
share over every node. With a threshold T, a node is *over-used* above mean + T, *above
average* in (mean, mean + T], *below average* in [mean - T, mean), *under-used* below
mean - T. The cluster is balanced when no node is over- or under-used. Each iteration pairs
over-used sources with under-used targets first, then over-used with below-average, then
above-average with under-used; same-rack pairs before others (cheaper moves). A pair may
move what brings either side to the mean, bounded by ``iteration_bytes_max`` per node. The
blocks of a pair are those the source holds, the target does not, not already planned, and
whose move keeps the block's rack spread (the NameNode checks that too).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from xdfs.protocol.namenode import BalancerBlock


@dataclass(frozen=True)
class NodeUse:
    node_id: str
    address: str
    rack: str
    capacity_bytes: int
    used_bytes: int

    @property
    def utilization(self) -> float:
        return 100.0 * self.used_bytes / self.capacity_bytes if self.capacity_bytes else 0.0


class Pair(NamedTuple):
    source: str  # node ids
    target: str
    bytes: int  # what the pair may move this iteration


class Move(NamedTuple):
    block_id: int
    num_bytes: int
    source: str
    target: str


def mean_utilization(nodes: Sequence[NodeUse]) -> float:
    capacity = sum(n.capacity_bytes for n in nodes)
    return 100.0 * sum(n.used_bytes for n in nodes) / capacity if capacity else 0.0


def out_of_balance(nodes: Sequence[NodeUse], threshold: float) -> list[NodeUse]:
    """Nodes further than ``threshold`` points from the mean (none: balanced)."""
    mean = mean_utilization(nodes)
    return [n for n in nodes if abs(n.utilization - mean) > threshold]


@dataclass
class _Side:
    node: NodeUse
    bytes_left: int
    groups: tuple[int, ...] = field(default=())


def pairs(nodes: Sequence[NodeUse], threshold: float, iteration_bytes_max: int) -> list[Pair]:
    """Source/target pairs of one iteration (see the module doc)."""
    mean = mean_utilization(nodes)
    sources: dict[str, _Side] = {}
    targets: dict[str, _Side] = {}
    for node in nodes:
        gap = node.utilization - mean
        room = min(int(abs(gap) * node.capacity_bytes / 100), iteration_bytes_max)
        if gap > threshold:
            sources[node.node_id] = _Side(node, room, (0, 1))  # over-used
        elif gap > 0:
            sources[node.node_id] = _Side(node, room, (2,))  # above average
        elif gap < -threshold:
            targets[node.node_id] = _Side(node, room, (0, 2))  # under-used
        elif gap < 0:
            targets[node.node_id] = _Side(node, room, (1,))  # below average
    chosen: list[Pair] = []
    for group in range(3):
        for same_rack in (True, False):
            for source in sources.values():
                for target in targets.values():
                    if group not in source.groups or group not in target.groups:
                        continue
                    if (source.node.rack == target.node.rack) != same_rack:
                        continue
                    amount = min(source.bytes_left, target.bytes_left)
                    if amount <= 0:
                        continue
                    chosen.append(Pair(source.node.node_id, target.node.node_id, amount))
                    source.bytes_left -= amount
                    target.bytes_left -= amount
    return chosen


def choose_moves(
    pair: Pair,
    blocks: Iterable[BalancerBlock],
    racks: Mapping[str, str],
    planned: set[int],
) -> list[Move]:
    """Blocks of ``pair.source`` to move to ``pair.target``, up to the pair's bytes (a
    block larger than what is left is skipped for a smaller one). Adds them to
    ``planned``."""
    moves: list[Move] = []
    left = pair.bytes
    for block in blocks:
        if left <= 0:
            break
        if block.block_id in planned or pair.target in block.holders:
            continue
        if block.num_bytes > left or not keeps_spread(block.holders, pair, racks):
            continue
        moves.append(Move(block.block_id, block.num_bytes, pair.source, pair.target))
        planned.add(block.block_id)
        left -= block.num_bytes
    return moves


def keeps_spread(holders: Sequence[str], pair: Pair, racks: Mapping[str, str]) -> bool:
    """The block's replicas span as many racks after the move as before."""
    before = {racks.get(n, "") for n in holders}
    after = {racks.get(n, "") for n in holders if n != pair.source} | {racks.get(pair.target, "")}
    return len(after) >= len(before)
