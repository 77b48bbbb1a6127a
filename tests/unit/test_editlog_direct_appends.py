"""An edits segment's flushes written direct by the kernel (``editlog/direct_appends.py``):
each flush one aligned direct write with ``RWF_DSYNC`` through Linux AIO, rewriting the
segment's last partial block; what the segment holds is exactly what a buffered write of
every flush would leave, across preallocation steps (whose zeros the I/O thread writes),
segment rolls, and a file system or kernel that refuses direct writes."""

from __future__ import annotations

import asyncio
import errno
import itertools
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from xdfs.common import aio, files
from xdfs.editlog import segments
from xdfs.editlog.framing import SEGMENT_HEADER_BYTES
from xdfs.editlog.segments import (
    FileJournal,
    read_segment_records,
    segment_index,
    segment_name,
)
from xdfs.errors import StorageError
from xdfs.namenode.editlog.codec import encode_record
from xdfs.namenode.editlog.editlog import EditLog, read_dir_edits
from xdfs.namenode.namespace.ops import LAYOUT_VERSION, MkdirOp

STEP_BYTES = 4 * aio.ALIGN  # a small preallocation step: flushes cross it often

pytestmark = pytest.mark.skipif(not aio.O_DIRECT, reason="Linux's O_DIRECT and AIO")


def record(txid: int, name_bytes: int = 20) -> bytes:
    name = "d" * max(1, name_bytes - len(str(txid))) + str(txid)
    return encode_record(txid, MkdirOp(f"/{name}", 100 + txid, 0o755, "alice", "staff", txid))


