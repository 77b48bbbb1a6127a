"""The keeper's pure rules (xdfs.logservice.rules): liveness from heartbeat age, the
commands heartbeats are answered with (re-replication back to E copies, deletion of copies
nothing needs) and the metadata repairs once copies are complete."""

from __future__ import annotations

import msgspec

from xdfs.log import meta as m
from xdfs.logservice.rules import Forget, KeeperState, MetaRepair
from xdfs.protocol import log as lg
from xdfs.protocol.log import LogSettings, Lsn

DEAD_S = 10.0
A, B, C, D = "a:1", "b:1", "c:1", "d:1"


def closed(ledger_id: int, last: int, *fragments: tuple[int, tuple[str, ...]]) -> m.LedgerInfo:
    return m.LedgerInfo(ledger_id, tuple(m.Fragment(f, n) for f, n in fragments), m.CLOSED,
                        last)


def log_meta(*ledgers: m.LedgerInfo) -> m.LogMeta:
    return m.LogMeta("l", LogSettings(), tuple(ledgers))


def beat(state: KeeperState, node: str, now: float, held: dict[int, tuple[int, int]],
         free: int = 100, copying: tuple[int, ...] = ()) -> list[lg.KeeperCommand]:
    ledgers = [lg.LedgerHeld(i, first, last) for i, (first, last) in held.items()]
    return state.heard(lg.HeartbeatRequest(node, ledgers, list(copying), free, 1000), now)


def keeper() -> KeeperState:
    return KeeperState(DEAD_S, copy_timeout_s=60.0, elected_at=0.0)


def test_a_dead_members_copy_is_made_on_the_spare_with_most_room_then_named() -> None:
    state = keeper()
    meta = log_meta(closed(1, 9, (0, (A, B, C))))
    for node in (A, B, C):
        beat(state, node, 1.0, {1: (0, 9)})
    beat(state, D, 1.0, {}, free=500)
    assert state.plan([meta], 5.0, 5.0) == []
    assert all(beat(state, n, 5.0, {1: (0, 9)}) == [] for n in (A, B)), "nobody is dead yet"
    # C is not heard from again: past dead_after_s it is dead
    for node in (A, B):
        beat(state, node, 12.0, {1: (0, 9)})
    beat(state, D, 12.0, {}, free=500)
    assert state.plan([meta], 12.0, 12.0) == []
    (command,) = beat(state, D, 12.5, {}, free=500)
    assert command == lg.KeeperCommand(lg.REPLICATE, 1, (lg.CopyRange(0, 9, (A, B)),))
    # planning again while the copy runs orders nothing more
    state.plan([meta], 13.0, 13.0)
    assert beat(state, D, 13.5, {1: (0, 4)}, copying=(1,)) == []
    beat(state, D, 14.0, {1: (0, 9)})
    (repair,) = state.plan([meta], 14.0, 14.0)
    assert repair == MetaRepair("l", m.Repair(1, C, D, (0,)))
    assert isinstance(repair, MetaRepair)
    repaired = m.apply_repair(meta, repair.repair)
    assert repaired.ledgers[0].all_nodes() == (A, B, D)
    # C comes back with its old copy: nothing names it there now, it deletes it
    beat(state, C, 20.0, {1: (0, 9)})
    state.plan([repaired], 20.5, 20.5)
    assert beat(state, C, 21.0, {1: (0, 9)}) == [lg.KeeperCommand(lg.DELETE_LEDGER, 1)]


def test_a_keeper_just_elected_declares_nobody_dead_before_hearing_from_them() -> None:
    state = KeeperState(DEAD_S, 60.0, elected_at=100.0)
    meta = log_meta(closed(1, 9, (0, (A, B, C))))
    for node in (A, B, D):
        beat(state, node, 101.0, {1: (0, 9)} if node != D else {})
    state.plan([meta], 105.0, 105.0)  # C not heard yet, but the keeper is 5 s old
    assert beat(state, D, 105.5, {}) == []
    for node in (A, B):
        beat(state, node, 110.5, {1: (0, 9)})
    state.plan([meta], 111.0, 111.0)  # now C had dead_after_s to speak up
    (command,) = beat(state, D, 111.5, {})
    assert command.kind == lg.REPLICATE and command.ledger_id == 1


