"""Double buffer and group-commit bookkeeping (pure)."""

from __future__ import annotations

import pytest

from xdfs.editlog.buffer import DoubleBuffer


def rec(n: int = 10) -> bytes:
    return b"r" * n


def full(buf: DoubleBuffer[str]) -> bool:
    return buf.is_full


def test_append_swap_flush_ranges() -> None:
    buf: DoubleBuffer[str] = DoubleBuffer(100, last_txid=10)
    assert (buf.last_txid, buf.synced_txid, buf.current_range) == (10, 10, None)
    assert not buf.ready_to_flush()
    for txid in (11, 12, 13):
        buf.append(txid, rec())
    assert buf.current_range == (11, 13) and buf.current_bytes == 30
    batch = buf.swap()
    assert (batch.first_txid, batch.last_txid, batch.count, bytes(batch.data)) == (
        11, 13, 3, rec() * 3)
    assert buf.sync_in_progress and buf.flushing_txid == 13 and buf.synced_txid == 10
    # appends continue into the other buffer while the flush runs
    buf.append(14, rec(5))
    assert buf.current_range == (14, 14) and buf.ready_bytes == 30
    assert not buf.ready_to_flush()  # one flush at a time
    assert buf.flush_done() == []
    assert (buf.synced_txid, buf.ready_bytes, buf.sync_in_progress) == (13, 0, False)
    assert buf.ready_to_flush()
    batch = buf.swap()
    assert (batch.first_txid, batch.last_txid) == (14, 14)
    buf.flush_done()
    assert buf.synced_txid == 14 == buf.last_txid


def test_txids_must_be_consecutive() -> None:
    buf: DoubleBuffer[str] = DoubleBuffer(100, last_txid=0)
    buf.append(1, rec())
    with pytest.raises(AssertionError, match="txid 3 appended after 1"):
        buf.append(3, rec())


def test_is_full_is_back_pressure() -> None:
    buf: DoubleBuffer[str] = DoubleBuffer(25, last_txid=0)
    buf.append(1, rec())
    buf.append(2, rec())
    assert not buf.is_full and not buf.needs_flush()  # no one waits, room left
    buf.append(3, rec())
    assert full(buf) and buf.needs_flush()
    buf.swap()
    assert not full(buf)  # the swap made room even before the flush completes


def test_waiters_satisfied_by_the_flush_that_covers_them() -> None:
    buf: DoubleBuffer[str] = DoubleBuffer(1000, last_txid=0)
    for txid in range(1, 6):
        buf.append(txid, rec())
    assert buf.add_waiter(2, "w2") and buf.add_waiter(5, "w5") and buf.add_waiter(1, "w1")
    assert buf.needs_flush()
    buf.swap()  # covers 1..5
    buf.append(6, rec())
    assert buf.add_waiter(6, "w6")
    assert buf.add_waiter(3, "w3")  # in flight: satisfied by this flush
    assert not buf.needs_flush()  # a flush is in progress
    assert buf.flush_done() == ["w1", "w2", "w3", "w5"]
    assert buf.waiter_count == 1 and buf.needs_flush()
    buf.swap()
    assert buf.flush_done() == ["w6"]
    assert not buf.add_waiter(4, "late")  # already synced: nothing to wait for
    assert buf.waiter_count == 0


def test_many_waiters_one_flush_is_group_commit() -> None:
    buf: DoubleBuffer[int] = DoubleBuffer(1 << 20, last_txid=0)
    for txid in range(1, 201):
        buf.append(txid, rec())
        buf.add_waiter(txid, txid)
    buf.swap()
    assert sorted(buf.flush_done()) == list(range(1, 201))


def test_flush_failed_releases_everyone() -> None:
    buf: DoubleBuffer[str] = DoubleBuffer(1000, last_txid=0)
    buf.append(1, rec())
    buf.append(2, rec())
    buf.add_waiter(1, "a")
    buf.add_waiter(2, "b")
    buf.swap()
    assert sorted(buf.flush_failed()) == ["a", "b"]
    assert buf.synced_txid == 0 and buf.waiter_count == 0


def test_wait_beyond_last_is_a_bug() -> None:
    buf: DoubleBuffer[str] = DoubleBuffer(1000, last_txid=0)
    with pytest.raises(AssertionError, match="beyond last"):
        buf.add_waiter(1, "x")


def test_swap_without_data_is_a_bug() -> None:
    buf: DoubleBuffer[str] = DoubleBuffer(1000, last_txid=0)
    with pytest.raises(AssertionError, match="nothing to flush"):
        buf.swap()
