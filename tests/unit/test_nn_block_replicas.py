"""The block manager's replica bookkeeping: full reports in batches, incremental reports,
orphans, corrupt and excess replicas, deletions only once durable, startup safe mode.
Driven by hand with :class:`~tests.unit.test_nn_blockmanager.Harness`; nothing sleeps."""

from __future__ import annotations

import pytest

from xdfs.errors import InvalidArgument
from xdfs.namenode.blocks import fsck
from xdfs.namenode.blocks.recovery import RecoverBlock
from xdfs.namenode.namespace.inodes import FIRST_INODE_ID
from xdfs.namenode.namespace.ops import CloseFileOp, DeleteOp, SetReplicationOp
from xdfs.namenode.namespace.tree_base import FIRST_BLOCK_ID
from xdfs.protocol.blocks import BlockRecord
from xdfs.sharding.ids import first_id, shard_of_id

from .test_nn_blockmanager import GiB, Harness


@pytest.fixture
def h() -> Harness:
    return Harness()


# --- reports ---------------------------------------------------------------------------


def test_full_report_reconciles_only_after_its_last_batch(h: Harness) -> None:
    a = h.node("a")
    blocks = h.file("/f", [1] * 5, replication=1)
    h.report(a, *blocks)
    assert all(h.holders(b) == ["a"] for b in blocks)
    # a new report in 3 batches, without blocks[0], batches out of order and one repeated
    keep = blocks[1:]
    h.bm.block_report(a, 2, 2, 3, [keep[3]])
    h.bm.block_report(a, 2, 0, 3, keep[:2])
    h.bm.block_report(a, 2, 0, 3, keep[:2])
    assert h.holders(blocks[0]) == ["a"]  # not yet: batch 1 is missing
    # a replica received meanwhile is kept though no batch lists it
    (late,) = h.file("/g", [3], replication=1)
    h.receive(a, late)
    assert h.bm.block_report(a, 2, 1, 3, [keep[2]]) is True
    assert h.holders(blocks[0]) == []
    assert all(h.holders(b) == ["a"] for b in [*keep, late])
    assert h.bm.replication.missing == {blocks[0].block_id}


def test_a_new_report_id_abandons_the_unfinished_report(h: Harness) -> None:
    a = h.node("a")
    blocks = h.file("/f", [1, 1], replication=1)
    h.report(a, *blocks)
    h.bm.block_report(a, 5, 0, 2, [])
    h.bm.block_report(a, 6, 0, 1, list(blocks))  # the DataNode started over
    assert all(h.holders(b) == ["a"] for b in blocks)


def test_bad_batches_are_refused(h: Harness) -> None:
    a = h.node("a")
    with pytest.raises(InvalidArgument):
        h.bm.block_report(a, 1, 3, 3, [])
    with pytest.raises(InvalidArgument):
        h.bm.block_report(a, 1, 0, 0, [])
    too_many = [BlockRecord(i, 1, 1) for i in range(10 * h.config.block_report_batch_max + 1)]
    with pytest.raises(InvalidArgument, match="max"):
        h.bm.block_report(a, 1, 0, 1, too_many)


def test_incremental_delete(h: Harness) -> None:
    a, b = h.node("a"), h.node("b")
    (block,) = h.file("/f", [4])
    h.receive(a, block)
    h.receive(b, block)
    h.bm.incremental_report(a, (), [block.block_id])
    assert h.holders(block) == ["b"]
    assert block.block_id in h.bm.replication.needed


# --- orphans, corrupt, excess ------------------------------------------------------------


def test_orphan_replica_is_deleted(h: Harness) -> None:
    a = h.node("a")
    h.report(a, BlockRecord(123, 1, 5))
    assert not h.bm.map.replicas(123)
    assert h.beat(a).delete == [123]
    assert h.beat(a).delete == []


def test_orphans_wait_for_the_end_of_safe_mode() -> None:
    h = Harness(safe_mode_threshold=0.5, safe_mode_extension_s=0.0)
    h.file("/f", [1])
    assert h.safe_mode.wait_for_blocks()
    a = h.node("a")
    h.report(a, BlockRecord(123, 1, 5))
    h.bm.replication_tick()
    assert h.beat(a).delete == []
    assert h.safe_mode.on
    h.safe_mode.leave()
    h.bm.replication_tick()
    assert h.beat(a).delete == [123]


def test_replicas_from_the_future_are_kept_and_counted(h: Harness) -> None:
    """Block ids or genstamps this namespace never allocated (a newer NameNode wrote them,
    as after a takeover this one missed): never orphans, never corrupt, only counted."""
    a, b = h.node("a"), h.node("b")
    (block,) = h.file("/f", [10], replication=1)
    future_id = BlockRecord(h.ns.next_block_id + 5, 1, 7)
    future_gs = BlockRecord(block.block_id, h.ns.next_genstamp, 10)  # a known block, newer
    h.report(a, block, future_id)
    h.receive(b, future_gs)
    h.bm.replication_tick()
    assert h.beat(a).delete == [] and h.beat(b).delete == []
    assert h.holders(block) == ["a"] and not h.bm.map.replicas(future_id.block_id)
    assert h.bm.map.corrupt_block_count() == 0
    assert h.bm.future_block_count() == 2
    assert fsck.datanode_report(h.ns, h.bm).future_blocks == 2
    # an unknown id below what was allocated is an ordinary orphan: deleted
    h.report(a, block, future_id, BlockRecord(123, 1, 1))
    assert h.beat(a).delete == [123]
    # the count follows the reports: gone from a's next full report, deleted on b
    h.report(a, block)
    h.bm.incremental_report(b, (), [future_gs.block_id])
    assert h.bm.future_block_count() == 0


