"""The asyncio EditLog: group commit, double buffering, back-pressure, rolls, failures."""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from xdfs.common.faults import FAULTS
from xdfs.editlog.segments import (
    EDITS_PREALLOCATE_BYTES,
    FileJournal,
    SegmentReader,
    segment_index,
    segment_name,
)
from xdfs.errors import StorageError
from xdfs.namenode.editlog.editlog import EditLog, EditLogSettings, read_edits
from xdfs.namenode.image.storage import StorageDirectory
from xdfs.namenode.namespace.ops import LAYOUT_VERSION, MkdirOp, Op
from xdfs.testing.poll import eventually


def op(i: int) -> Op:
    return MkdirOp(f"/d{i}", 10 + i, 0o755, "alice", "staff", i)


@pytest.fixture(autouse=True)
def _disarm() -> Iterator[None]:
    yield
    FAULTS.disarm()


@pytest.fixture
def sds(tmp_path: Path) -> Iterator[list[StorageDirectory]]:
    dirs = [StorageDirectory(tmp_path / f"name{i}") for i in range(2)]
    for d in dirs:
        d.format("CID", 1, 1)
    yield dirs
    for d in dirs:
        d.unlock()


def is_full(log: EditLog) -> bool:
    return log._buffer.is_full


def names(sd: StorageDirectory) -> list[str]:
    return [s.name for s in segment_index(sd.current)]


async def test_append_sync_close_and_read_back(sds: list[StorageDirectory]) -> None:
    log = EditLog.for_storage(sds)
    await log.open_for_write(1)
    assert log.current_segment_start == 1
    txids = [log.append(op(i)) for i in range(1, 11)]
    assert txids == list(range(1, 11))
    assert (log.last_txid, log.synced_txid) == (10, 0)
    await log.sync(5)
    assert log.synced_txid == 10  # the one flush took everything buffered
    await log.close()
    for sd in sds:
        assert names(sd) == [segment_name(1, 10)]
        assert sd.read_seen_txid() == 10
    assert [o for _, o in read_edits(sds, 1)] == [op(i) for i in range(1, 11)]
    files = [(sd.current / segment_name(1, 10)).read_bytes() for sd in sds]
    assert files[0] == files[1]
    with pytest.raises(StorageError, match="not open"):
        log.append(op(11))


async def test_group_commit_many_appenders_few_fsyncs(sds: list[StorageDirectory]) -> None:
    fsyncs: list[str] = []
    FAULTS.arm("editlog.before_fsync", fsyncs.append)
    log = EditLog.for_storage(sds[:1])
    await log.open_for_write(1)
    fsyncs.clear()  # only count the flushes
    acked: list[int] = []

    async def handler(i: int) -> None:
        await log.wait_for_room()
        await asyncio.sleep(0)  # arrive in an interleaved order
        txid = log.append(op(i))
        await log.sync(txid)
        assert log.synced_txid >= txid
        acked.append(txid)

    await asyncio.gather(*(handler(i) for i in range(200)))
    assert sorted(acked) == list(range(1, 201))
    assert log.synced_txid == 200
    assert 1 <= len(fsyncs) < 200 / 2, len(fsyncs)
    assert log.flush_count == len(fsyncs)
    await log.close()
    assert [t for t, _ in read_edits(sds[:1], 1)] == list(range(1, 201))


