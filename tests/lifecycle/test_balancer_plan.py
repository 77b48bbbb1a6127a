"""The balancer's plan (pure): utilization classes, pairing order and amounts, block
choice (not on the target, not planned twice, rack spread kept, within the pair's bytes),
and the bandwidth throttle."""

from __future__ import annotations

from xdfs.balancer.plan import (
    NodeUse,
    Pair,
    choose_moves,
    keeps_spread,
    mean_utilization,
    out_of_balance,
    pairs,
)
from xdfs.balancer.runner import Throttle
from xdfs.protocol.namenode import BalancerBlock

GiB = 1 << 30


def use(node_id: str, used_gib: float, rack: str = "/r1", capacity_gib: float = 100) -> NodeUse:
    return NodeUse(node_id, f"{node_id}:1", rack, int(capacity_gib * GiB), int(used_gib * GiB))


def test_balanced_means_every_node_within_the_threshold_of_the_mean() -> None:
    nodes = [use("a", 50), use("b", 40), use("c", 30)]
    assert mean_utilization(nodes) == 40.0
    assert out_of_balance(nodes, 10.0) == []
    assert [n.node_id for n in out_of_balance(nodes, 9.0)] == ["a", "c"]
    assert mean_utilization([use("x", 0, capacity_gib=0)]) == 0.0


def test_over_used_pairs_with_under_used_first_for_what_brings_them_to_the_mean() -> None:
    # mean 40: a over (+40), b above (+5), c below (-5), d under (-40)
    nodes = [use("a", 80), use("b", 45), use("c", 35), use("d", 0)]
    chosen = pairs(nodes, 10.0, 100 * GiB)
    assert chosen[0] == Pair("a", "d", 40 * GiB)
    # a has nothing left; b (above) only pairs with under-used, d is full by then
    assert all(p.source != "b" or p.target == "d" for p in chosen)
    assert sum(p.bytes for p in chosen if p.source == "a") <= 40 * GiB


def test_same_rack_pairs_come_first_and_iteration_bytes_bound_each_node() -> None:
    nodes = [use("a", 80, "/r1"), use("d", 0, "/r2"), use("e", 0, "/r1")]
    chosen = pairs(nodes, 10.0, 5 * GiB)
    assert chosen[0].target == "e"  # same rack as a
    assert all(p.bytes <= 5 * GiB for p in chosen)
    assert sum(p.bytes for p in chosen if p.source == "a") <= 5 * GiB


def test_blocks_chosen_for_a_pair() -> None:
    racks = {"a": "/r1", "b": "/r2", "t": "/r1", "u": "/r2"}
    blocks = [
        BalancerBlock(1, 10, ["a", "t"]),  # the target holds it already
        BalancerBlock(2, 10, ["a", "b"]),  # fine: /r1 -> /r1 keeps two racks
        BalancerBlock(3, 50, ["a", "b"]),  # larger than what is left
        BalancerBlock(4, 10, ["a", "b"]),
        BalancerBlock(5, 10, ["a", "b"]),  # over the pair's bytes by then
    ]
    planned = {4}
    moves = choose_moves(Pair("a", "t", 25), blocks, racks, planned)
    assert [m.block_id for m in moves] == [2, 5]
    assert planned == {2, 4, 5}
    assert not keeps_spread(["a", "b"], Pair("a", "u", 1), racks)  # both on /r2 after
    assert keeps_spread(["a", "b"], Pair("a", "t", 1), racks)


def test_throttle_spreads_bytes_over_time_at_the_rate() -> None:
    now = [0.0]
    throttle = Throttle(100.0, clock=lambda: now[0])
    assert throttle.delay_for(50) == 0.0
    assert throttle.delay_for(50) == 0.5
    assert throttle.delay_for(100) == 1.0
    now[0] = 10.0  # idle a while: no credit saved up
    assert throttle.delay_for(100) == 0.0
    assert throttle.delay_for(1) == 1.0