class Kernel:
    """The direct writes the journal hands to the kernel (and hands them on)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.writes: list[tuple[int, int]] = []  # (offset, length) of each direct write
        self.refuse = False
        start_calling = aio.KernelSyncs.start_calling

        def recording_start(kernel: aio.KernelSyncs, requests: Any, done: Any) -> None:
            for _opcode, _fd, _address, count, offset, flags in requests:
                assert flags & files.RWF_DSYNC, "a direct append must carry RWF_DSYNC"
                assert offset % aio.ALIGN == 0 and count % aio.ALIGN == 0
                self.writes.append((offset, count))
            if self.refuse:  # refused as the kernel's completion would say it, a turn later
                asyncio.get_running_loop().call_soon(done, [-errno.EINVAL] * len(requests))
                return
            start_calling(kernel, requests, done)

        monkeypatch.setattr(aio.KernelSyncs, "start_calling", recording_start)


@pytest.fixture
def kernel(monkeypatch: pytest.MonkeyPatch) -> Kernel:
    monkeypatch.setattr(segments, "honours_dsync_writes", lambda path: True)
    return Kernel(monkeypatch)


@pytest.fixture
async def journal(tmp_path: Path) -> AsyncIterator[FileJournal]:
    j = FileJournal(tmp_path, LAYOUT_VERSION, preallocate_bytes=STEP_BYTES)
    yield j
    await j.close()


def records_on_disk(current: Path, start: int, end: int) -> list[bytes]:
    data, offsets = read_segment_records(current, start, end, layout_version=LAYOUT_VERSION)
    return [bytes(data[a:b]) for a, b in itertools.pairwise(offsets)]


async def test_flushes_go_direct_and_the_segment_holds_every_record(
    tmp_path: Path, kernel: Kernel, journal: FileJournal
) -> None:
    await journal.start_segment(1)
    written: list[bytes] = []
    end = SEGMENT_HEADER_BYTES
    for txid in range(1, 41):  # records of ~60-300 bytes: most flushes end mid-block
        rec = record(txid, name_bytes=20 + (txid * 37) % 240)
        await journal.write(rec, txid, txid)
        written.append(rec)
        end += len(rec)
    assert kernel.writes, "no flush went direct"
    # each direct write starts at the block holding the segment's end before it
    assert all(offset <= SEGMENT_HEADER_BYTES + STEP_BYTES * 4 for offset, _ in kernel.writes)
    assert records_on_disk(tmp_path, 1, 40) == written
    path = tmp_path / segment_name(1)
    with path.open("rb") as f:  # past the last record: the preallocated zeros, untouched
        f.seek(end)
        assert set(f.read()) <= {0}
    await journal.finalize_segment(1, 40)
    assert path.with_name(segment_name(1, 40)).stat().st_size == end
    assert [(s.start, s.end) for s in segment_index(tmp_path)] == [(1, 40)]


async def test_a_flush_past_the_preallocated_zeros_goes_through_the_thread(
    tmp_path: Path, kernel: Kernel, journal: FileJournal
) -> None:
    await journal.start_segment(1)
    big = [record(txid, name_bytes=200) for txid in range(1, 101)]
    batch = b"".join(big[:70])
    assert len(batch) > STEP_BYTES
    await journal.write(batch, 1, 70)  # past the first step: zeros first, in the thread
    assert kernel.writes == []
    for txid in range(71, 101):
        await journal.write(big[txid - 1], txid, txid)
    assert kernel.writes, "later flushes inside the new zeros go direct"
    assert records_on_disk(tmp_path, 1, 100) == big


async def test_a_new_segment_starts_its_tail_from_its_own_header(
    tmp_path: Path, kernel: Kernel, journal: FileJournal
) -> None:
    await journal.start_segment(1)
    first = [record(txid) for txid in range(1, 4)]
    for txid, rec in enumerate(first, 1):
        await journal.write(rec, txid, txid)
    await journal.finalize_segment(1, 3)
    await journal.start_segment(4)
    second = [record(txid) for txid in range(4, 9)]
    for txid, rec in enumerate(second, 4):
        await journal.write(rec, txid, txid)
    assert records_on_disk(tmp_path, 1, 3) == first
    assert records_on_disk(tmp_path, 4, 8) == second


async def test_a_refused_direct_write_falls_back_to_the_thread_for_good(
    tmp_path: Path, kernel: Kernel, journal: FileJournal, caplog: pytest.LogCaptureFixture
) -> None:
    kernel.refuse = True
    await journal.start_segment(1)
    recs = [record(txid) for txid in range(1, 6)]
    with caplog.at_level("INFO", logger="xdfs.editlog"):
        for txid, rec in enumerate(recs, 1):
            await journal.write(rec, txid, txid)
    assert len(kernel.writes) == 1, "refused once, then never tried again"
    assert "flushes through the I/O thread from now on" in caplog.text
    assert records_on_disk(tmp_path, 1, 5) == recs


async def test_a_file_system_without_direct_io_is_written_through_the_thread(
    tmp_path: Path, kernel: Kernel, monkeypatch: pytest.MonkeyPatch, journal: FileJournal
) -> None:
    real_open = os.open

    def no_direct(path: Any, flags: int, *args: Any) -> int:
        if flags & aio.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", no_direct)
    await journal.start_segment(1)
    recs = [record(txid) for txid in range(1, 4)]
    for txid, rec in enumerate(recs, 1):
        await journal.write(rec, txid, txid)
    assert kernel.writes == []
    assert records_on_disk(tmp_path, 1, 3) == recs


async def test_a_failed_direct_write_is_a_storage_error_and_writes_nothing_more(
    tmp_path: Path, kernel: Kernel, monkeypatch: pytest.MonkeyPatch, journal: FileJournal
) -> None:
    await journal.start_segment(1)
    await journal.write(record(1), 1, 1)

    def failing_start(_kernel: aio.KernelSyncs, requests: Any, done: Any) -> None:
        asyncio.get_running_loop().call_soon(done, [-errno.EIO])

    monkeypatch.setattr(aio.KernelSyncs, "start_calling", failing_start)
    with pytest.raises(StorageError, match=r"write to .* failed at byte \d+: Input/output"):
        await journal.write(record(2), 2, 2)
    assert records_on_disk(tmp_path, 1, 2) == [record(1)]


async def test_a_write_whose_waiter_is_cancelled_still_moves_the_end_when_it_lands(
    tmp_path: Path, kernel: Kernel, journal: FileJournal
) -> None:
    await journal.start_segment(1)
    first = asyncio.ensure_future(journal.write(record(1), 1, 1))
    await asyncio.sleep(0)  # its first step hands it to the kernel
    assert kernel.writes and not first.done()
    first.cancel()
    await journal.write(record(2), 2, 2)  # after the first lands, not over it
    assert records_on_disk(tmp_path, 1, 2) == [record(1), record(2)]


async def test_the_edits_logs_waiters_are_answered_in_the_kernels_completion(
    tmp_path: Path, kernel: Kernel, monkeypatch: pytest.MonkeyPatch, journal: FileJournal
) -> None:
    """A flush written direct tells its waiters from the reaping of the write itself: no
    loop turn between (each turn is a round of frames read on every connection)."""
    reaping: list[bool] = []
    start_calling = aio.KernelSyncs.start_calling  # (the recording one)

    def marking_start(kernel_: aio.KernelSyncs, requests: Any, done: Any) -> None:
        def reaped(results: list[int]) -> None:
            reaping.append(True)
            try:
                done(results)
            finally:
                reaping.pop()
        start_calling(kernel_, requests, reaped)

    monkeypatch.setattr(aio.KernelSyncs, "start_calling", marking_start)
    log = EditLog([journal])
    await log.open_for_write(1)
    told: list[tuple[int, bool]] = []

    def telling(txid: int) -> Callable[[BaseException | None], None]:
        return lambda _error: told.append((txid, bool(reaping)))

    ops = [MkdirOp(f"/d{txid}", 100 + txid, 0o755, "alice", "staff", txid)
           for txid in range(1, 6)]
    for op in ops:
        appended = log.append(op)
        log.when_synced(appended, telling(appended))
        await log.sync(appended)
    assert told == [(txid, True) for txid in range(1, 6)]
    assert len(kernel.writes) == 5
    await log.close()
    assert [edit[1] for edit in read_dir_edits(tmp_path, 1)] == ops
