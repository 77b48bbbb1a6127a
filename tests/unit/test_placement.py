"""Target choice for new replicas: distinct live nodes with room, spread, load-aware."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from xdfs.errors import NotEnoughReplicas
from xdfs.namenode.blocks.datanodes import DataNode
from xdfs.namenode.blocks.placement import choose_targets
from xdfs.protocol.datanode import StorageReport

GiB = 1 << 30


def node(name: str, free: int = 100 * GiB, *, load: int = 0, live: bool = True) -> DataNode:
    dn = DataNode(name, f"{name}:9866", StorageReport(200 * GiB, 0, free), 0.0, 0.0, live=live)
    dn.transfers_in_progress = load
    return dn


def names(nodes: list[DataNode]) -> list[str]:
    return [n.node_id for n in nodes]


def test_distinct_targets_up_to_count_and_fewer_when_fewer_exist() -> None:
    nodes = [node(f"n{i}") for i in range(5)]
    rng = random.Random(1)
    for count in range(1, 6):
        chosen = choose_targets(nodes, count, rng=rng)
        assert len(chosen) == count and len(set(names(chosen))) == count
    assert sorted(names(choose_targets(nodes, 9, rng=rng))) == [f"n{i}" for i in range(5)]
    assert choose_targets(nodes, 0, rng=rng) == []


def test_dead_excluded_and_full_nodes_are_never_chosen() -> None:
    nodes = [
        node("ok1"), node("ok2"), node("dead", live=False), node("full", free=10),
        node("excluded"),
    ]
    rng = random.Random(2)
    seen: set[str] = set()
    for _ in range(200):
        seen.update(names(choose_targets(
            nodes, 3, excluded={"excluded"}, block_size_bytes=1024, rng=rng
        )))
    assert seen == {"ok1", "ok2"}


def test_spread_over_equal_nodes_not_always_the_same() -> None:
    nodes = [node(f"n{i}") for i in range(4)]
    rng = random.Random(3)
    firsts = Counter(choose_targets(nodes, 1, rng=rng)[0].node_id for _ in range(400))
    assert set(firsts) == {"n0", "n1", "n2", "n3"}
    assert min(firsts.values()) > 50  # roughly even (each ~100)


def test_idle_and_empty_nodes_are_preferred() -> None:
    rng = random.Random(4)
    busy = [node("idle"), node("busy", load=9)]
    counts = Counter(choose_targets(busy, 1, rng=rng)[0].node_id for _ in range(500))
    assert counts["idle"] > 3 * counts["busy"] > 0
    space = [node("empty", free=100 * GiB), node("fuller", free=10 * GiB)]
    counts = Counter(choose_targets(space, 1, rng=rng)[0].node_id for _ in range(500))
    assert counts["empty"] > 3 * counts["fuller"] > 0


def test_replication_load_limit() -> None:
    nodes = [node("a"), node("b")]
    nodes[0].replication_load = 4
    rng = random.Random(5)
    assert names(choose_targets(nodes, 2, replication_load_max=4, rng=rng)) == ["b"]


def test_nothing_eligible_is_not_enough_replicas_with_an_hdfs_like_message() -> None:
    rng = random.Random(6)
    with pytest.raises(NotEnoughReplicas) as info:
        choose_targets([], 2, rng=rng)
    assert info.value.message == (
        "could only be placed on 0 of the 1 minimum DataNodes; 0 live DataNode(s), 0 excluded"
    )
    with pytest.raises(NotEnoughReplicas) as info:
        choose_targets([node("a"), node("b", free=5)], 1, excluded={"a"}, block_size_bytes=64,
                       rng=rng)
    assert "2 live DataNode(s), 1 excluded" in info.value.message
    assert "1 without 64 bytes free" in info.value.message
