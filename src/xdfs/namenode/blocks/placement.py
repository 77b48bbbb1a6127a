"""Choosing DataNodes for new replicas (pure core; the random source is injected).

Eligible: live and in service (not decommissioning, not in maintenance), not excluded, room
for the block, and (for replication) below its stream limit. Among the eligible, targets are
drawn at random without replacement, each weighted by its share of free space divided by its
load (``1 + transfers + planned replications``): emptier and idler nodes are favoured, yet
no node is always first, so concurrent writers spread over the cluster instead of piling on
the single emptiest node.

Racks narrow each draw as HDFS's default policy does: the first replica on the writer's
node when the writer is an eligible DataNode (its host), the second on another rack than
the first, the third on the second's rack (another node), further ones anywhere; and
whenever every replica so far is on one rack while another rack has an eligible node, the
next goes to another rack (a mis-replicated block being repaired). A preference no eligible
node meets is dropped (one rack: any node), never a reason to place fewer replicas.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Collection, Iterable, Sequence

from xdfs.errors import NotEnoughReplicas
from xdfs.namenode.blocks.datanodes import DataNode
from xdfs.namenode.blocks.topology import host_of

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
    existing_racks: Sequence[str] = (),
    writer: str | None = None,
) -> list[DataNode]:
    """Up to ``count`` distinct targets (fewer when fewer are eligible).

    ``excluded`` are node ids; ``existing_racks`` the racks of the replicas the block has
    (first replica first); ``writer`` the address (or host) of the client writing a new
    block. Raises NotEnoughReplicas when ``count >= 1`` and no node at all can be chosen (a
    block needs at least one replica)."""
    live = [node for node in nodes if node.live]
    eligible = [
        node
        for node in live
        if node.accepts_replicas and node.node_id not in excluded
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
    racks = list(existing_racks)
    while eligible and len(chosen) < count:
        pool = _preferred(eligible, racks, writer) or eligible
        pick = _draw(pool, rng)
        eligible.remove(pick)
        chosen.append(pick)
        racks.append(pick.rack)
    return chosen


def _preferred(eligible: list[DataNode], racks: list[str], writer: str | None) -> list[DataNode]:
    """The eligible nodes the policy prefers for the next replica ([]: no preference)."""
    if not racks:
        if not writer:
            return []
        host = host_of(writer)
        return [node for node in eligible if host_of(node.address) == host]
    if len(set(racks)) == 1:  # all on one rack so far: the next one goes elsewhere
        return [node for node in eligible if node.rack != racks[0]]
    if len(racks) == 2:  # the third on the second's rack
        return [node for node in eligible if node.rack == racks[1]]
    return []


def mis_replicated(replica_racks: Sequence[str], cluster_racks: int, expected: int) -> bool:
    """Every replica on one rack while the block wants more than one replica and the
    cluster has more than one rack (HDFS's placement-policy violation)."""
    return cluster_racks > 1 and expected > 1 and len(set(replica_racks)) == 1 and len(
        replica_racks
    ) >= 1


def _draw(pool: list[DataNode], rng: random.Random) -> DataNode:
    """One node of ``pool`` at random, weighted by free space over load: what
    ``rng.choices(pool, weights)[0]`` draws (the same use of ``rng``), without its checks
    and copies (every block allocation makes one or more draws)."""
    most_free = max(node.storage.free_bytes for node in pool) or 1
    cumulative = list(itertools.accumulate(
        max(node.storage.free_bytes / most_free, _FREE_SHARE_MIN) / (1 + node.load)
        for node in pool
    ))
    return pool[bisect.bisect(cumulative, rng.random() * cumulative[-1], 0, len(pool) - 1)]


def _why_not(
    live: list[DataNode],
    excluded: Collection[str],
    block_size_bytes: int,
    replication_load_max: int | None,
) -> str:
    others = [node for node in live if node.node_id not in excluded]
    out = sum(1 for node in others if not node.accepts_replicas)
    others = [node for node in others if node.accepts_replicas]
    full = sum(1 for node in others if node.storage.free_bytes < block_size_bytes)
    busy = 0
    if replication_load_max is not None:
        busy = sum(1 for node in others if node.replication_load >= replication_load_max)
    parts = []
    if out:
        parts.append(f"{out} decommissioning or in maintenance")
    if full:
        parts.append(f"{full} without {block_size_bytes} bytes free")
    if busy:
        parts.append(f"{busy} busy replicating")
    return f", {', '.join(parts)}" if parts else ""
