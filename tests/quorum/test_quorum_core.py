"""The pure quorum-write core: call accounting and the recovery rule (HDFS-3077)."""

from __future__ import annotations

import pytest

from xdfs.protocol.journal import PrepareRecoveryResponse, SegmentState
from xdfs.quorum.calls import QuorumCall, majority
from xdfs.quorum.recovery import RecoveryConflict, choose_recovery_source, next_epoch


@pytest.mark.parametrize(("count", "needed"), [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3)])
def test_majority(count: int, needed: int) -> None:
    assert majority(count) == needed


def verdict(call: QuorumCall[object]) -> tuple[bool, bool, bool]:
    """(succeeded, hopeless, settled)"""
    return call.succeeded, call.hopeless, call.settled


def test_call_succeeds_at_the_quorum_and_keeps_late_answers() -> None:
    call: QuorumCall[object] = QuorumCall.of(["a", "b", "c"], 2)
    call.succeed("a", 1)
    assert verdict(call) == (False, False, False)
    call.fail("b", OSError("disk"))
    assert verdict(call) == (False, False, False)
    assert call.pending == ("c",)
    call.succeed("c", 3)
    assert verdict(call) == (True, False, True)
    assert call.successes == {"a": 1, "c": 3}
    assert "b: disk" in call.describe_failures()


def test_call_is_hopeless_once_too_many_failed() -> None:
    call: QuorumCall[object] = QuorumCall.of(["a", "b", "c"], 2)
    call.fail("a", OSError("x"))
    assert verdict(call) == (False, False, False)
    call.fail("c", OSError("y"))
    assert verdict(call) == (False, True, True)


def test_call_refuses_double_answers_and_strangers() -> None:
    call: QuorumCall[None] = QuorumCall.of(["a"], 1)
    call.succeed("a", None)
    with pytest.raises(AssertionError):
        call.fail("a", OSError())
    with pytest.raises(AssertionError):
        call.succeed("z", None)


def test_next_epoch_is_above_every_promise() -> None:
    assert next_epoch([]) == 1
    assert next_epoch([3, 7, 5]) == 8


def seg(start: int, end: int, *, open_: bool = True) -> SegmentState:
    return SegmentState(start, end, in_progress=open_)


def cand(
    segment: SegmentState | None, *, accepted: int = 0, writer: int = 1, committed: int = 0
) -> PrepareRecoveryResponse:
    return PrepareRecoveryResponse(segment, accepted, writer, committed)


def test_nothing_to_recover_when_no_node_has_records() -> None:
    assert choose_recovery_source({"a": cand(None), "b": cand(seg(10, 9))}) is None


def test_longest_in_progress_copy_wins_within_one_epoch() -> None:
    chosen = choose_recovery_source(
        {"a": cand(seg(10, 12)), "b": cand(seg(10, 15)), "c": cand(None)}
    )
    assert chosen == ("b", SegmentState(10, 15, in_progress=False))


def test_finalized_copy_beats_longer_in_progress_ones() -> None:
    chosen = choose_recovery_source(
        {"a": cand(seg(10, 12, open_=False)), "b": cand(seg(10, 20))}
    )
    assert chosen == ("a", SegmentState(10, 12, in_progress=False))


def test_higher_seen_epoch_beats_a_longer_copy() -> None:
    """A copy accepted by an earlier recovery (epoch 3) is kept over a longer copy written
    in epoch 2 that never reached a majority."""
    chosen = choose_recovery_source(
        {"a": cand(seg(10, 12), accepted=3, writer=2), "b": cand(seg(10, 20), writer=2)}
    )
    assert chosen == ("a", SegmentState(10, 12, in_progress=False))


def test_a_winner_below_the_committed_txid_is_a_conflict() -> None:
    with pytest.raises(RecoveryConflict, match="committed txid 14"):
        choose_recovery_source({"a": cand(seg(10, 12), committed=14), "b": cand(None)})


def test_finalized_copies_that_disagree_are_a_conflict() -> None:
    with pytest.raises(RecoveryConflict, match="different txids"):
        choose_recovery_source(
            {"a": cand(seg(10, 12, open_=False)), "b": cand(seg(10, 13, open_=False))}
        )


def test_ties_pick_the_same_node_every_time() -> None:
    candidates = {"c": cand(seg(10, 12)), "a": cand(seg(10, 12)), "b": cand(seg(10, 11))}
    assert choose_recovery_source(candidates) == ("a", SegmentState(10, 12, False))
