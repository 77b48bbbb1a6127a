"""The replication monitor: queue priorities, scheduling, pending timeouts, dead nodes,
corrupt replicas replaced before they are deleted. Time is injected; nothing sleeps."""

from __future__ import annotations

from xdfs.namenode.blocks.replication_queues import NeededReplications, PendingReplications
from xdfs.namenode.namespace.ops import SetReplicationOp
from xdfs.protocol.blocks import BlockRecord

from .test_nn_blockmanager import Harness


def test_needed_queue_serves_fewest_live_replicas_first_and_rotates() -> None:
    queue = NeededReplications()
    queue.add(10, 3)
    queue.add(11, 1)
    queue.add(12, 2)
    queue.add(13, 1)
    queue.add(14, 5)  # beyond the last level: same as 3
    assert len(queue) == 5 and queue.level_sizes() == [2, 1, 2]
    assert queue.pop_batch(3) == [11, 13, 12]
    queue.add(11, 1)  # could not be served: back at the end of its level
    queue.add(15, 1)
    assert queue.pop_batch(10) == [11, 15, 10, 14]
    assert len(queue) == 0
    queue.add(20, 2)
    queue.add(20, 1)  # lost another replica: re-prioritised
    assert queue.level_sizes() == [1, 0, 0]
    queue.remove(20)
    queue.remove(20)
    assert 20 not in queue


def test_pending_replications_resolve_expire_and_drop() -> None:
    pending = PendingReplications()
    pending.add(1, "src", ("t1", "t2"), deadline_s=10.0)
    pending.add(2, "src", ("t3",), deadline_s=20.0)
    assert (len(pending), pending.count(1), pending.targets(1)) == (3, 2, ["t1", "t2"])
    assert pending.resolve(1, "t9") is None
    done = pending.resolve(1, "t1")
    assert done is not None and (done.source, done.target) == ("src", "t1")
    assert [t.block_id for t in pending.expire(10.0)] == [1]
    assert pending.blocks() == [2]
    assert [t.target for t in pending.drop_node("t3")] == ["t3"]
    assert len(pending) == 0


def test_dead_node_blocks_are_copied_from_a_survivor_to_another_node() -> None:
    h = Harness()
    a, b, c = h.node("a"), h.node("b"), h.node("c")
    (block,) = h.file("/f", [100])
    h.receive(a, block)
    h.receive(b, block)
    h.clock.advance(h.bm.datanodes.dead_after_s + 1)
    for name in (a, c):
        h.beat(name)
    assert [n.node_id for n in h.bm.check_heartbeats()] == ["b"]
    assert h.bm.replication_tick() == 1
    (task,) = h.beat(a).replicate  # a is the only source, c the only possible target
    assert (task.block, task.targets) == (block, ["c:9866"])
    assert h.beat(a).replicate == []  # sent once
    assert h.bm.replication.under_replicated_count() == 1
    assert h.bm.replication_tick() == 0  # pending: not asked twice
    h.receive(c, block)  # the copy arrived
    assert h.holders(block) == ["a", "c"]
    assert h.bm.replication.under_replicated_count() == 0
    assert len(h.bm.replication.pending) == 0
    assert h.bm.datanodes.get("a").replication_load == 0  # type: ignore[union-attr]


def test_a_copy_not_reported_in_time_is_asked_again() -> None:
    h = Harness(replication_pending_timeout_s=60.0)
    a, c = h.node("a"), h.node("c")
    (block,) = h.file("/f", [1])
    h.receive(a, block)
    assert h.bm.replication_tick() == 1
    assert [t.targets for t in h.beat(a).replicate] == [["c:9866"]]
    h.clock.advance(59)
    h.beat(a)
    h.beat(c)
    assert h.bm.replication_tick() == 0
    h.clock.advance(2)
    h.beat(a)
    h.beat(c)
    assert h.bm.replication_tick() == 1  # timed out: scheduled again
    assert [t.targets for t in h.beat(a).replicate] == [["c:9866"]]


