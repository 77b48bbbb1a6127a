"""The two-phase commit cores, step by step (the simulator covers the interleavings)."""

from __future__ import annotations

import pytest

from xdfs.errors import ShardingError, TransactionAborted
from xdfs.sharding import twophase as tp

SETTINGS = tp.Settings(resend_s=1.0, prepare_ticks_max=3)


def sends(actions: list[tp.Action]) -> list[tuple[str, tp.Message]]:
    return [(a.to, a.message) for a in actions if isinstance(a, tp.Send)]


def journaled(actions: list[tp.Action]) -> list[tp.CoordinatorRecord | tp.ParticipantRecord]:
    return [a.record for a in actions if isinstance(a, tp.Journal | tp.Prepare)]


def only_record(actions: list[tp.Action]) -> tp.CoordinatorRecord | tp.ParticipantRecord:
    records = journaled(actions)
    assert len(records) == 1, actions
    return records[0]


def begin(c: tp.Coordinator, order: tuple[tuple[str, ...], ...] = ()) -> None:
    record = only_record(c.on(tp.Begin("t1", {"a": "ca", "b": "cb"}, order)))
    assert record.kind is tp.Kind.PREPARE
    out = c.on(tp.Journaled(record))
    assert sends(out) == [("a", tp.PrepareMsg("t1", "ctl", "ca")),
                          ("b", tp.PrepareMsg("t1", "ctl", "cb"))]


def test_commit_path() -> None:
    c = tp.Coordinator("ctl", SETTINGS)
    begin(c)
    assert c.on(tp.VoteMsg("t1", "a", True)) == []
    commit = only_record(c.on(tp.VoteMsg("t1", "b", True)))
    assert commit.kind is tp.Kind.COMMIT
    # nobody hears COMMIT before the commit point is durable
    out = c.on(tp.Journaled(commit))
    assert sends(out) == [("a", tp.DecisionMsg("t1", True, "ctl")),
                          ("b", tp.DecisionMsg("t1", True, "ctl"))]
    assert c.on(tp.AckMsg("t1", "a")) == []
    out = c.on(tp.AckMsg("t1", "b"))
    assert out[0] == tp.Reply("t1", 0)
    end = only_record(out)
    assert end.kind is tp.Kind.END
    c.on(tp.Journaled(end))
    assert c.txs == {}
    # a retried request is answered from the outcome, not run again
    assert c.on(tp.Begin("t1", {"a": "ca"})) == [tp.Reply("t1", 0)]


def test_a_no_vote_aborts_with_its_reason() -> None:
    c = tp.Coordinator("ctl", SETTINGS)
    begin(c)
    abort = only_record(c.on(tp.VoteMsg("t1", "b", False, code=302, reason="exists")))
    assert abort.kind is tp.Kind.ABORT
    assert isinstance(abort, tp.CoordinatorRecord) and abort.code == 302
    out = c.on(tp.Journaled(abort))
    assert {to for to, _ in sends(out)} == {"a", "b"}  # the abort goes to all
    c.on(tp.AckMsg("t1", "a"))
    assert c.on(tp.AckMsg("t1", "b"))[0] == tp.Reply("t1", 302, "b: exists")


def test_missing_votes_abort_after_the_resends() -> None:
    c = tp.Coordinator("ctl", SETTINGS)
    begin(c)
    c.on(tp.VoteMsg("t1", "a", True))
    generation = c.txs["t1"].generation
    out = c.on(tp.Tick("t1", generation))
    assert sends(out) == [("b", tp.PrepareMsg("t1", "ctl", "cb"))]  # only the silent one
    assert c.on(tp.Tick("t1", generation)) == []  # a stale timer
    c.on(tp.Tick("t1", c.txs["t1"].generation))
    abort = only_record(c.on(tp.Tick("t1", c.txs["t1"].generation)))
    assert abort.kind is tp.Kind.ABORT
    assert isinstance(abort, tp.CoordinatorRecord)
    assert abort.code == TransactionAborted.code and "b" in abort.reason


def test_presumed_abort_for_an_unknown_transaction() -> None:
    c = tp.Coordinator("ctl", SETTINGS)
    assert sends(c.on(tp.VoteMsg("t9", "a", True))) == [
        ("a", tp.DecisionMsg("t9", False, "ctl"))]


def test_coordinator_restart_before_deciding_aborts() -> None:
    c = tp.Coordinator("ctl", SETTINGS)
    prepare = tp.CoordinatorRecord(tp.Kind.PREPARE, "t1", (("a", 1), ("b", 2)))
    out = c.on(tp.Recover((prepare,)))
    assert only_record(out).kind is tp.Kind.ABORT


def test_coordinator_restart_after_commit_redrives_it() -> None:
    c = tp.Coordinator("ctl", SETTINGS)
    records = (tp.CoordinatorRecord(tp.Kind.PREPARE, "t1", (("a", 1), ("b", 2))),
               tp.CoordinatorRecord(tp.Kind.COMMIT, "t1"),
               tp.CoordinatorRecord(tp.Kind.PREPARE, "t2", (("a", 1),)),
               tp.CoordinatorRecord(tp.Kind.ABORT, "t2", code=733),
               tp.CoordinatorRecord(tp.Kind.END, "t2", code=733))
    out = c.on(tp.Recover(records))
    assert sends(out) == [("a", tp.DecisionMsg("t1", True, "ctl")),
                          ("b", tp.DecisionMsg("t1", True, "ctl"))]
    assert c.on(tp.Begin("t2", {"a": 1})) == [tp.Reply("t2", 733)]
    # a prepared participant asking again hears the decision
    assert sends(c.on(tp.VoteMsg("t1", "b", True))) == [
        ("b", tp.DecisionMsg("t1", True, "ctl"))]


