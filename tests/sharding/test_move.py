"""One slot's move, step by step (the simulator covers the interleavings)."""

from __future__ import annotations

from xdfs.sharding import move as mv

MOVE = mv.Move("m1", 7, "src", "dst", "ctl")
SETTINGS = mv.MoveSettings(resend_s=1.0, fence_lag_max=2, copy_ticks_max=3)


def records(actions: list[mv.MoveAction]) -> list[mv.MoveRecord]:
    return [a.record for a in actions if isinstance(a, mv.Journal)]


def sends(actions: list[mv.MoveAction]) -> list[tuple[str, mv.MoveMessage]]:
    return [(a.to, a.message) for a in actions if isinstance(a, mv.Send)]


def settle(machine: mv.MoveController | mv.MoveSource | mv.MoveTarget,
           actions: list[mv.MoveAction]) -> list[mv.MoveAction]:
    """Journal every record the actions ask for; the actions that follow."""
    out: list[mv.MoveAction] = []
    for record in records(actions):
        out += machine.on(mv.Journaled(record))
    return out


def test_a_move_from_start_to_end() -> None:
    ctl = mv.MoveController("ctl", SETTINGS)
    src = mv.MoveSource("src", SETTINGS)
    dst = mv.MoveTarget("dst", SETTINGS)
    started = settle(ctl, ctl.on(mv.StartMove(MOVE)))
    assert sends(started) == [("src", mv.StartMsg(MOVE))]
    assert src.on(mv.StartMsg(MOVE)) == [mv.Stream(MOVE)]
    assert src.on(mv.StreamProgress("m1", 10, 20)) == []  # too far behind to fence
    assert src.on(mv.StreamProgress("m1", 19, 20)) == [mv.Fence(MOVE)]
    assert src.fenced() == [7]
    handoff = src.on(mv.Fenced("m1", 21))
    assert records(handoff) == [mv.MoveRecord(mv.Kind.HANDOFF, MOVE, txid=21)]
    assert sends(settle(src, handoff)) == [("dst", mv.HandoffMsg(MOVE, 21))]
    dst.on(mv.Staged(MOVE, 19))
    assert records(dst.on(mv.HandoffMsg(MOVE, 21))) == []  # not staged through 21 yet
    acquire = dst.on(mv.Staged(MOVE, 21))
    assert records(acquire) == [mv.MoveRecord(mv.Kind.ACQUIRE, MOVE, txid=21)]
    assert sends(settle(dst, acquire)) == [("ctl", mv.ReadyMsg(MOVE))]
    assert ctl.on(mv.ReadyMsg(MOVE)) == [mv.CasMap(MOVE)]
    told = ctl.on(mv.CasDone("m1", ok=True))
    assert sends(told) == [("src", mv.CommitMsg(MOVE)), ("dst", mv.CommitMsg(MOVE))]
    assert records(src.on(mv.CommitMsg(MOVE))) == [mv.MoveRecord(mv.Kind.DROP, MOVE)]
    assert records(dst.on(mv.CommitMsg(MOVE))) == [mv.MoveRecord(mv.Kind.OWN, MOVE)]
    ctl.on(mv.AckMsg("m1", "src"))
    end = ctl.on(mv.AckMsg("m1", "dst"))
    assert records(end) == [mv.MoveRecord(mv.Kind.END, MOVE, committed=True)]
    assert settle(ctl, end) == [mv.Done("m1", True)]


def test_a_failed_cas_aborts() -> None:
    ctl = mv.MoveController("ctl", SETTINGS)
    settle(ctl, ctl.on(mv.StartMove(MOVE)))
    ctl.on(mv.ReadyMsg(MOVE))
    abort = ctl.on(mv.CasDone("m1", ok=False))
    assert records(abort) == [mv.MoveRecord(mv.Kind.ABORT, MOVE)]
    assert sends(settle(ctl, abort)) == [("src", mv.CancelMsg(MOVE)), ("dst", mv.CancelMsg(MOVE))]


def test_a_copy_that_never_gets_ready_aborts() -> None:
    ctl = mv.MoveController("ctl", SETTINGS)
    out = settle(ctl, ctl.on(mv.StartMove(MOVE)))
    for _ in range(SETTINGS.copy_ticks_max):
        tick = next(a.event for a in out if isinstance(a, mv.Schedule))
        out = ctl.on(tick)
    assert records(out) == [mv.MoveRecord(mv.Kind.ABORT, MOVE)]


def test_controller_restart_reads_the_map() -> None:
    begin = (mv.MoveRecord(mv.Kind.BEGIN, MOVE),)
    committed = mv.MoveController("ctl", SETTINGS).on(mv.Recover(begin, ((7, "dst"),)))
    assert sends(committed) == [("src", mv.CommitMsg(MOVE)), ("dst", mv.CommitMsg(MOVE))]
    undecided = mv.MoveController("ctl", SETTINGS).on(mv.Recover(begin, ((7, "src"),)))
    assert records(undecided) == [mv.MoveRecord(mv.Kind.ABORT, MOVE)]


def test_source_restart_after_handoff_stays_fenced_and_asks() -> None:
    src = mv.MoveSource("src", SETTINGS)
    out = src.on(mv.Recover((mv.MoveRecord(mv.Kind.HANDOFF, MOVE, txid=5),)))
    assert src.fenced() == [7]
    assert sends(out) == [("dst", mv.HandoffMsg(MOVE, 5)), ("ctl", mv.QueryMsg(MOVE, "src"))]
    cancel = src.on(mv.CancelMsg(MOVE))
    assert records(cancel) == [mv.MoveRecord(mv.Kind.CANCEL, MOVE)]
    assert sends(settle(src, cancel)) == [("ctl", mv.AckMsg("m1", "src"))]
    assert src.fenced() == []


def test_target_restart_rules() -> None:
    dst = mv.MoveTarget("dst", SETTINGS)
    out = dst.on(mv.Recover((mv.MoveRecord(mv.Kind.ACQUIRE, MOVE, txid=5),)))
    assert sends(out) == [("ctl", mv.ReadyMsg(MOVE))]  # in doubt: ready, and asking
    lost = mv.MoveTarget("dst", SETTINGS).on(mv.StagingLost(MOVE))
    assert records(lost) == [mv.MoveRecord(mv.Kind.DISCARD, MOVE)]
    assert sends(lost) == [("ctl", mv.FailedMsg("m1", "dst"))]


def test_presumed_abort_for_a_move_the_controller_does_not_know() -> None:
    ctl = mv.MoveController("ctl", SETTINGS)
    assert sends(ctl.on(mv.QueryMsg(MOVE, "src"))) == [("src", mv.CancelMsg(MOVE))]
    assert sends(ctl.on(mv.ReadyMsg(MOVE))) == [("dst", mv.CancelMsg(MOVE))]
