"""HA, pure cores: the standby's queue of reports it cannot place yet (PendingMessages),
the standby block manager (no commands, reports ahead of the tailer queued, deletions
postponed), the first moments after a failover (deletions wait for a heartbeat from every
DataNode), and a DataNode's choice of whom to obey (ActiveChoice)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from xdfs.datanode.epochs import Verdict, load_epoch
from xdfs.datanode.offer import ActiveChoice, NameNodeOffer
from xdfs.errors import Fenced
from xdfs.namenode.blocks.pending_messages import PendingMessages
from xdfs.namenode.namespace.ops import AddBlockOp, AddFileOp, CloseFileOp, Op, SetReplicationOp
from xdfs.protocol.blocks import BlockRecord
from xdfs.protocol.ha import ROLE_ACTIVE, ROLE_STANDBY

from .test_nn_blockmanager import Harness

# --- PendingMessages ---------------------------------------------------------------------


def _rec(block_id: int, genstamp: int = 1, size: int = 10) -> BlockRecord:
    return BlockRecord(block_id, genstamp, size)


def test_pending_messages_come_back_once_ready_in_arrival_order() -> None:
    q = PendingMessages()
    q.queue("a", _rec(5))
    q.queue("b", _rec(3), rbw=True)
    q.queue("a", _rec(7))
    assert len(q) == 3
    taken = q.take_ready(lambda r: r.block_id < 6)
    assert [(m.node_id, m.record.block_id, m.rbw) for m in taken] == [("a", 5, False),
                                                                       ("b", 3, True)]
    assert len(q) == 1 and q.block_ids() == [7]
    assert q.take_ready(lambda r: False) == []
    assert [m.record.block_id for m in q.take_ready(lambda r: True)] == [7]
    assert len(q) == 0


def test_newest_news_wins_and_deletions_and_nodes_drop_messages() -> None:
    q = PendingMessages()
    q.queue("a", _rec(5, genstamp=1))
    q.queue("a", _rec(5, genstamp=2))  # a newer report of the same replica replaces it
    q.queue("b", _rec(5, genstamp=1))
    q.queue("a", _rec(6))
    q.queue("a", _rec(8))
    q.forget("b", 5)  # b deleted its replica
    q.forget("zz", 99)  # nothing queued: nothing happens
    assert len(q) == 3
    q.forget_node("a", keep=[5])  # a's full report lists block 5 only
    taken = q.take_ready(lambda r: True)
    assert [(m.node_id, m.record) for m in taken] == [("a", _rec(5, genstamp=2))]
    q.queue("a", _rec(9))
    q.forget_node("a")
    assert len(q) == 0


# --- the standby's block manager -----------------------------------------------------------


def _standby() -> Harness:
    h = Harness()
    h.bm.become_standby()
    return h


def _allocate(h: Harness, path: str) -> tuple[list[Op], BlockRecord]:
    """The ops the active logs for a one-block file (not applied on the standby yet)."""
    h._inode += 1
    block = BlockRecord(h.ns.next_block_id, h.ns.next_genstamp, 10)
    ops: list[Op] = [AddFileOp(path, h._inode, 0o644, "root", "g", 0, 2, 1 << 20, "c")]
    return ops, block


def _tail(h: Harness, *ops: Op) -> None:
    """As TrackedNamespace does for a tailed batch."""
    dropped: list[int] = []
    affected: list[int] = []
    for op in ops:
        gone = h.ns.apply(op)
        h.bm.leaving(gone)
        dropped.extend(gone)
        affected.extend(h.bm.affected_blocks(op))
    h.bm.tailed(dropped, affected)


def test_standby_queues_reports_ahead_of_its_edits_and_places_them_after_the_tail() -> None:
    h = _standby()
    a, b = h.node("a"), h.node("b")
    ops, block = _allocate(h, "/f")
    # the DataNodes received the block before the standby tailed its allocation
    h.receive(a, block)
    h.report(b, block)
    assert not h.bm.map.replicas(block.block_id)
    assert len(h.bm.ha.pending) == 2
    assert not any(n.future for n in h.bm.datanodes)  # not "from the future": queued
    _tail(h, *ops, AddBlockOp("/f", BlockRecord(block.block_id, block.genstamp, 0)),
          CloseFileOp("/f", 1, 1, (block,)))
    assert h.holders(block) == ["a", "b"]
    assert len(h.bm.ha.pending) == 0


def test_a_newer_genstamp_waits_for_the_edit_that_sets_it() -> None:
    h = _standby()
    a = h.node("a")
    (block,) = h.file("/f", [10], replication=1)
    h.receive(a, block)
    bumped = BlockRecord(block.block_id, h.ns.allocate_genstamp(), 10)  # an append's, say
    h.receive(a, bumped)
    assert len(h.bm.ha.pending) == 1
    assert h.bm.map.replica(block.block_id, a).genstamp == block.genstamp  # type: ignore[union-attr]


def test_standby_sends_no_command_and_postpones_deletions() -> None:
    h = _standby()
    a, b, c = h.node("a"), h.node("b"), h.node("c")
    (block,) = h.file("/f", [10], replication=3)
    for node in (a, b, c):
        h.receive(node, block)
    _tail(h, SetReplicationOp("/f", 1))  # the active will delete two replicas
    h.receive(a, BlockRecord(999_999, 1, 1))  # beyond what it allocated: queued, not orphan
    h.bm.replication_tick()
    for node in (a, b, c):
        commands = h.beat(node)
        assert commands.delete == [] and commands.replicate == [] and commands.recover == []
    assert h.holders(block) == ["a", "b", "c"]  # the standby's map keeps following reports


def test_after_a_failover_deletions_wait_for_a_heartbeat_from_every_datanode() -> None:
    h = _standby()
    a, b, c = h.node("a"), h.node("b"), h.node("c")
    (block,) = h.file("/f", [10], replication=3)
    for node in (a, b, c):
        h.receive(node, block)
    _tail(h, SetReplicationOp("/f", 2))
    h.bm.become_active()
    assert h.bm.ha.stale_nodes() == ["a", "b", "c"]
    h.bm.replication_tick()
    assert [h.beat(n).delete for n in (a, b)] == [[], []]
    assert h.holders(block) == ["a", "b", "c"]  # c has not heartbeated: still postponed
    h.beat(c)
    assert h.bm.ha.stale_nodes() == []
    h.bm.replication_tick()  # the postponed decision runs: one excess replica goes
    deletions = [h.beat(n).delete for n in (a, b, c)]
    assert sorted(map(len, deletions)) == [0, 0, 1]
    assert len(h.holders(block)) == 2


def test_becoming_active_places_the_rest_of_the_queue_as_future_replicas() -> None:
    h = _standby()
    a = h.node("a")
    h.receive(a, BlockRecord(h.ns.next_block_id + 5, 1, 10))
    h.bm.become_active()
    assert len(h.bm.ha.pending) == 0
    assert h.bm.future_block_count() == 1  # kept and counted, never deleted


# --- the DataNode's choice -------------------------------------------------------------------


def test_active_choice_follows_the_highest_epoch_claim() -> None:
    choice = ActiveChoice()
    assert choice.active is None
    choice.epochs.raise_to(3)
    assert choice.claimed("nn2", "standby", 3) is None
    assert not choice.obeys("nn2")
    assert choice.claimed("nn1", "active", 3) is not None
    assert choice.obeys("nn1") and not choice.obeys("nn2")
    # a second claim at the same epoch cannot be true: the first stands
    assert choice.claimed("nn2", "active", 3) is None
    assert choice.obeys("nn1")
    # a failover: nn2 claims at a higher epoch
    assert choice.judge(4) is Verdict.NEWER
    choice.epochs.raise_to(4)
    assert "nn2" in (choice.claimed("nn2", "active", 4) or "")
    assert choice.obeys("nn2") and not choice.obeys("nn1")
    # the old one answering at its old epoch is fenced (the actor never obeys it)
    assert choice.judge(3) is Verdict.STALE
    # the active steps down: nobody is obeyed until one claims again
    assert choice.claimed("nn2", "standby", 4) is not None
    assert choice.active is None
    assert choice.claimed("nn1", "active", 4) is not None and choice.obeys("nn1")


def test_without_ha_state_a_namenode_claims_active() -> None:
    choice = ActiveChoice()
    assert choice.claimed("nn", "", 0) is not None
    assert choice.obeys("nn")


def _offer(tmp_path: Path, *, ha: bool) -> NameNodeOffer:
    # where epochs persist: shard 0's pool is the data dir's current/ itself
    storage = SimpleNamespace(current=tmp_path, pool_current=lambda shard: tmp_path)
    return NameNodeOffer(cast(Any, storage), _no_fatal_error, [], ha=ha)


def _no_fatal_error(error: BaseException) -> None:
    raise AssertionError(f"the offer stopped the DataNode: {error!r}")


async def test_a_standby_below_the_watermark_lags_and_an_active_one_is_fenced(
    tmp_path: Path,
) -> None:
    """In HA a standby answering at an older epoch has not tailed the failover yet: it
    stays registered (no Fenced, hence no full report later) and is obeyed in nothing; an
    active one at that epoch was fenced by the takeover. Without HA every stale answer is."""
    offer = _offer(tmp_path, ha=True)
    await offer.judge("nn2", ROLE_ACTIVE, 3)
    assert offer.obeys("nn2") and load_epoch(tmp_path) == 3
    await offer.judge("nn1", ROLE_STANDBY, 2)
    assert not offer.obeys("nn1") and offer.obeys("nn2")
    with pytest.raises(Fenced):
        await offer.judge("nn1", ROLE_ACTIVE, 2)
    assert offer.obeys("nn2")
    plain = _offer(tmp_path, ha=False)
    plain.choice.epochs.raise_to(3)
    with pytest.raises(Fenced):
        await plain.judge("nn", ROLE_STANDBY, 2)