def test_ordered_commit_tells_the_next_wave_after_the_first_acknowledged() -> None:
    c = tp.Coordinator("src", SETTINGS)
    record = only_record(c.on(tp.Begin("t1", {"src": 1, "dst": 2}, (("src",), ("dst",)))))
    c.on(tp.Journaled(record))
    c.on(tp.VoteMsg("t1", "src", True))
    commit = only_record(c.on(tp.VoteMsg("t1", "dst", True)))
    assert sends(c.on(tp.Journaled(commit))) == [("src", tp.DecisionMsg("t1", True, "src"))]
    assert c.on(tp.VoteMsg("t1", "dst", True)) == []  # the destination waits its turn
    assert sends(c.on(tp.AckMsg("t1", "src"))) == [("dst", tp.DecisionMsg("t1", True, "src"))]


@pytest.mark.parametrize(("changes", "order"), [
    ({}, ()),
    ({"a": 1, "b": 2}, (("a",),)),
    ({"a": 1}, (("a",), ())),
])
def test_bad_transactions_are_refused(changes: dict[str, object],
                                      order: tuple[tuple[str, ...], ...]) -> None:
    with pytest.raises(ShardingError):
        tp.Coordinator("ctl").on(tp.Begin("t1", changes, order))


def test_participant_votes_only_once_prepared() -> None:
    p = tp.Participant("a", SETTINGS)
    out = p.on(tp.PrepareMsg("t1", "ctl", "ca"))
    assert journaled(out) == [tp.ParticipantRecord(tp.Kind.PREPARE, "t1", "ctl", "ca")]
    assert sends(out) == []  # no vote before the PREPARE is durable
    assert p.on(tp.PrepareMsg("t1", "ctl", "ca")) == []  # a repeat while journaling
    out = p.on(tp.Prepared("t1"))
    assert sends(out) == [("ctl", tp.VoteMsg("t1", "a", True))]
    assert sends(p.on(tp.PrepareMsg("t1", "ctl", "ca"))) == [
        ("ctl", tp.VoteMsg("t1", "a", True))]  # the vote was lost: again
    commit = only_record(p.on(tp.DecisionMsg("t1", True, "ctl")))
    assert commit.kind is tp.Kind.COMMIT
    assert p.on(tp.DecisionMsg("t1", True, "ctl")) == []  # while journaling
    assert sends(p.on(tp.Journaled(commit))) == [("ctl", tp.AckMsg("t1", "a"))]
    assert sends(p.on(tp.DecisionMsg("t1", True, "ctl"))) == [("ctl", tp.AckMsg("t1", "a"))]
    assert p.on(tp.DecisionMsg("t1", False, "ctl")) == []  # a stale presumed abort


def test_participant_refusal_and_late_prepare() -> None:
    p = tp.Participant("a", SETTINGS)
    p.on(tp.PrepareMsg("t1", "ctl", "ca"))
    out = p.on(tp.Refused("t1", 302, "exists"))
    assert sends(out) == [("ctl", tp.VoteMsg("t1", "a", False, 302, "exists"))]
    assert sends(p.on(tp.PrepareMsg("t1", "ctl", "ca"))) == sends(out)
    # an ABORT for a transaction never prepared here is acknowledged and remembered
    assert sends(p.on(tp.DecisionMsg("t2", False, "ctl"))) == [("ctl", tp.AckMsg("t2", "a"))]
    assert sends(p.on(tp.PrepareMsg("t2", "ctl", "x")))[0][1] == tp.VoteMsg(
        "t2", "a", False, TransactionAborted.code, "aborted before it prepared here")


def test_abort_while_preparing_waits_for_the_prepare() -> None:
    p = tp.Participant("a", SETTINGS)
    p.on(tp.PrepareMsg("t1", "ctl", "ca"))
    assert p.on(tp.DecisionMsg("t1", False, "ctl")) == []
    abort = only_record(p.on(tp.Prepared("t1")))
    assert abort.kind is tp.Kind.ABORT
    assert sends(p.on(tp.Journaled(abort))) == [("ctl", tp.AckMsg("t1", "a"))]


def test_participant_restart_in_doubt_asks_again() -> None:
    p = tp.Participant("a", SETTINGS)
    records = (tp.ParticipantRecord(tp.Kind.PREPARE, "t1", "ctl", "ca"),
               tp.ParticipantRecord(tp.Kind.PREPARE, "t2", "ctl", "cb"),
               tp.ParticipantRecord(tp.Kind.COMMIT, "t2"))
    out = p.on(tp.Recover(records))
    assert sends(out) == [("ctl", tp.VoteMsg("t1", "a", True))]
    assert p.in_doubt() == ["t1"]
    tick = next(a.event for a in out if isinstance(a, tp.Schedule))
    assert sends(p.on(tick)) == [("ctl", tp.VoteMsg("t1", "a", True))]
    assert sends(p.on(tp.DecisionMsg("t2", True, "ctl"))) == [("ctl", tp.AckMsg("t2", "a"))]


def test_unknown_event_is_a_typed_error() -> None:
    with pytest.raises(ShardingError):
        tp.Participant("a").on(tp.Begin("t1", {"a": 1}))
