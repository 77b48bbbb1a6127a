"""The NameNode's pure cores for issue 17 items 5 and 6: corrupt replicas repaired in place
when no other target exists, replicas in state rbw, and the lease / block recovery
decisions (who is primary, what is retried, what is stale). Time is injected."""

from __future__ import annotations

import pytest

from xdfs.errors import InvalidArgument
from xdfs.namenode.blocks.blockmap import REPORTED_BAD, Replica
from xdfs.namenode.blocks.recovery import (
    RECOVERY_HOLDER,
    BlockRecoveries,
    CloseNow,
    RecoverBlock,
    plan_lease_recovery,
)
from xdfs.namenode.namespace.ops import CloseFileOp, ReassignLeaseOp
from xdfs.protocol.blocks import BlockRecord

from .test_nn_blockmanager import Harness


def _rbw(h: Harness, node: str, *records: BlockRecord) -> None:
    h.bm.incremental_report(node, (), (), records)


def _held(h: Harness, *holders: str, bad: tuple[str, ...] = ("b",)) -> BlockRecord:
    """A complete block of /f (replication 2) reported by ``holders``, then reported
    corrupt on the ``bad`` ones."""
    (block,) = h.file("/f", [10])
    for name in holders:
        h.receive(name, block)
    for name in bad:
        h.bm.report_bad_replica(block.block_id, f"{name}:9866")
    return block


# --- item 5: a corrupt replica on the only possible target ----------------------------


def test_corrupt_replica_on_the_only_other_node_is_deleted_then_recopied() -> None:
    h = Harness()
    a, b = h.node("a"), h.node("b")
    block = _held(h, a, b)
    # no node without a replica can take a copy: b's corrupt one is deleted first
    assert h.bm.replication_tick() == 0
    assert h.beat(a).replicate == []
    assert h.beat(b).delete == [block.block_id]
    assert h.holders(block) == ["a"]
    # until b says the old replica is gone, it is no target (its deletion may not have run)
    assert h.bm.replication_tick() == 0
    assert h.beat(a).replicate == []
    h.bm.incremental_report(b, (), [block.block_id])
    assert h.bm.replication_tick() == 1
    (task,) = h.beat(a).replicate
    assert (task.block, task.targets) == (block, ["b:9866"])
    h.receive(b, block)
    assert h.holders(block) == ["a", "b"]
    assert h.bm.map.corrupt_block_count() == 0
    assert block.block_id not in h.bm.replication.needed


def test_a_full_report_also_confirms_a_deletion() -> None:
    h = Harness()
    a, b = h.node("a"), h.node("b")
    block = _held(h, a, b)
    h.bm.replication_tick()
    assert h.beat(b).delete == [block.block_id]
    h.report(b)  # a full report without the block: it is gone
    assert h.bm.replication_tick() == 1


def test_every_replica_corrupt_keeps_them_all() -> None:
    h = Harness()
    a, b = h.node("a"), h.node("b")
    block = _held(h, a, b, bad=(a, b))
    for _ in range(3):
        h.bm.replication_tick()
        assert h.beat(a).delete == h.beat(b).delete == []
    assert len(h.bm.map.replicas(block.block_id)) == 2
    assert h.bm.replication.missing == {block.block_id}
    assert sorted(h.bm.locations(block.block_id)) == ["a:9866", "b:9866"]  # last resort


def test_no_repair_in_place_while_another_target_exists() -> None:
    h = Harness()
    a, b, c = h.node("a"), h.node("b"), h.node("c")
    _held(h, a, b)
    assert h.bm.replication_tick() == 1
    assert h.beat(b).delete == []  # kept until c has its copy
    (task,) = h.beat(a).replicate
    assert task.targets == [f"{c}:9866"]


