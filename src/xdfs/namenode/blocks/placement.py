"""Choosing DataNodes for new replicas (pure core; the random source is injected).

Eligible: live, not excluded, room for the block, and (for replication) below its stream
limit. Among the eligible, targets are drawn at random without replacement, each weighted by
its share of free space divided by its load (``1 + transfers + planned replications``):
emptier and idler nodes are favoured, yet no node is always first, so concurrent writers
spread over the cluster instead of piling on the single emptiest node.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterable

from xdfs.errors import NotEnoughReplicas
from xdfs.namenode.blocks.datanodes import DataNode

#: Weight floor (as a share of the emptiest node's free space): a nearly full node is
#: still chosen now and then rather than never, as long as the block fits.
_FREE_SHARE_MIN = 0.01


def choose_targets(
    nodes: Iterable[DataNode],
    count: int,
    *,
    excluded: Collection[str] = (),
    block_size_bytes: int = 0,
    replication_load_max: int | None = None,
    rng: random.Random,
) -> list[DataNode]:
    """Up to ``count`` distinct targets (fewer when fewer are eligible).

    ``excluded`` are node ids. Raises NotEnoughReplicas when ``count >= 1`` and no node at
    all can be chosen (a block needs at least one replica)."""
    live = [node for node in nodes if node.live]
    eligible = [
        node
        for node in live
        if node.node_id not in excluded
        and node.storage.free_bytes >= block_size_bytes
        and (replication_load_max is None or node.replication_load < replication_load_max)
    ]
    wanted = min(count, 1)
    if len(eligible) < wanted:
        excluded_live = sum(1 for node in live if node.node_id in excluded)
        raise NotEnoughReplicas(
            f"could only be placed on {len(eligible)} of the {wanted} minimum DataNodes; "
            f"{len(live)} live DataNode(s), {excluded_live} excluded"
            + _why_not(live, excluded, block_size_bytes, replication_load_max)
        )
    chosen: list[DataNode] = []
    while eligible and len(chosen) < count:
        pick = rng.choices(range(len(eligible)), weights=_weights(eligible))[0]
        chosen.append(eligible.pop(pick))
    return chosen


def _weights(nodes: list[DataNode]) -> list[float]:
    most_free = max(node.storage.free_bytes for node in nodes) or 1
    return [
        max(node.storage.free_bytes / most_free, _FREE_SHARE_MIN) / (1 + node.load)
        for node in nodes
    ]


def _why_not(
    live: list[DataNode],
    excluded: Collection[str],
    block_size_bytes: int,
    replication_load_max: int | None,
) -> str:
    others = [node for node in live if node.node_id not in excluded]
    full = sum(1 for node in others if node.storage.free_bytes < block_size_bytes)
    busy = 0
    if replication_load_max is not None:
        busy = sum(1 for node in others if node.replication_load >= replication_load_max)
    parts = []
    if full:
        parts.append(f"{full} without {block_size_bytes} bytes free")
    if busy:
        parts.append(f"{busy} busy replicating")
    return f", {', '.join(parts)}" if parts else ""