def test_a_live_member_that_lost_its_copy_gets_it_back_without_a_metadata_change() -> None:
    state = keeper()
    meta = log_meta(closed(1, 9, (0, (A, B, C))), closed(2, 4, (0, (A, B, C))))
    beat(state, A, 1.0, {1: (0, 9), 2: (0, 4)})
    beat(state, B, 1.0, {1: (0, 9), 2: (0, 4)})
    beat(state, C, 1.0, {2: (0, 2)})  # came back empty of 1, short of 2
    assert state.plan([meta], 2.0, 2.0) == []
    commands = beat(state, C, 2.5, {2: (0, 2)})
    assert commands == [lg.KeeperCommand(lg.REPLICATE, 1, (lg.CopyRange(0, 9, (A, B)),)),
                        lg.KeeperCommand(lg.REPLICATE, 2, (lg.CopyRange(0, 4, (A, B)),))]
    beat(state, C, 3.0, {1: (0, 9), 2: (0, 4)})
    assert state.plan([meta], 3.0, 3.0) == []  # done: no repair, nothing more ordered
    assert beat(state, C, 3.5, {1: (0, 9), 2: (0, 4)}) == []


def test_fragments_are_copied_from_their_own_nodes_and_open_ledgers_left_alone() -> None:
    state = keeper()
    # entries 0-4 went to A,B,C; from 5 on C was replaced by D (an ensemble change)
    ledger = closed(1, 9, (0, (A, B, C)), (5, (A, B, D)))
    open_one = m.LedgerInfo(2, (m.Fragment(0, (A, B, C)),))
    beat(state, A, 11.0, {1: (0, 9), 2: (0, 3)})
    beat(state, B, 11.0, {1: (0, 9)})
    beat(state, D, 11.0, {1: (5, 9)})
    beat(state, "e:1", 11.0, {})
    state.plan([log_meta(ledger, open_one)], 11.0, 11.0)  # C dead: its entries 0-4 lost
    (command,) = beat(state, "e:1", 11.5, {})
    assert command == lg.KeeperCommand(lg.REPLICATE, 1, (lg.CopyRange(0, 4, (A, B)),))
    assert beat(state, B, 11.5, {1: (0, 9)}) == []  # open ledger 2: the writer's business


def test_a_ledger_written_short_of_E_nodes_gets_its_missing_copy() -> None:
    state = keeper()
    meta = log_meta(closed(1, 9, (0, (A, B))))
    for node in (A, B):
        beat(state, node, 1.0, {1: (0, 9)})
    beat(state, C, 1.0, {})
    state.plan([meta], 1.0, 1.0)
    (command,) = beat(state, C, 1.5, {})
    assert command.kind == lg.REPLICATE
    beat(state, C, 2.0, {1: (0, 9)})
    (repair,) = state.plan([meta], 2.0, 2.0)
    assert isinstance(repair, MetaRepair)
    assert m.apply_repair(meta, repair.repair).ledgers[0].all_nodes() == (A, B, C)


def test_reclaimed_ledgers_are_deleted_but_only_from_heartbeats_before_the_read() -> None:
    state = keeper()
    meta = log_meta(closed(1, 9, (0, (A, B, C))), closed(7, 3, (0, (A, B, C))),
                    closed(8, 0, (0, (A, B, C))))
    meta = m.truncate(meta, Lsn(8, 1, 0), Lsn(8, 1, 0))
    meta = m.drop_ledgers(meta, [1, 7, 8])  # reclaimed while A was down
    beat(state, A, 1.0, {1: (0, 9), 7: (0, 3)})
    beat(state, B, 3.0, {1: (0, 9), 8: (0, 0)})  # heard after the metadata was read
    first = state.plan([meta], 3.0, read_at=2.0)
    # B, heard after the read, holds no 7: forgotten there; A's report is older than the
    # records (it may predate the copy): it tells nothing of 8
    forgets = [f for f in first if isinstance(f, Forget)]
    assert forgets == first and Forget("l", 7, (B,)) in forgets
    assert not [f for f in forgets if f.ledger_id == 8]
    assert beat(state, A, 3.5, {1: (0, 9), 7: (0, 3)}) == [
        lg.KeeperCommand(lg.DELETE_LEDGER, 1), lg.KeeperCommand(lg.DELETE_LEDGER, 7)]
    assert beat(state, B, 3.5, {1: (0, 9), 8: (0, 0)}) == []
    # A reports them gone: its part of the released records is forgotten
    beat(state, A, 4.0, {})
    changes = state.plan([meta], 5.0, read_at=5.0)
    assert changes == [Forget("l", 1, (A,)), Forget("l", 7, (A, B)), Forget("l", 8, (A,))]
    for change in changes:
        assert isinstance(change, Forget)
        meta = m.forget_released(meta, change.ledger_id, change.nodes)
    assert all(A not in r.nodes for r in meta.released)