def test_no_repair_in_place_while_another_target_is_only_busy() -> None:
    h = Harness(replication_streams_per_node=1)
    a, b, c = h.node("a"), h.node("b"), h.node("c")
    h.bm.datanodes.get(c).replication_load = 1  # type: ignore[union-attr]  # copying
    block = _held(h, a, b)
    assert h.bm.replication_tick() == 0
    assert h.beat(b).delete == []  # c takes the copy once it has a free stream
    h.bm.datanodes.get(c).replication_load = 0  # type: ignore[union-attr]
    assert h.bm.replication_tick() == 1
    assert [t.targets for t in h.beat(a).replicate] == [["c:9866"]]
    assert h.holders(block) == ["a"]


# --- replicas in state rbw ------------------------------------------------------------


def test_rbw_replicas_are_recorded_apart_and_follow_full_reports() -> None:
    h = Harness()
    a = h.node("a")
    (block,) = h.file("/open", [0], close=False)
    partial = BlockRecord(block.block_id, block.genstamp, 4096)
    h.bm.block_report(a, 1, 0, 1, [], [partial])
    assert [(r.node_id, r.num_bytes) for r in h.bm.map.rbw_replicas(block.block_id)] == [
        ("a", 4096)
    ]
    assert h.holders(block) == [] and h.bm.map.corrupt_block_count() == 0
    h.report(a)  # a later report without it: gone
    assert h.bm.map.rbw_replicas(block.block_id) == ()
    _rbw(h, a, partial)
    h.receive(a, partial)  # finalized: one replica per node
    assert h.bm.map.rbw_replicas(block.block_id) == () and h.holders(block) == ["a"]


def test_rbw_of_an_unknown_block_is_an_orphan() -> None:
    h = Harness()
    a = h.node("a")
    _rbw(h, a, BlockRecord(12345, 1, 10))
    assert h.beat(a).delete == [12345]


def test_an_rbw_leftover_of_a_complete_block_goes_then_its_node_gets_a_copy() -> None:
    h = Harness()
    a, b = h.node("a"), h.node("b")
    (block,) = h.file("/f", [100])
    _rbw(h, b, BlockRecord(block.block_id, block.genstamp, 60))  # a target that failed
    assert h.beat(b).delete == []  # no good replica reported yet: kept
    h.receive(a, block)
    assert h.beat(b).delete == [block.block_id]
    assert h.bm.map.rbw_replicas(block.block_id) == ()
    assert h.bm.replication_tick() == 0  # b is no target until it confirms the deletion
    h.bm.incremental_report(b, (), [block.block_id])
    assert h.bm.replication_tick() == 1
    assert [t.targets for t in h.beat(a).replicate] == [["b:9866"]]


def test_stale_replicas_go_once_min_replication_is_reached() -> None:
    h = Harness()
    a, b, c = h.node("a"), h.node("b"), h.node("c")
    (block,) = h.file("/f", [100], close=False)
    h.receive(a, BlockRecord(block.block_id, block.genstamp, 100))
    _rbw(h, b, BlockRecord(block.block_id, block.genstamp, 70))
    # a block recovery finalized c's replica with a newer genstamp and closed the file
    recovered = BlockRecord(block.block_id, h.ns.allocate_genstamp(), 100)
    h.receive(c, recovered)
    h.apply(CloseFileOp("/f", 2, 2, (recovered,)))
    assert h.holders(recovered) == ["c"]
    assert h.beat(a).delete == [block.block_id]  # older genstamp: stale
    assert h.beat(b).delete == [block.block_id]


# --- lease recovery decisions ---------------------------------------------------------


def _replica(node: str, block: BlockRecord, num_bytes: int, genstamp_delta: int = 0,
             flags: int = 0) -> Replica:
    return Replica(node, num_bytes, block.genstamp + genstamp_delta, flags)


