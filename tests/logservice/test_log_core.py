"""The pure cores of the log service: LSN order, the record format, the metadata rules
(fencing, rotation, ensemble change, truncation), ack-quorum accounting and recovery."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from xdfs.errors import (
    BadRecord,
    InvalidArgument,
    LogFenced,
    LsnOutOfRange,
    NotEnoughStorageNodes,
)
from xdfs.log import meta as m
from xdfs.log.record import decode_entry, encode_entry
from xdfs.protocol.log import LogSettings, Lsn, Record
from xdfs.quorum.calls import QuorumCall

NODES = ("a:1", "b:1", "c:1")


def test_lsns_order_by_ledger_then_entry_then_batch_index() -> None:
    assert Lsn(1, 9, 9) < Lsn(2, 0, 0) < Lsn(2, 0, 1) < Lsn(2, 1, 0)
    assert Lsn.parse("3:4:5") == Lsn(3, 4, 5) and str(Lsn(3, 4, 5)) == "3:4:5"
    for bad in ("1:2", "a:b:c", "1:2:-3", ""):
        with pytest.raises(BadRecord):
            Lsn.parse(bad)


def test_records_round_trip_with_key_payload_and_headers() -> None:
    batch = [Record(b"p" * 1000, b"key", (("trace", b"1"), ("\u00e9", b""))), Record(b"")]
    assert decode_entry(encode_entry(batch)) == batch


@pytest.mark.parametrize("damage", [
    lambda d: d[:-1],  # short
    lambda d: d + b"x",  # trailing bytes
    lambda d: d[:4] + b"\x07" + d[5:],  # unknown magic
    lambda d: d[:5] + b"\x80" + d[6:],  # unknown attribute bit
    lambda d: d[:6] + b"\x7f\xff\xff\xff" + d[10:],  # absurd key length
])
def test_malformed_entries_are_refused_with_a_typed_error(damage) -> None:
    data = encode_entry([Record(b"payload", b"k", (("h", b"v"),))])
    with pytest.raises(BadRecord):
        decode_entry(damage(data))


def test_records_with_undefined_attributes_or_none_are_refused() -> None:
    with pytest.raises(BadRecord):
        encode_entry([Record(b"x", attributes=1)])
    with pytest.raises(BadRecord):
        encode_entry([])


def verdict(call: QuorumCall[int]) -> tuple[bool, bool]:
    return call.succeeded, call.hopeless


def test_ack_quorum_accounting_e3_w3_a2() -> None:
    call: QuorumCall[int] = QuorumCall.of(NODES, needed=2)
    call.succeed("a:1", 5)
    assert verdict(call) == (False, False)
    call.fail("b:1", OSError("down"))
    assert verdict(call) == (False, False)  # c can still make it
    call.succeed("c:1", 5)
    assert verdict(call) == (True, False)
    lost: QuorumCall[int] = QuorumCall.of(NODES, needed=2)
    lost.fail("a:1", OSError())
    lost.fail("b:1", OSError())
    assert verdict(lost) == (False, True)


def new_log(**settings: int) -> m.LogMeta:
    return m.LogMeta("l", m.check_settings(LogSettings(**settings)))


def test_settings_need_ack_le_write_eq_ensemble() -> None:
    for bad in (dict(ack_quorum=4), dict(ack_quorum=0), dict(write_quorum=2),
                dict(ledger_entries_max=0)):
        with pytest.raises(InvalidArgument):
            new_log(**bad)


def test_a_new_writer_fences_the_last_two_unclosed_ledgers_and_the_old_one_is_refused() -> None:
    meta, fence = m.open_writer(new_log(), "w1")
    assert fence == [] and meta.writer_epoch == 1
    meta = m.add_ledger(meta, 1, 1, NODES, 0)
    meta = m.close_ledger(meta, 1, 1, 9)
    meta = m.add_ledger(meta, 1, 2, NODES, 0)
    meta2, fence = m.open_writer(meta, "w2")
    assert fence == [2] and meta2.writer_epoch == 2
    # a crash between close and add leaves two unclosed at most; both are fenced
    unclosed = m.LogMeta("l", LogSettings(), (
        m.LedgerInfo(1, (m.Fragment(0, NODES),)), m.LedgerInfo(2, (m.Fragment(0, NODES),)),
        m.LedgerInfo(3, (m.Fragment(0, NODES),))), writer_epoch=4)
    assert m.open_writer(unclosed, "w")[1] == [2, 3]
    stale_changes: list[Callable[[m.LogMeta], m.LogMeta]] = [
        lambda x: m.close_ledger(x, 1, 2, 5),
        lambda x: m.add_ledger(x, 1, 3, NODES, 0),
        lambda x: m.change_ensemble(x, 1, 2, 3, NODES[:2])]
    for stale in stale_changes:
        with pytest.raises(LogFenced):
            stale(meta2)


def test_only_the_last_ledger_is_open_and_ids_increase() -> None:
    meta, _ = m.open_writer(new_log(), "w")
    meta = m.add_ledger(meta, 1, 5, NODES, 0)
    with pytest.raises(InvalidArgument):
        m.add_ledger(meta, 1, 6, NODES, 0)  # 5 still open
    meta = m.close_ledger(meta, 1, 5, 3)
    with pytest.raises(InvalidArgument):
        m.add_ledger(meta, 1, 4, NODES, 0)
    with pytest.raises(InvalidArgument):
        m.close_ledger(meta, 1, 5, 4)  # closed at 3 already
    assert m.close_ledger(meta, 1, 5, 3) == meta


def test_ensemble_change_appends_a_fragment_and_keeps_the_ack_quorum() -> None:
    meta, _ = m.open_writer(new_log(), "w")
    meta = m.add_ledger(meta, 1, 1, NODES, 0)
    meta = m.change_ensemble(meta, 1, 1, 10, ("a:1", "c:1", "d:1"))
    info = meta.ledgers[0]
    assert info.nodes_of(9) == NODES and info.nodes_of(10) == ("a:1", "c:1", "d:1")
    assert set(info.all_nodes()) == {"a:1", "b:1", "c:1", "d:1"}
    with pytest.raises(NotEnoughStorageNodes):
        m.change_ensemble(meta, 1, 1, 12, ("a:1",))
    moved = m.replace_copy(meta, 1, "b:1", "e:1")
    assert moved.ledgers[0].nodes_of(0) == ("a:1", "e:1", "c:1")


def test_rotation_by_entries_bytes_or_age() -> None:
    s = LogSettings(ledger_entries_max=10, ledger_bytes_max=100, ledger_age_max_s=5)
    assert not m.should_rotate(9, 99, 4.9, s)
    assert m.should_rotate(10, 0, 0, s) and m.should_rotate(0, 100, 0, s)
    assert m.should_rotate(0, 0, 5, s)


def test_ensembles_degrade_to_the_ack_quorum_but_not_below() -> None:
    s = LogSettings()
    assert m.choose_ensemble(["a", "b", "c", "d"], s, start=1) == ["b", "c", "d"]
    assert m.choose_ensemble(["a", "b"], s) == ["a", "b"]
    with pytest.raises(NotEnoughStorageNodes):
        m.choose_ensemble(["a"], s)


def test_recovery_asks_w_minus_a_plus_one_and_takes_the_highest_end() -> None:
    assert m.recovery_answers_needed(3, 2) == 2
    assert m.recovery_answers_needed(5, 3) == 3
    ends = [m.NodeEnd("a", 7, 6), m.NodeEnd("b", 8, 6)]
    assert m.recovered_end(ends, 0) == 8
    assert m.recovered_end([m.NodeEnd("a", -1, -1)], 0) == -1


def test_the_recovered_tail_ends_at_an_entry_proved_never_acknowledged() -> None:
    """Issue 37's case and BookKeeper's no-such-entry rule, on the pure rules."""
    info = m.LedgerInfo(1, (m.Fragment(0, NODES), m.Fragment(5, ("a:1", "b:1"))))
    a, b = m.NodeEnd("a:1", 9, 7, 0), m.NodeEnd("b:1", 8, 7, 0)
    # the end is on one node only: b gets the copy (from a), no quorum of ends is needed
    assert m.recovered_end([a], 5) == 9 and m.recovery_start([a]) == 8
    assert m.tail_copy(info, b, 8, 9, [a], 1) == m.TailCopy("b:1", 9, 9, ("a:1",))
    assert m.tail_copy(info, a, 8, 9, [a], 1) is None  # holds it already
    fresh = m.NodeEnd("d:1", -1, -1, 0, exists=False)  # a spare: from the tail's start
    assert m.tail_copy(info, fresh, 8, 9, [a], None) == m.TailCopy("d:1", 8, 9, ("a:1",))
    late = m.NodeEnd("c:1", 9, 7, 6)  # its copy starts after the tail: it cannot fill a gap
    assert m.tail_copy(info, late, 5, 9, [a], None) is None
    # an entry nobody answering holds: never acknowledged once W-A+1 of its fragment lack it
    c = m.NodeEnd("c:1", 3, 2, 0)
    assert m.first_missing([c, m.NodeEnd("b:1", 3, 2, 0)], 3, 6) == 4
    assert m.never_acknowledged(info.fragments[0], [c, m.NodeEnd("b:1", 3, 2, 0)], 4, 2)
    assert not m.never_acknowledged(info.fragments[0], [c], 4, 2)
    assert m.tail_parts(info, 3, 9) == [(0, 3, 4), (1, 5, 9)]


def closed_log() -> m.LogMeta:
    meta, _ = m.open_writer(new_log(), "w")
    for ledger_id in (1, 2, 3):
        meta = m.add_ledger(meta, 1, ledger_id, NODES, 0)
        meta = m.close_ledger(meta, 1, ledger_id, 9)
    return meta


def test_truncation_only_moves_forward_and_not_past_the_end() -> None:
    meta = closed_log()
    end = m.end_lsn(meta, None)
    assert end == Lsn(3, 10, 0)
    meta = m.truncate(meta, Lsn(2, 5, 0), end)
    assert m.truncate(meta, Lsn(1, 0, 0), end).truncated_lsn == Lsn(2, 5, 0)
    with pytest.raises(LsnOutOfRange):
        m.truncate(meta, Lsn(3, 11, 0), end)
    with pytest.raises(LsnOutOfRange):
        m.check_read_from(meta, Lsn(2, 4, 0), end)
    m.check_read_from(meta, Lsn(2, 5, 0), end)


def test_reclamation_is_held_back_by_the_slowest_registered_reader() -> None:
    meta = m.truncate(closed_log(), Lsn(3, 0, 0), Lsn(3, 10, 0))
    assert [x.ledger_id for x in m.reclaimable(meta)] == [1, 2]
    held = m.register_reader(meta, "slow", Lsn(1, 5, 0))
    assert m.reclaimable(held) == []
    with pytest.raises(InvalidArgument):
        m.drop_ledgers(held, [1])
    released = m.unregister_reader(held, "slow")
    assert [x.ledger_id for x in m.drop_ledgers(released, [1, 2]).ledgers] == [3]


def test_reclamation_and_repairs_record_the_copies_they_let_go() -> None:
    """The log's own history of obsolete copies (the keeper deletes only those)."""
    meta = m.truncate(closed_log(), Lsn(3, 0, 0), Lsn(3, 10, 0))
    dropped = m.drop_ledgers(meta, [1, 2], {1: ("b:1",), 2: ()})  # 2 deleted everywhere
    assert dropped.released == (m.Released(1, ("b:1",), reclaimed=True),)
    assert m.drop_ledgers(meta, [1]).released == (m.Released(1, NODES, reclaimed=True),)
    repaired = m.replace_copy(dropped, 3, "a:1", "d:1")
    assert repaired.released[-1] == m.Released(3, ("a:1",), reclaimed=False, by="d:1")
    assert m.forget_released(repaired, 1, ["b:1"]).released == repaired.released[1:]
    many = m.release(meta, [m.Released(i, ("a:1",), True) for i in range(m.RELEASED_MAX + 5)])
    assert len(many.released) == m.RELEASED_MAX and many.released[0].ledger_id == 5


def test_a_registered_reader_reads_below_the_truncation_point_from_its_position() -> None:
    end = Lsn(3, 10, 0)
    meta = m.register_reader(m.truncate(closed_log(), Lsn(3, 0, 0), end), "slow", Lsn(1, 5, 0))
    m.check_read_from(meta, Lsn(1, 5, 0), end, "slow")
    m.check_read_from(meta, Lsn(2, 0, 0), end, "slow")
    for lsn, reader in ((Lsn(1, 4, 0), "slow"), (Lsn(1, 5, 0), ""), (Lsn(1, 5, 0), "other")):
        with pytest.raises(LsnOutOfRange):
            m.check_read_from(meta, lsn, end, reader)