def test_the_keeper_deletes_nothing_the_logs_history_does_not_release() -> None:
    """Issue 37: a ledger's ensemble rewritten in ZooKeeper (or the ledger dropped from
    the list, or a forged release of records above the truncation point) deletes nothing."""
    state = keeper()
    meta = log_meta(closed(1, 9, (0, (A, B, C))), closed(2, 9, (0, (A, B, C))))
    for node in (A, B, C, D):
        beat(state, node, 1.0, {1: (0, 9), 2: (0, 9)} if node != D else {})
    tampered = [
        m.replace_copy(meta, 1, A, D),  # "D replaced A", but D holds nothing
        msgspec.structs.replace(meta, ledgers=meta.ledgers[1:]),  # ledger 1 forgotten
        m.release(msgspec.structs.replace(meta, ledgers=meta.ledgers[1:]),
                  [m.Released(1, (A, B, C), reclaimed=True)]),  # not below the point
    ]
    for now, forged in enumerate(tampered, start=2):
        state.plan([forged], now, read_at=now)
        for node in (A, B, C):
            assert not [c for c in beat(state, node, now + 0.5, {1: (0, 9), 2: (0, 9)})
                        if c.kind == lg.DELETE_LEDGER], (node, forged)
        state.plan([forged], now + 0.7, read_at=now + 0.7)  # heartbeats after the first read
        assert state.notes, "the keeper says what it left alone"


def test_a_ledger_naming_an_unconfigured_node_is_left_alone() -> None:
    state = KeeperState(DEAD_S, copy_timeout_s=60.0, elected_at=0.0,
                        configured=frozenset((A, B, C, D)))
    meta = log_meta(closed(1, 9, (0, (A, B, "evil:666"))))
    for node in (A, B, D):
        beat(state, node, 1.0, {1: (0, 9)} if node != D else {})
    assert state.plan([meta], 12.0, 12.0) == []  # evil:666 "dead": no copy, no repair
    assert any("evil:666" in note for note in state.notes)
    for node in (A, B, D):
        assert beat(state, node, 12.5, {1: (0, 9)} if node != D else {}) == []


def test_a_copy_not_done_in_time_is_ordered_again_and_a_dead_spare_is_replaced() -> None:
    state = KeeperState(DEAD_S, copy_timeout_s=5.0, elected_at=0.0)
    meta = log_meta(closed(1, 9, (0, (A, B, C))))
    for node in (A, B):
        beat(state, node, 11.0, {1: (0, 9)})
    beat(state, D, 11.0, {}, free=900)
    beat(state, "e:1", 11.0, {}, free=100)
    state.plan([meta], 11.0, 11.0)
    assert len(beat(state, D, 11.5, {}, free=900)) == 1
    for node in (A, B):
        beat(state, node, 22.0, {1: (0, 9)})
    beat(state, "e:1", 22.0, {}, free=100)
    state.plan([meta], 22.0, 22.0)  # D went silent: dead; e gets the copy
    (command,) = beat(state, "e:1", 22.5, {})
    assert command.kind == lg.REPLICATE


def test_a_copy_the_node_dropped_is_ordered_again_without_waiting_for_the_timeout() -> None:
    state = keeper()
    meta = log_meta(closed(1, 9, (0, (A, B))))
    for node in (A, B):
        beat(state, node, 1.0, {1: (0, 9)})
    beat(state, C, 1.0, {})
    state.plan([meta], 1.0, 1.0)
    assert len(beat(state, C, 1.5, {})) == 1  # handed over
    state.plan([meta], 1.6, 1.6)
    assert beat(state, C, 2.0, {1: (0, 3)}, copying=(1,)) == []  # copying: wait
    state.plan([meta], 2.1, 2.1)
    assert beat(state, C, 2.5, {1: (0, 3)}) == []  # restarted: forgot the command
    state.plan([meta], 2.6, 2.6)
    (again,) = beat(state, C, 3.0, {1: (0, 3)})
    assert again == lg.KeeperCommand(lg.REPLICATE, 1, (lg.CopyRange(0, 9, (A, B)),))