def test_plan_lease_recovery_rules() -> None:
    first, last = BlockRecord(1, 5, 100), BlockRecord(2, 6, 0)
    blocks = [first, last]
    assert plan_lease_recovery([], [], [], []) == CloseNow(())
    # nothing of the last block anywhere, nor sent anywhere: closed without it
    assert plan_lease_recovery(blocks, [], [], []) == CloseNow((first,))
    # sent only to nodes not live now: nobody to ask yet, nothing dropped
    assert plan_lease_recovery(blocks, [], [], [], sent_to_dead=True) == RecoverBlock(last, ())
    # finalized replicas that agree: the writer streamed it whole
    whole = [_replica("a", last, 70), _replica("b", last, 70)]
    assert plan_lease_recovery(blocks, whole, [], []) == CloseNow(
        (first, BlockRecord(2, 6, 70))
    )
    # anything else goes to a block recovery, asking every holder
    cases = [
        ([_replica("a", last, 70), _replica("b", last, 64)], [], []),  # lengths differ
        ([_replica("a", last, 70)], [_replica("b", last, 30)], []),  # an rbw replica too
        ([], [_replica("a", last, 30)], ["b"]),  # sent to b, which did not report
        ([_replica("a", last, 70, genstamp_delta=2)], [], ["b"]),  # an earlier attempt's
    ]
    for finalized, rbw, expected in cases:
        plan = plan_lease_recovery(blocks, finalized, rbw, expected)
        assert plan == RecoverBlock(last, ("a", "b")), (finalized, rbw, expected)
    # known-bad and stale replicas take no part
    ignored = [_replica("a", last, 70, flags=REPORTED_BAD), _replica("b", last, 70, -1)]
    assert plan_lease_recovery(blocks, ignored, [], []) == CloseNow((first,))


def test_primaries_rotate_and_a_dead_one_makes_the_attempt_due() -> None:
    recoveries = BlockRecoveries(timeout_s=60.0)
    heartbeats = {"a": 10.0, "b": 30.0, "c": 20.0}
    holders = ("a", "b", "c")
    first = recoveries.begin(7, 101, recoveries.choose_primary(7, holders, heartbeats), 0.0)
    assert first.primary == "b"  # heard from last
    assert recoveries.active(7, 59.0) is first and recoveries.active(7, 60.0) is None
    second = recoveries.begin(7, 102, recoveries.choose_primary(7, holders, heartbeats), 60.0)
    assert second.primary == "c" and second.tried == {"b", "c"}
    assert recoveries.node_dead("c") == [7]
    assert recoveries.active(7, 61.0) is None  # due at once
    third = recoveries.begin(7, 103, recoveries.choose_primary(7, holders, heartbeats), 61.0)
    assert third.primary == "a"
    # every holder had its turn: the rotation starts again
    fourth = recoveries.begin(7, 104, recoveries.choose_primary(7, holders, heartbeats), 200.0)
    assert fourth.primary == "b" and fourth.tried == {"b"}
    recoveries.finish(7)
    assert recoveries.current(7) is None and len(recoveries) == 0


def test_block_recovery_command_goes_to_the_primary_with_every_holder() -> None:
    h = Harness()
    a, b, c = h.node("a"), h.node("b"), h.node("c")
    (block,) = h.file("/f", [0], close=False)
    h.bm.expect(block.block_id, [a, b])
    _rbw(h, c, BlockRecord(block.block_id, block.genstamp, 10))
    plan = h.bm.plan_lease_recovery(h.ns.get_blocks("/f"))
    assert isinstance(plan, RecoverBlock) and sorted(plan.holders) == ["a", "b", "c"]
    genstamp = h.ns.allocate_genstamp()
    h.apply(ReassignLeaseOp("/f", RECOVERY_HOLDER, genstamp))
    attempt = h.bm.begin_recovery(plan, genstamp)
    assert h.bm.dispatch_recovery(attempt)
    assert not h.bm.recovery_due(block.block_id)
    others = [n for n in (a, b, c) if n != attempt.primary]
    assert all(h.beat(n).recover == [] for n in others)
    (task,) = h.beat(attempt.primary).recover
    assert task.block == block and task.recovery_genstamp == genstamp
    assert sorted(task.targets) == ["a:9866", "b:9866", "c:9866"]
    # the primary dies: the attempt is due again, and the next one avoids it
    h.clock.advance(h.bm.datanodes.dead_after_s + 1)
    for name in others:
        h.beat(name)
    assert [n.node_id for n in h.bm.check_heartbeats()] == [attempt.primary]
    assert h.bm.recovery_due(block.block_id)
    plan = h.bm.plan_lease_recovery(h.ns.get_blocks("/f"))
    assert isinstance(plan, RecoverBlock)
    retry = h.bm.begin_recovery(plan, h.ns.allocate_genstamp())
    assert retry.primary in others and h.bm.dispatch_recovery(retry)
    (task,) = h.beat(retry.primary).recover
    assert task.recovery_genstamp == retry.genstamp
    assert f"{attempt.primary}:9866" not in task.targets


