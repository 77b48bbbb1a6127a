"""The DataNode's pure decisions: the length a block recovery agrees on and who takes part
(HDFS's syncBlock rules), and the directory scanner's comparison of disk and map."""

from __future__ import annotations

from pathlib import Path

import pytest

from xdfs.datanode.directory_scanner import Found, reconcile
from xdfs.datanode.recovery_plan import RecoveryPlan, plan_recovery
from xdfs.datanode.replica import Replica
from xdfs.errors import InvalidArgument
from xdfs.protocol.blocks import BlockRecord
from xdfs.protocol.datanode import ReplicaRecoveryInfo

GS = 10  # the block's genstamp in the namespace


def info(num_bytes: int, *, finalized: bool = False, genstamp: int = GS) -> ReplicaRecoveryInfo:
    return ReplicaRecoveryInfo(BlockRecord(7, genstamp, num_bytes), finalized)


def test_rbw_replicas_agree_on_the_shortest() -> None:
    answers = [("a", info(3000)), ("b", info(2048)), ("c", info(4096))]
    assert plan_recovery(7, GS, answers, True) == RecoveryPlan(2048, ("a", "b", "c"))


def test_a_finalized_replica_decides_the_length() -> None:
    answers = [("a", info(2048)), ("b", info(4096, finalized=True)), ("c", info(4096))]
    # the rbw replica of another length is left out (stale once the block is complete)
    assert plan_recovery(7, GS, answers, True) == RecoveryPlan(4096, ("b", "c"))


def test_finalized_replicas_that_disagree_decide_nothing() -> None:
    answers = [("a", info(10, finalized=True)), ("b", info(20, finalized=True))]
    with pytest.raises(InvalidArgument, match="differ"):
        plan_recovery(7, GS, answers, True)


def test_older_and_empty_replicas_take_no_part_newer_ones_do() -> None:
    answers = [
        ("old", info(9000, genstamp=GS - 1)),  # left behind before the last write
        ("empty", info(0)),
        ("earlier-attempt", info(1500, finalized=True, genstamp=GS + 3)),
        ("rbw", info(1500)),
    ]
    assert plan_recovery(7, GS, answers, True) == RecoveryPlan(1500, ("earlier-attempt", "rbw"))


def test_no_byte_anywhere_drops_the_block_only_when_everyone_answered() -> None:
    nothing = [("a", info(0)), ("b", info(50, genstamp=GS - 1))]
    assert plan_recovery(7, GS, nothing, True) == RecoveryPlan(0, (), delete_block=True)
    assert plan_recovery(7, GS, [], True).delete_block  # every holder said it has none
    with pytest.raises(InvalidArgument):  # a silent holder may have bytes: decide later
        plan_recovery(7, GS, nothing, False)


def test_a_silent_holder_does_not_stop_the_others() -> None:
    assert plan_recovery(7, GS, [("a", info(100))], False) == RecoveryPlan(100, ("a",))


def _replica(block_id: int, genstamp: int, home: Path) -> Replica:
    return Replica(block_id, genstamp, 10, home / f"blk_{block_id}",
                   home / f"blk_{block_id}_{genstamp}.meta", 20)


def test_reconcile_finds_vanished_files_and_unknown_replicas(tmp_path: Path) -> None:
    known = {block_id: _replica(block_id, 3, tmp_path) for block_id in (1, 2, 3, 4)}
    found = {
        1: Found(10, {3: 20}),  # whole
        2: Found(-1, {3: 20}),  # data file gone
        3: Found(10, {}),  # checksum file gone
        # 4: both gone
        5: Found(10, {2: 20, 4: 20}),  # unknown: the newest checksum file goes with it
        6: Found(-1, {1: 20}),  # half a replica: not adopted
        7: Found(10, {}),
    }
    missing, unknown = reconcile(known, found)
    assert [r.block_id for r in missing] == [2, 3, 4]
    assert [(block_id, genstamp) for block_id, genstamp, _files in unknown] == [(5, 4)]
    # a replica whose checksum file has another genstamp than the map's is missing too
    assert reconcile({1: _replica(1, 4, tmp_path)}, {1: Found(10, {3: 20})})[0] != []