class GatedJournal:
    """A journal whose writes wait for a gate: shows appends continuing during a flush."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.writes: list[tuple[int, int, int]] = []
        self.entered = asyncio.Event()
        self.fail_with: BaseException | None = None

    @property
    def name(self) -> str:
        return "gated"

    async def recover_unfinalized(self, next_txid: int) -> None:
        pass

    async def start_segment(self, first_txid: int) -> None:
        pass

    def start_write(self, data: bytes | bytearray, first_txid: int, last_txid: int,
                    done: Callable[[BaseException | None], None]) -> bool:
        return False  # every write through the gate

    async def write(self, data: bytes | bytearray, first_txid: int, last_txid: int) -> None:
        self.entered.set()
        await self.gate.wait()
        if self.fail_with is not None:
            raise self.fail_with
        self.writes.append((first_txid, last_txid, len(data)))

    async def finalize_segment(self, first_txid: int, last_txid: int) -> None:
        pass

    async def close(self) -> None:
        pass

    def finalized_ranges(self) -> list[tuple[int, int]]:
        return []


async def test_appends_go_to_the_other_buffer_during_a_flush() -> None:
    journal = GatedJournal()
    log = EditLog([journal])
    await log.open_for_write(1)
    log.append(op(1))
    first = asyncio.create_task(log.sync(1))
    await journal.entered.wait()
    # the flush of txid 1 is in progress; appends keep going
    assert log._buffer.sync_in_progress and log._buffer.ready_bytes > 0
    for i in range(2, 6):
        log.append(op(i))
        assert log._buffer.current_bytes > 0
    later = asyncio.create_task(log.sync(5))
    await asyncio.sleep(0.01)
    assert not first.done() and not later.done() and log.synced_txid == 0
    journal.gate.set()
    await asyncio.gather(first, later)
    assert journal.writes[0][:2] == (1, 1) and journal.writes[1][:2] == (2, 5)
    assert log.synced_txid == 5
    await log.close()


async def test_a_cancelled_waiter_leaves_the_others_of_its_flush_waiting() -> None:
    """Cancelling a waiter must neither release the others of its flush before the sync
    nor fail them (as it would if they shared what they await with it)."""
    journal = GatedJournal()
    log = EditLog([journal])
    await log.open_for_write(1)
    log.append(op(1))
    first = asyncio.create_task(log.sync(1))
    await journal.entered.wait()  # txid 1 is being written
    for i in range(2, 5):
        log.append(op(i))
    in_flush = asyncio.create_task(log.sync(1))
    waiters = [asyncio.create_task(log.sync(t)) for t in (2, 3, 4)]
    await asyncio.sleep(0.01)
    in_flush.cancel()
    waiters[1].cancel()
    await asyncio.sleep(0.01)
    assert not any(t.done() for t in (first, waiters[0], waiters[2]))  # nothing synced
    journal.gate.set()
    await asyncio.gather(first, waiters[0], waiters[2])
    assert log.synced_txid == 4
    for cancelled in (in_flush, waiters[1]):
        with pytest.raises(asyncio.CancelledError):
            await cancelled
    await log.close()


async def test_close_while_its_caller_handles_an_exception(
    sds: list[StorageDirectory],
) -> None:
    """A BackupNode closes its log while it handles EditsPurged: close must not raise that
    exception again (the compiled build did, from a finally block that awaited)."""
    log = EditLog.for_storage(sds)
    await log.open_for_write(1)
    log.append(op(1))
    await log.sync()
    try:
        raise KeyError("being handled")
    except KeyError:
        await log.close()
    assert log.state == "closed"
    assert [(t, o) for t, o in read_edits(sds, 1)] == [(1, op(1))]


async def test_wait_for_room_is_back_pressure() -> None:
    journal = GatedJournal()
    log = EditLog([journal], EditLogSettings(edits_buffer_bytes=200))
    await log.open_for_write(1)
    i = 0
    while not is_full(log):
        i += 1
        log.append(op(i))
    full_at = i
    waiter = asyncio.create_task(log.wait_for_room())
    await journal.entered.wait()  # the full buffer started flushing (swap made room)
    await asyncio.sleep(0)
    assert waiter.done()
    while not is_full(log):  # fill the other half while the flush is stuck
        i += 1
        log.append(op(i))
    blocked = asyncio.create_task(log.wait_for_room())
    await asyncio.sleep(0.01)
    assert not blocked.done()  # both halves are busy: the appender must wait
    journal.gate.set()
    await asyncio.wait_for(blocked, 5)
    await log.sync()
    assert log.synced_txid == i > full_at
    await log.close()


async def test_failing_fsync_is_fatal_and_acks_nothing(
    sds: list[StorageDirectory], caplog: pytest.LogCaptureFixture
) -> None:
    fatal: list[BaseException] = []
    log = EditLog.for_storage(sds, on_fatal=fatal.append)
    await log.open_for_write(1)
    log.append(op(1))
    await log.sync()
    FAULTS.arm("editlog.before_fsync", OSError(5, "Input/output error"), skip=1)
    acked: list[int] = []
    failed: list[BaseException] = []

    async def handler(i: int) -> None:
        txid = log.append(op(i))
        try:
            await log.sync(txid)
            acked.append(txid)
        except StorageError as exc:
            failed.append(exc)

    with caplog.at_level(logging.CRITICAL, logger="xdfs.namenode.editlog"):
        await asyncio.gather(*(handler(i) for i in range(2, 52)))
    assert acked == [] and len(failed) == 50
    assert len(fatal) == 1 and isinstance(fatal[0], StorageError)
    assert "Input/output error" in str(fatal[0])
    [bad_dir] = [str(sd.root) for sd in sds if str(sd.root) in str(fatal[0])]
    assert any(bad_dir in r.getMessage() and r.levelno == logging.CRITICAL
               for r in caplog.records)
    assert log.synced_txid == 1 and log.state == "failed"
    with pytest.raises(StorageError, match="Input/output error"):
        log.append(op(99))
    with pytest.raises(StorageError):
        await log.sync()
    await log.close()  # closes files, finalizes nothing
    assert names(sds[1]) == [segment_name(1)]


async def test_a_vanished_directory_is_fatal_at_roll(sds: list[StorageDirectory]) -> None:
    fatal: list[BaseException] = []
    log = EditLog.for_storage(sds, on_fatal=fatal.append)
    await log.open_for_write(1)
    log.append(op(1))
    await log.sync()
    shutil.rmtree(sds[0].current)  # the disk went away
    log.append(op(2))
    with pytest.raises(StorageError):
        await log.roll()
    assert len(fatal) == 1 and str(sds[0].root) in str(fatal[0])
    assert log.synced_txid == 2  # written and fsynced before the failing finalize
    with pytest.raises(StorageError):
        log.append(op(3))
    await log.close()


async def test_failing_journal_fails_pending_waiters() -> None:
    journal = GatedJournal()
    fatal: list[BaseException] = []
    log = EditLog([journal], on_fatal=fatal.append)
    await log.open_for_write(1)
    log.append(op(1))
    pending = [asyncio.create_task(log.sync(1))]
    await journal.entered.wait()
    log.append(op(2))
    pending.append(asyncio.create_task(log.sync(2)))
    room_log = log
    journal.fail_with = OSError(28, "No space left on device")
    journal.gate.set()
    results = await asyncio.gather(*pending, return_exceptions=True)
    assert all(isinstance(r, StorageError) for r in results)
    assert len(fatal) == 1 and room_log.synced_txid == 0


async def test_sync_callbacks_are_told_after_their_flush_once() -> None:
    """when_synced: the future-free wait of a one-step mutation. A callback hears None
    only once its txid is durable, each exactly once, also those of a later flush."""
    journal = GatedJournal()
    log = EditLog([journal])
    await log.open_for_write(1)
    heard: list[tuple[int, BaseException | None]] = []

    def told(txid: int) -> Callable[[BaseException | None], None]:
        return lambda error: heard.append((txid, error))

    log.when_synced(log.append(op(1)), told(1))
    await journal.entered.wait()  # txid 1 is being written
    for i in (2, 3):
        log.when_synced(log.append(op(i)), told(i))
    await asyncio.sleep(0.01)
    assert heard == []  # nothing is durable yet
    journal.gate.set()
    await eventually(lambda: len(heard) == 3)
    assert heard == [(1, None), (2, None), (3, None)] and log.synced_txid == 3
    log.when_synced(2, told(2))  # already durable: told at once
    assert heard[-1] == (2, None)
    await log.close()


async def test_a_failing_journal_tells_every_callback_its_error() -> None:
    journal = GatedJournal()
    log = EditLog([journal], on_fatal=lambda _error: None)
    await log.open_for_write(1)
    heard: list[BaseException | None] = []
    log.when_synced(log.append(op(1)), heard.append)
    await journal.entered.wait()
    log.when_synced(log.append(op(2)), heard.append)
    journal.fail_with = OSError(5, "Input/output error")
    journal.gate.set()
    await eventually(lambda: len(heard) == 2)
    assert all(isinstance(error, StorageError) for error in heard)  # never a success
    with pytest.raises(StorageError):
        log.when_synced(2, heard.append)  # a failed log takes no new waiter
    assert len(heard) == 2


async def test_the_waiters_of_one_flush_share_a_future_none_cancels_it() -> None:
    journal = GatedJournal()
    log = EditLog([journal])
    await log.open_for_write(1)
    log.append(op(1))
    in_flush = log.synced_future(1)
    await journal.entered.wait()  # txid 1 is being written: its waiter has its own future
    futures = [log.synced_future(log.append(op(i))) for i in (2, 3, 4)]
    assert futures[0] is futures[1] is futures[2] and futures[0] is not in_flush
    assert in_flush is not None and futures[0] is not None
    shared = futures[0]

    async def wait(fut: asyncio.Future[None]) -> None:
        await fut

    waiters = [asyncio.create_task(wait(shared)) for _ in range(3)]
    await asyncio.sleep(0.01)
    waiters[1].cancel()  # one caller gives up: the others still wait for the sync
    await asyncio.sleep(0.01)
    assert not shared.cancelled() and not waiters[0].done() and log.synced_txid == 0
    journal.gate.set()
    await asyncio.gather(in_flush, waiters[0], waiters[2])
    assert log.synced_txid == 4
    with pytest.raises(asyncio.CancelledError):
        await waiters[1]  # cancelled once its flush ended
    assert log.synced_future(4) is None  # durable: nothing to wait for
    next_flush = log.synced_future(log.append(op(5)))
    assert next_flush is not None and next_flush is not shared
    await next_flush
    await log.close()


async def test_a_failing_flush_fails_its_shared_future() -> None:
    journal = GatedJournal()
    log = EditLog([journal], on_fatal=lambda _error: None)
    await log.open_for_write(1)
    log.append(op(1))
    first = log.synced_future(1)
    await journal.entered.wait()
    shared = log.synced_future(log.append(op(2)))
    journal.fail_with = OSError(5, "Input/output error")
    journal.gate.set()
    for fut in (first, shared):
        assert fut is not None
        with pytest.raises(StorageError):
            await fut


async def test_a_raising_callback_does_not_stop_the_syncer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    journal = GatedJournal()
    journal.gate.set()
    log = EditLog([journal])
    await log.open_for_write(1)
    heard: list[BaseException | None] = []

    def broken(_error: BaseException | None) -> None:
        raise RuntimeError("boom")

    with caplog.at_level(logging.ERROR):
        log.when_synced(log.append(op(1)), broken)
        log.when_synced(log.append(op(2)), heard.append)
        await eventually(lambda: heard == [None])
    assert "edits sync callback failed" in caplog.text
    log.append(op(3))
    await log.sync(3)  # the syncer still runs
    await log.close()


async def test_roll_and_auto_roll(sds: list[StorageDirectory]) -> None:
    log = EditLog.for_storage(sds[:1], EditLogSettings(edits_segment_txns_max=10))
    await log.open_for_write(1)
    for i in range(1, 4):
        log.append(op(i))
    assert await log.roll() == (1, 3)
    assert log.current_segment_start == 4
    assert names(sds[0]) == [segment_name(1, 3), segment_name(4)]
    assert sds[0].read_seen_txid() == 3
    assert await log.roll() is None  # empty segment: deleted, not finalized
    assert names(sds[0]) == [segment_name(1, 3), segment_name(4)]
    for i in range(4, 30):  # synced one by one: rolls every 10 txns
        log.append(op(i))
        await log.sync()
    await log.close()
    assert names(sds[0]) == [segment_name(1, 3), segment_name(4, 13), segment_name(14, 23),
                             segment_name(24, 29)]
    assert [t for t, _ in read_edits(sds[:1], 1)] == list(range(1, 30))


async def test_auto_roll_by_bytes(sds: list[StorageDirectory]) -> None:
    log = EditLog.for_storage(sds[:1], EditLogSettings(edits_segment_bytes_max=500))
    await log.open_for_write(1)
    for i in range(1, 41):
        log.append(op(i))
        await log.sync()
    await log.close()
    segs = segment_index(sds[0].current)
    assert len(segs) > 3
    for seg in segs[:-1]:
        size = seg.path.stat().st_size
        assert 500 <= size < 600, (seg.name, size)
    assert [t for t, _ in read_edits(sds[:1], 1)] == list(range(1, 41))


async def test_reopen_after_crash_finalizes_left_segment(sds: list[StorageDirectory]) -> None:
    log = EditLog.for_storage(sds)
    await log.open_for_write(1)
    for i in range(1, 6):
        log.append(op(i))
    await log.sync()
    # crash: no close(); the files stay open in-progress
    for journal in log.journals:
        await journal.close()
    assert names(sds[0]) == [segment_name(1)]
    log2 = EditLog.for_storage(sds)
    with pytest.raises(StorageError, match="already holds txids up to 5"):
        await log2.open_for_write(3)
    log3 = EditLog.for_storage(sds)
    await log3.open_for_write(6)
    for sd in sds:
        assert names(sd) == [segment_name(1, 5), segment_name(6)]
    log3.append(op(6))
    await log3.close()
    assert [t for t, _ in read_edits(sds, 1)] == list(range(1, 7))


async def test_read_cached(sds: list[StorageDirectory]) -> None:
    log = EditLog.for_storage(sds[:1], EditLogSettings(edits_cache_bytes=300))
    await log.open_for_write(1)
    assert log.read_cached(1, 10) == []
    for i in range(1, 21):
        log.append(op(i))
        await log.sync()
    log.append(op(21))  # not synced: never served
    got = log.read_cached(18, 10)
    assert got == [(t, op(t)) for t in (18, 19, 20)]
    assert log.read_cached(20, 1) == [(20, op(20))]
    assert log.read_cached(1, 10) is None  # evicted: read the segments
    assert log.read_cached(22, 10) == []
    await log.close()


async def test_sync_of_already_synced_txid_returns_at_once(
    sds: list[StorageDirectory],
) -> None:
    log = EditLog.for_storage(sds[:1])
    await log.open_for_write(1)
    log.append(op(1))
    await log.sync(1)
    flushes = log.flush_count
    await log.sync(1)
    await log.sync()
    assert log.flush_count == flushes
    await log.close()


async def test_open_needs_a_journal_and_valid_settings() -> None:
    with pytest.raises(StorageError, match="at least one journal"):
        EditLog([])
    from xdfs.errors import ConfigError
    with pytest.raises(ConfigError):
        EditLogSettings(edits_segment_txns_max=0)


def test_settings_from_config() -> None:
    from xdfs.config import XdfsConfig

    settings = EditLogSettings.from_config(XdfsConfig().namenode)
    assert settings.edits_buffer_bytes == 512 * 1024
    assert settings.edits_segment_bytes_max == 64 * 1024 * 1024
    assert settings.edits_segment_txns_max == 1_000_000


def test_file_journal_name_is_the_storage_root(tmp_path: Path) -> None:
    journal = FileJournal(tmp_path / "nn" / "current", LAYOUT_VERSION)
    assert journal.name == str(tmp_path / "nn")


async def test_concurrent_close_and_sync_during_close(sds: list[StorageDirectory]) -> None:
    log = EditLog.for_storage(sds[:1])
    await log.open_for_write(1)
    for i in range(1, 101):
        log.append(op(i))
    waiter = asyncio.create_task(log.sync(100))
    await asyncio.gather(log.close(), log.close(), waiter)
    assert log.state == "closed" and log.synced_txid == 100
    assert names(sds[0]) == [segment_name(1, 100)]
    await log.close()  # idempotent
    # and it can be opened again where it left off
    await log.open_for_write(101)
    log.append(op(101))
    await log.close()
    assert names(sds[0]) == [segment_name(1, 100), segment_name(101, 101)]


async def test_a_namenode_edits_log_preallocates_its_segments(
    sds: list[StorageDirectory],
) -> None:
    """Flushes overwrite zeros written ahead (no size change for fdatasync to write); the
    finalized segment ends with its last record."""
    log = EditLog.for_storage(sds[:1])
    await log.open_for_write(1)
    for i in range(1, 11):
        log.append(op(i))
    await log.sync(10)
    [seg] = segment_index(sds[0].current)
    assert seg.in_progress and seg.path.stat().st_size == EDITS_PREALLOCATE_BYTES
    await log.close()
    [seg] = segment_index(sds[0].current)
    assert (seg.start, seg.end) == (1, 10)
    reader = SegmentReader(seg.path, layout_version=LAYOUT_VERSION, torn_tail="error")
    assert [txid for txid, _, _, _ in reader] == list(range(1, 11))
    assert reader.valid_bytes == seg.path.stat().st_size