def _open_block_sent_to_a(h: Harness) -> tuple[BlockRecord, RecoverBlock]:
    """/f is open with one block sent to node a (which reported nothing): its plan."""
    (block,) = h.file("/f", [0], close=False)
    h.bm.expect(block.block_id, [h.node("a")])
    plan = h.bm.plan_lease_recovery(h.ns.get_blocks("/f"))
    assert isinstance(plan, RecoverBlock)
    return block, plan


def test_a_superseded_recovery_command_is_not_sent() -> None:
    h = Harness()
    _block, plan = _open_block_sent_to_a(h)
    old = h.bm.begin_recovery(plan, h.ns.allocate_genstamp())
    h.bm.dispatch_recovery(old)
    new = h.bm.begin_recovery(plan, h.ns.allocate_genstamp())
    assert not h.bm.dispatch_recovery(old)
    h.bm.dispatch_recovery(new)
    assert [t.recovery_genstamp for t in h.beat("a").recover] == [new.genstamp]


@pytest.mark.parametrize("dropped", [True, False])
def test_recovery_state_is_forgotten_when_the_block_completes_or_leaves(dropped: bool) -> None:
    h = Harness()
    block, plan = _open_block_sent_to_a(h)
    h.bm.begin_recovery(plan, h.ns.allocate_genstamp())
    blocks = () if dropped else (BlockRecord(block.block_id, block.genstamp, 5),)
    h.apply(CloseFileOp("/f", 2, 2, blocks))
    assert h.bm.recoveries.current(block.block_id) is None
    assert h.bm._expected == {}


def test_the_recovery_genstamp_is_never_handed_out_again() -> None:
    h = Harness()
    (block,) = h.file("/f", [0], close=False)
    stamp = h.ns.next_genstamp + 50  # as logged by a recovery attempt
    h.apply(ReassignLeaseOp("/f", RECOVERY_HOLDER, stamp))
    assert h.ns.lease_holder("/f") == RECOVERY_HOLDER
    assert h.ns.allocate_genstamp() == stamp + 1
    with pytest.raises(InvalidArgument):
        h.ns.apply(ReassignLeaseOp("/f", RECOVERY_HOLDER, -1))
    assert block.genstamp < stamp


def test_a_block_whose_targets_all_died_waits_for_one_to_come_back() -> None:
    h = Harness()
    block, _plan = _open_block_sent_to_a(h)
    h.clock.advance(h.bm.datanodes.dead_after_s + 1)
    assert [n.node_id for n in h.bm.check_heartbeats()] == ["a"]
    # a late heartbeat is no proof the bytes are gone: not closed without the block
    assert h.bm.plan_lease_recovery(h.ns.get_blocks("/f")) == RecoverBlock(block, ())
    h.node("a")  # registers again
    assert h.bm.plan_lease_recovery(h.ns.get_blocks("/f")) == RecoverBlock(block, ("a",))
