"""The pure cores of the DataNode lifecycle: topology and host-list parsing, rack-aware
placement, replica counting by admin state (decommission, maintenance), decommission
progress, mis-replicated blocks repaired, and the NameNode's side of balancer moves.
Time is injected; nothing sleeps."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from tests.unit.test_nn_blockmanager import GiB, Harness
from xdfs.errors import DisallowedDataNode, HostsFileError, MoveRefused, NotEnoughReplicas
from xdfs.namenode.blocks import balancing, decommission
from xdfs.namenode.blocks.admin_states import (
    DECOMMISSIONED,
    DECOMMISSIONING,
    ENTERING_MAINTENANCE,
    IN_MAINTENANCE,
    NORMAL,
    HostLists,
    parse_hosts,
    parse_maintenance,
)
from xdfs.namenode.blocks.datanodes import DataNode
from xdfs.namenode.blocks.placement import choose_targets, mis_replicated
from xdfs.namenode.blocks.topology import DEFAULT_RACK, Topology, parse_topology
from xdfs.protocol.blocks import BlockRecord
from xdfs.protocol.datanode import StorageReport


def dn(name: str, rack: str, host: str | None = None) -> DataNode:
    node = DataNode(name, f"{host or name}:9866", StorageReport(200 * GiB, 0, 100 * GiB),
                    0.0, 0.0)
    node.rack = rack
    return node


# --- topology and host lists ------------------------------------------------------------


def test_topology_file_entries_by_address_then_host_then_script_then_default() -> None:
    mapping = parse_topology("# racks\nh1:9866 /dc1/r1\nh1 /dc1/r2  # the rest of h1\n\n")
    asked: list[list[str]] = []

    def script(addresses: object) -> list[str]:
        asked.append(list(addresses))  # type: ignore[call-overload]
        return ["/dc2/r9"]

    topology = Topology(mapping, script)
    assert topology.rack_of("h1:9866") == "/dc1/r1"
    assert topology.rack_of("h1:9867") == "/dc1/r2"
    assert topology.rack_of("h2:1") == "/dc2/r9"
    assert topology.rack_of("h2:1") == "/dc2/r9"  # cached: the script ran once
    assert asked == [["h2:1"]]
    assert Topology().rack_of("h3:1") == DEFAULT_RACK


@pytest.mark.parametrize("text", ["h1", "h1 rack", "h1 /r a", "h1 /", "h1 / r"])
def test_bad_topology_lines_are_refused(text: str) -> None:
    with pytest.raises(HostsFileError, match="line 1"):
        parse_topology(text)


def test_bad_script_answer_is_refused() -> None:
    with pytest.raises(HostsFileError):
        Topology({}, lambda _: ["not-a-path"]).rack_of("h:1")


def test_host_lists_follow_hdfs_semantics() -> None:
    lists = HostLists(
        include=parse_hosts("h1 h2:5\n# comment\nh3"),
        exclude=parse_hosts("h2:5"),
        maintenance=parse_maintenance("h3 100\nh1:7 2026-11-24T06:00:00Z"),
    )
    assert lists.allowed("h1:1") and lists.allowed("h2:5") and not lists.allowed("h2:6")
    assert HostLists().allowed("anything:1")  # an empty include list allows all
    assert lists.wanted("h2:5", 0.0) == (DECOMMISSIONING, 0.0)
    assert lists.wanted("h3:1", 50.0) == (ENTERING_MAINTENANCE, 100.0)
    assert lists.wanted("h3:1", 100.0) == (NORMAL, 0.0)  # expired
    assert lists.wanted("h1:7", 0.0)[1] == 1795500000.0  # 2026-11-24T06:00:00Z
    with pytest.raises(HostsFileError, match="time zone"):
        parse_maintenance("h1 2026-11-24T06:00:00")
    with pytest.raises(HostsFileError, match="line 2"):
        parse_maintenance("h1 5\nh2")


# --- placement --------------------------------------------------------------------------


def racks_of(nodes: list[DataNode]) -> list[str]:
    return [n.rack for n in nodes]


def test_three_replicas_over_two_racks_as_hdfs_places_them() -> None:
    nodes = [dn(f"a{i}", "/r1") for i in range(4)] + [dn(f"b{i}", "/r2") for i in range(4)]
    rng = random.Random(5)
    for _ in range(300):
        first, second, third = choose_targets(nodes, 3, rng=rng)
        assert second.rack != first.rack
        assert third.rack == second.rack and third is not second


def test_first_replica_on_the_writers_node_when_it_is_a_datanode() -> None:
    nodes = [dn("a", "/r1", host="10.0.0.1"), dn("b", "/r1", host="10.0.0.2"),
             dn("c", "/r2", host="10.0.0.3")]
    rng = random.Random(1)
    for _ in range(100):
        chosen = choose_targets(nodes, 2, rng=rng, writer="10.0.0.2:40000")
        assert chosen[0].node_id == "b" and chosen[1].rack == "/r2"
    firsts = Counter(choose_targets(nodes, 1, rng=rng, writer="10.9.9.9")[0].node_id
                     for _ in range(300))
    assert set(firsts) == {"a", "b", "c"}  # not a DataNode: anywhere


def test_one_rack_places_anyway_and_existing_racks_steer_repairs() -> None:
    one = [dn(f"n{i}", "/r1") for i in range(3)]
    assert len(choose_targets(one, 3, rng=random.Random(2))) == 3
    nodes = [dn("a", "/r1"), dn("b", "/r1"), dn("c", "/r2")]
    for seed in range(50):  # both replicas on /r1: the next must leave it
        (pick,) = choose_targets(nodes, 1, excluded={"a"},
                                 existing_racks=["/r1", "/r1"], rng=random.Random(seed))
        assert pick.node_id == "c"


def test_nodes_out_of_service_take_no_new_replica() -> None:
    nodes = [dn("a", "/r1"), dn("b", "/r1"), dn("c", "/r2")]
    nodes[0].admin_state = DECOMMISSIONING
    nodes[1].admin_state = IN_MAINTENANCE
    seen = {n.node_id for s in range(50) for n in choose_targets(nodes, 3,
                                                                  rng=random.Random(s))}
    assert seen == {"c"}


def test_mis_replicated_needs_two_racks_and_a_replication_above_one() -> None:
    assert mis_replicated(["/r1", "/r1"], 2, 2)
    assert not mis_replicated(["/r1", "/r2"], 2, 2)
    assert not mis_replicated(["/r1", "/r1"], 1, 2)
    assert not mis_replicated(["/r1"], 2, 1)


# --- decommission and maintenance over the block manager ---------------------------------


def lifecycle_harness(**config: object) -> Harness:
    config.setdefault("decommission_check_interval_s", 1.0)
    return Harness(**config)


def refresh(h: Harness, **lists: object) -> None:
    decommission.refresh(h.bm.replication, HostLists(**lists), h.clock())  # type: ignore[arg-type]


def two_holders(h: Harness, *names: str) -> BlockRecord:
    """Nodes ``names`` and one block of replication 2 on the first two (the first one's
    full report done)."""
    for name in names:
        h.node(name)
    (block,) = h.file("/f", [10], replication=2)
    h.receive(names[0], block)
    h.receive(names[1], block)
    h.report(names[0], block)
    return block


def settle(h: Harness) -> None:
    """Run the monitor and carry out every copy it asks (as obedient DataNodes)."""
    for _ in range(10):
        h.clock.advance(1.1)
        h.bm.replication_tick()
        for node in list(h.bm.datanodes.live_nodes()):
            commands = h.beat(node.node_id)
            for task in commands.replicate:
                for address in task.targets:
                    h.receive(address.split(":")[0], task.block)
            if commands.delete:
                h.bm.incremental_report(node.node_id, (), commands.delete)


def test_decommission_copies_every_block_away_then_ends_decommissioned() -> None:
    h = lifecycle_harness()
    a, b, c = h.node("a"), h.node("b"), h.node("c")
    blocks = h.file("/f", [10, 20, 30], replication=2)
    for block in blocks:
        h.receive(a, block)
        h.receive(b, block)
    h.report(a, *blocks)
    refresh(h, exclude=frozenset({"a:9866"}))
    node_a = h.bm.datanodes.get(a)
    assert node_a is not None and node_a.admin_state == DECOMMISSIONING
    # still readable there (offered last), but not counted: every block is queued
    assert all(h.bm.locations(b_.block_id)[-1] == f"{a}:9866" for b_ in blocks)
    assert h.bm.replication.under_replicated_count() == 3
    settle(h)
    assert node_a.admin_state == DECOMMISSIONED and node_a.admin_blocks_left == 0
    for block in blocks:
        assert {b, c} <= set(h.holders(block))
        assert a in h.holders(block)  # kept (never deleted for being in excess)
    refresh(h)  # out of the exclude list: in service again; its replicas are now extra
    settle(h)
    assert node_a.admin_state == NORMAL
    assert all(len(h.holders(block)) == 2 for block in blocks)


def test_decommission_waits_while_no_other_node_can_take_the_blocks() -> None:
    h = lifecycle_harness()
    a, b = "a", "b"
    block = two_holders(h, a, b)
    refresh(h, exclude=frozenset({"a"}))
    settle(h)
    node_a = h.bm.datanodes.get(a)
    assert node_a is not None and node_a.admin_state == DECOMMISSIONING
    assert node_a.admin_blocks_left == 1
    assert sorted(h.holders(block)) == [a, b]


def test_maintenance_keeps_replicas_counted_even_down_until_it_expires() -> None:
    h = lifecycle_harness(maintenance_min_replicas=1)
    a, b, c = "a", "b", "c"
    block = two_holders(h, a, b, c)
    until = h.clock() + 100
    refresh(h, maintenance={"a:9866": until})
    settle(h)
    node_a = h.bm.datanodes.get(a)
    assert node_a is not None and node_a.admin_state == IN_MAINTENANCE
    assert sorted(h.holders(block)) == [a, b]  # nothing copied: b keeps the minimum
    h.clock.advance(h.bm.datanodes.dead_after_s + 1)
    h.beat(b)
    h.beat(c)
    assert [n.node_id for n in h.bm.check_heartbeats()] == [a]
    settle(h)
    assert h.holders(block) == [b]  # a is down: unreadable, yet still counted
    assert h.bm.replication.under_replicated_count() == 0
    h.clock.advance(100)  # the maintenance ends with a still down: copied now
    settle(h)
    assert node_a.admin_state == NORMAL
    assert sorted(h.holders(block)) == [b, c]


def test_entering_maintenance_first_copies_blocks_below_the_minimum() -> None:
    h = lifecycle_harness(maintenance_min_replicas=2)
    a, b, c = "a", "b", "c"
    block = two_holders(h, a, b, c)
    refresh(h, maintenance={"a": h.clock() + 1000})
    node_a = h.bm.datanodes.get(a)
    assert node_a is not None and node_a.admin_state == ENTERING_MAINTENANCE
    settle(h)
    assert node_a.admin_state == IN_MAINTENANCE
    assert sorted(h.holders(block)) == [a, b, c]


def test_a_node_removed_from_the_include_list_is_refused() -> None:
    h = lifecycle_harness()
    h.node("a")
    h.node("b")
    refused = decommission.refresh(h.bm.replication, HostLists(include=frozenset({"b"})), 0.0)
    assert [n.node_id for n in refused] == ["a"]
    with pytest.raises(DisallowedDataNode):
        h.node("a")


# --- racks in the replication monitor ---------------------------------------------------


def rack_harness(racks: dict[str, str]) -> Harness:
    h = lifecycle_harness()
    h.bm.datanodes.topology = Topology({f"{n}:9866": r for n, r in racks.items()})
    for name in racks:
        h.node(name)
    return h


def test_a_mis_replicated_block_gets_a_replica_on_another_rack_then_the_surplus_goes() -> None:
    h = rack_harness({"a": "/r1", "b": "/r1", "c": "/r2"})
    (block,) = h.file("/f", [10], replication=2)
    h.receive("a", block)
    h.receive("b", block)
    settle(h)
    holders = h.holders(block)
    assert len(holders) == 2 and "c" in holders


def test_excess_trimming_keeps_rack_spread() -> None:
    h = rack_harness({"a": "/r1", "b": "/r1", "c": "/r2"})
    (block,) = h.file("/f", [10], replication=2)
    for name in ("a", "b", "c"):
        h.receive(name, block)
    settle(h)
    assert "c" in h.holders(block) and len(h.holders(block)) == 2


# --- balancer moves ---------------------------------------------------------------------


def test_a_move_copies_then_deletes_the_source_and_never_goes_below_replication() -> None:
    h = lifecycle_harness()
    a, b, c = h.node("a"), h.node("b"), h.node("c")
    blocks = h.file("/f", [10, 20], replication=2)
    for block in blocks:
        h.receive(a, block)
        h.receive(b, block)
    movable = balancing.movable_blocks(h.bm.replication, a, 10**9)
    assert sorted(m.block_id for m in movable) == sorted(b_.block_id for b_ in blocks)
    block = blocks[0]
    balancing.schedule_move(h.bm.replication, block.block_id, a, c)
    with pytest.raises(MoveRefused):  # one move of a block at a time
        balancing.schedule_move(h.bm.replication, block.block_id, b, c)
    assert balancing.move_done(h.bm.replication, block.block_id, c) is None
    assert [m.block_id for m in balancing.movable_blocks(h.bm.replication, a, 10**9)] == [
        blocks[1].block_id]
    (task,) = h.beat(a).replicate
    assert task.targets == ["c:9866"] and sorted(h.holders(block)) == [a, b]
    h.receive(c, block)
    assert balancing.move_done(h.bm.replication, block.block_id, c) is True
    assert sorted(h.holders(block)) == [b, c]  # the source's replica was the surplus
    assert block.block_id in h.beat(a).delete


@pytest.mark.parametrize(
    "case", ["holder", "no-replica", "decommissioning", "full", "dead", "safe-mode"]
)
def test_unsafe_or_impossible_moves_are_refused_and_change_nothing(case: str) -> None:
    h = lifecycle_harness()
    a, b, c = h.node("a"), h.node("b"), h.node("c", free=5 if case == "full" else 100 * GiB)
    (block,) = h.file("/f", [10], replication=2)
    h.receive(a, block)
    h.receive(b, block)
    source, target = {"holder": (a, b), "no-replica": (c, b)}.get(case, (a, c))
    if case == "decommissioning":
        refresh(h, exclude=frozenset({"c"}))
    if case == "dead":
        h.bm.declare_dead(h.bm.datanodes.get(c))  # type: ignore[arg-type]
    if case == "safe-mode":
        h.safe_mode.enter()
    with pytest.raises(MoveRefused):
        balancing.schedule_move(h.bm.replication, block.block_id, source, target)
    assert len(h.bm.replication.pending) == 0 and not h.bm.replication.move_hints


def test_a_move_that_would_lose_rack_spread_is_refused() -> None:
    h = rack_harness({"a": "/r1", "b": "/r2", "c": "/r2"})
    (block,) = h.file("/f", [10], replication=2)
    h.receive("a", block)
    h.receive("b", block)
    with pytest.raises(MoveRefused, match="rack"):
        balancing.schedule_move(h.bm.replication, block.block_id, "a", "c")
    balancing.schedule_move(h.bm.replication, block.block_id, "b", "c")  # same rack: fine


@pytest.mark.parametrize("seed", range(40))
def test_placement_invariants_on_random_clusters(seed: int) -> None:
    """Distinct eligible targets, as many as asked while enough exist; a second rack is
    used whenever one has an eligible node; the third shares the second's rack when it
    can; draining and excluded nodes never."""
    rng = random.Random(seed)
    nodes = [dn(f"n{i}", f"/r{rng.randrange(3)}") for i in range(rng.randrange(1, 9))]
    for node in nodes:
        node.admin_state = rng.choice([NORMAL] * 4 + [DECOMMISSIONING, IN_MAINTENANCE])
    excluded = {n.node_id for n in nodes if rng.random() < 0.15}
    eligible = [n for n in nodes if n.admin_state == NORMAL and n.node_id not in excluded]
    count = rng.randrange(1, 5)
    if not eligible:
        with pytest.raises(NotEnoughReplicas):
            choose_targets(nodes, count, excluded=excluded, rng=rng)
        return
    chosen = choose_targets(nodes, count, excluded=excluded, rng=rng)
    assert len(chosen) == min(count, len(eligible))
    assert len({n.node_id for n in chosen}) == len(chosen)
    assert all(n in eligible for n in chosen)
    racks = {n.rack for n in eligible}
    if len(chosen) >= 2 and len(racks) > 1:
        assert chosen[1].rack != chosen[0].rack
    if len(chosen) >= 3 and len(racks) > 1:
        second_rack = [n for n in eligible if n.rack == chosen[1].rack]
        if len(second_rack) >= 2:
            assert chosen[2].rack == chosen[1].rack