def test_most_endangered_blocks_go_first_and_streams_are_bounded() -> None:
    h = Harness(replication_streams_per_node=1)
    a, b = h.node("a"), h.node("b")
    nodes = [h.node(f"t{i}") for i in range(4)]
    (two_left,) = h.file("/two", [1], replication=4)
    (one_left,) = h.file("/one", [1], replication=4)
    h.receive(a, two_left)
    h.receive(b, two_left)
    h.receive(a, one_left)
    assert h.bm.replication.needed.level_sizes() == [1, 1, 0]
    # one stream per node: a copies one_left first (it has a single replica left)
    h.bm.replication_tick()
    work = {name: h.beat(name).replicate for name in (a, b, *nodes)}
    assert [t.block.block_id for t in work[a]] == [one_left.block_id]
    assert len(work[a][0].targets) == 1  # the stream limit holds for targets too
    assert all(node.replication_load <= 1 for node in h.bm.datanodes)
    # every copy done, the rest is scheduled in later rounds until both have 4
    for _ in range(10):
        for tasks in work.values():
            for task in tasks:
                for target in task.targets:
                    h.receive(target.split(":")[0], task.block)
        h.bm.replication_tick()
        work = {name: h.beat(name).replicate for name in (a, b, *nodes)}
    assert len(h.holders(one_left)) == len(h.holders(two_left)) == 4


def test_corrupt_replica_is_replaced_then_deleted() -> None:
    h = Harness()
    a, b, c = h.node("a"), h.node("b"), h.node("c")
    (block,) = h.file("/f", [10])
    h.receive(a, block)
    h.receive(b, block)
    h.bm.report_bad_replica(block.block_id, "a:9866")
    # kept while it is needed as a last resort, a copy is scheduled from the good one
    assert h.beat(a).delete == []
    assert h.bm.replication_tick() == 1
    (task,) = h.beat(b).replicate
    assert task.targets == ["c:9866"]
    h.receive(c, block)
    assert h.beat(a).delete == [block.block_id]
    assert h.holders(block) == ["b", "c"]
    assert h.bm.map.corrupt_block_count() == 0


def test_missing_blocks_are_counted_not_queued() -> None:
    h = Harness()
    a = h.node("a")
    (block,) = h.file("/f", [10])
    h.receive(a, block)
    h.bm.report_bad_replica(block.block_id, "a:9866")
    assert h.bm.replication.missing == {block.block_id}
    assert block.block_id not in h.bm.replication.needed
    assert h.bm.replication_tick() == 0
    h.receive(h.node("b"), block)
    assert h.bm.replication.missing == set()


def test_setrep_up_queues_and_nothing_is_copied_in_safe_mode() -> None:
    h = Harness(safe_mode_threshold=0.5)
    a, _b = h.node("a"), h.node("b")
    (block,) = h.file("/f", [10], replication=1)
    h.receive(a, block)
    h.apply(SetReplicationOp("/f", 2))
    assert block.block_id in h.bm.replication.needed
    h.safe_mode.enter()
    assert h.bm.replication_tick() == 0
    h.safe_mode.leave()
    assert h.bm.replication_tick() == 1


def test_excess_found_in_safe_mode_waits_for_its_end() -> None:
    h = Harness()
    a, b = h.node("a"), h.node("b")
    (block,) = h.file("/f", [10], replication=1)
    h.safe_mode.enter()
    h.receive(a, block)
    h.receive(b, block)
    assert h.holders(block) == ["a", "b"]
    h.safe_mode.leave()
    h.bm.replication_tick()
    assert len(h.holders(block)) == 1
    assert [len(h.beat(n).delete) for n in (a, b)] in ([1, 0], [0, 1])


def test_a_node_deleting_a_block_is_not_its_new_target() -> None:
    h = Harness()
    a, b, c = h.node("a"), h.node("b"), h.node("c")
    (block,) = h.file("/f", [10], replication=1)
    h.receive(a, block)
    h.receive(b, block)  # excess: one of them is told to delete it
    deleting = next(n for n in (a, b) if block.block_id in h.bm.datanodes.get(n).deletions)  # type: ignore[union-attr]
    keeper = a if deleting == b else b
    h.apply(SetReplicationOp("/f", 2))
    h.bm.replication_tick()
    (task,) = h.beat(keeper).replicate
    assert task.targets == [f"{c}:9866"]
    assert BlockRecord(block.block_id, block.genstamp, 10) == task.block