def test_replicas_of_another_shards_blocks_are_ignored_never_deleted() -> None:
    """A NameNode of shard 1 (its counters at shard 1's first ids, as ``-format --shard
    1`` makes them) told of shard 0's blocks, or shard 2's, neither counts nor deletes
    them: they belong to another namespace's block pool."""
    h = Harness()
    h.ns.next_block_id = first_id(1, FIRST_BLOCK_ID)
    h.ns.next_inode_id = first_id(1, FIRST_INODE_ID)
    a = h.node("a")
    (own,) = h.file("/f", [10], replication=1)
    assert shard_of_id(own.block_id) == 1
    shard_0 = BlockRecord(first_id(0, FIRST_BLOCK_ID) + 3, 1, 5)  # below our counter
    shard_2 = BlockRecord(first_id(2, FIRST_BLOCK_ID), 1, 5)  # above it
    h.report(a, own, shard_0, shard_2)
    h.receive(a, BlockRecord(shard_0.block_id + 1, 1, 5))
    h.bm.incremental_report(a, (), (), [BlockRecord(shard_0.block_id + 2, 1, 1)])
    h.bm.replication_tick()
    assert h.beat(a).delete == []
    assert h.holders(own) == ["a"] and not h.bm.map.replicas(shard_0.block_id)
    assert h.bm.future_block_count() == 0
    node = h.bm.datanodes.get(a)
    assert node is not None and len(node.foreign) == 4
    # an unknown id of our own shard is still an orphan; the next report drops the others
    orphan = BlockRecord(first_id(1, FIRST_BLOCK_ID) - 1, 1, 1)
    assert shard_of_id(orphan.block_id) == 1
    h.report(a, own, orphan)
    assert h.beat(a).delete == [orphan.block_id]
    assert not node.foreign


def test_wrong_genstamp_or_length_is_corrupt(h: Harness) -> None:
    a, b, c = h.node("a"), h.node("b"), h.node("c")
    (block,) = h.file("/f", [100])
    h.receive(a, BlockRecord(block.block_id, block.genstamp - 1, 100))
    h.receive(b, BlockRecord(block.block_id, block.genstamp, 99))
    assert h.holders(block) == []
    assert h.bm.map.corrupt_block_count() == 1
    assert h.bm.replication.missing == {block.block_id}
    assert sorted(h.bm.locations(block.block_id)) == ["a:9866", "b:9866"]  # last resort
    # a good replica: no longer missing. The stale one (an older genstamp: left behind by
    # a block recovery) goes at once (HDFS); the other corrupt one stays until enough good
    # ones exist (a reader may still need it)
    h.receive(c, block)
    assert h.bm.locations(block.block_id) == ["c:9866"]
    assert sorted(r.node_id for r in h.bm.map.replicas(block.block_id)) == ["b", "c"]
    assert h.beat(a).delete == [block.block_id]
    assert block.block_id in h.bm.replication.needed
    h.receive(h.node("d"), block)  # replication 2 reached: the corrupt one goes
    assert h.holders(block) == ["c", "d"]
    assert len(h.bm.map.replicas(block.block_id)) == 2
    assert h.beat(b).delete == [block.block_id]


def test_the_last_block_of_an_open_file_takes_any_length_until_completed(h: Harness) -> None:
    a, b = h.node("a"), h.node("b")
    (block,) = h.file("/open", [0], close=False)
    h.receive(a, BlockRecord(block.block_id, block.genstamp, 70))
    h.receive(b, BlockRecord(block.block_id, block.genstamp, 64))
    assert h.holders(block) == ["a", "b"]
    assert block.block_id not in h.bm.replication.needed
    assert block.block_id not in h.bm.replication.missing
    final = BlockRecord(block.block_id, block.genstamp, 70)
    assert h.bm.replicas_matching(final) == 1
    # lease recovery: replicas of different lengths are left to a block recovery
    plan = h.bm.plan_lease_recovery(h.ns.get_blocks("/open"))
    assert isinstance(plan, RecoverBlock) and sorted(plan.holders) == ["a", "b"]
    h.apply(CloseFileOp("/open", 2, 2, (final,)))  # the writer's length is the truth
    assert h.holders(block) == ["a"]
    assert block.block_id in h.bm.replication.needed


def test_reported_bad_replica(h: Harness) -> None:
    a, b, c = h.node("a"), h.node("b"), h.node("c")
    (block,) = h.file("/f", [10])
    h.receive(a, block)
    h.receive(b, block)
    assert not h.bm.report_bad_replica(block.block_id, "c:9866")  # c holds none
    assert not h.bm.report_bad_replica(block.block_id, "nowhere:1")
    assert h.bm.report_bad_replica(block.block_id, "a:9866")
    assert h.holders(block) == ["b"]
    assert h.bm.replicas_matching(block) == 1
    # reporting the same replica again does not make it good
    h.report(a, block)
    assert h.holders(block) == ["b"]
    h.receive(c, block)
    assert h.holders(block) == ["b", "c"]
    assert h.beat(a).delete == [block.block_id]


def test_setrep_down_deletes_excess_from_the_fullest_node(h: Harness) -> None:
    h.node("roomy", free=90 * GiB)
    h.node("full", free=1 * GiB)
    h.node("mid", free=50 * GiB)
    (block,) = h.file("/f", [10], replication=3)
    for name in ("roomy", "full", "mid"):
        h.receive(name, block)
    h.apply(SetReplicationOp("/f", 1))
    assert h.holders(block) == ["roomy"]
    assert h.beat("full").delete == [block.block_id]
    assert h.beat("mid").delete == [block.block_id]
    # the node reports the replica again before deleting it: not counted twice
    h.bm.datanodes.get("mid").deletions[block.block_id] = None  # type: ignore[union-attr]
    h.receive("mid", block)
    assert h.holders(block) == ["roomy"]


def test_deleted_blocks_lose_their_replicas_only_once_durable(h: Harness) -> None:
    a, b = h.node("a"), h.node("b")
    blocks = h.file("/f", [1, 2])
    for block in blocks:
        h.receive(a, block)
        h.receive(b, block)
    dropped = h.apply(DeleteOp("/f", 5), durable=False)
    assert sorted(dropped) == sorted(b.block_id for b in blocks)
    # not durable yet: a report of one is not an orphan, nothing is deleted
    h.report(a, *blocks)
    assert h.beat(a).delete == []
    assert h.bm.map.replicas(blocks[0].block_id)
    h.bm.ops_durable(dropped, [])
    assert sorted(h.beat(a).delete) == sorted(dropped)
    assert sorted(h.beat(b).delete) == sorted(dropped)
    assert not h.bm.map.replicas(blocks[0].block_id)
    assert h.bm.map.safe_blocks == 0


def test_deletions_per_heartbeat_are_bounded() -> None:
    h = Harness(deletions_per_heartbeat=3)
    a = h.node("a")
    h.report(a, *(BlockRecord(i, 1, 1) for i in range(7)))
    assert [len(h.beat(a).delete) for _ in range(4)] == [3, 3, 1, 0]


def test_replicas_found_bad_are_deleted_even_when_no_longer_reported(h: Harness) -> None:
    a, b, c = h.node("a"), h.node("b"), h.node("c")
    x, y = h.file("/f", [10, 20])
    for node, block in ((a, x), (b, x), (a, y), (c, y)):
        h.receive(node, block)
    # a DataNode leaves the replicas it found corrupt out of its full report
    h.bm.report_bad_replica(x.block_id, "a:9866")
    assert h.beat(a).delete == []  # kept while it is the last copy but one
    h.report(a, y)
    assert h.beat(a).delete == [x.block_id]
    # one that dies with a bad replica is told to delete it when it comes back
    h.bm.report_bad_replica(y.block_id, "c:9866")
    h.clock.advance(h.bm.datanodes.dead_after_s + 1)
    h.beat(a)
    h.beat(b)
    assert [n.node_id for n in h.bm.check_heartbeats()] == [c]
    h.node(c)
    h.report(c)
    assert h.beat(c).delete == [y.block_id]


def test_startup_safe_mode_follows_the_reports() -> None:
    h = Harness(safe_mode_threshold=1.0, safe_mode_extension_s=30.0)
    x, y = h.file("/f", [10, 20], replication=1)
    h.file("/open", [5], close=False)  # being written: not waited for
    assert h.safe_mode.wait_for_blocks()
    a = h.node("a")
    assert h.bm.update_safe_mode() is None
    assert h.safe_mode.reason.startswith("waiting for block reports: 0 of 2 blocks")
    h.report(a, x, BlockRecord(999, 1, 1))  # an orphan too: kept until safe mode ends
    assert h.bm.update_safe_mode() is None
    assert h.safe_mode.reason.startswith("waiting for block reports: 1 of 2 blocks")
    h.receive(a, y)
    assert h.bm.update_safe_mode() is None
    assert h.safe_mode.reason.startswith("block threshold reached: 2 of 2 blocks")
    h.clock.advance(29)
    assert h.bm.update_safe_mode() is None and h.safe_mode.on
    h.bm.replication_tick()
    assert h.beat(a).delete == []
    h.clock.advance(1)
    message = h.bm.update_safe_mode()
    assert message is not None and not h.safe_mode.startup
    h.bm.replication_tick()
    assert h.beat(a).delete == [999]
