"""Edits segments extended with zeros ahead of their records (FileJournal's preallocation):
the file size stays put while flushes land, finalize and crash recovery cut the zeros off,
and a record torn inside them reads as a torn tail, never as corruption."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from xdfs.editlog.framing import SEGMENT_HEADER_BYTES
from xdfs.editlog.segments import (
    ZEROS_AHEAD,
    FileJournal,
    SegmentReader,
    read_segment_records,
    segment_index,
    segment_name,
)
from xdfs.errors import StorageError
from xdfs.namenode.editlog.codec import encode_record
from xdfs.namenode.namespace.ops import LAYOUT_VERSION, MkdirOp, Op

STEP_BYTES = 4096


def op(i: int) -> Op:
    return MkdirOp(f"/dir{i}", 100 + i, 0o755, "alice", "staff", i)


def journal(current: Path) -> FileJournal:
    current.mkdir(parents=True, exist_ok=True)
    return FileJournal(current, LAYOUT_VERSION, preallocate_bytes=STEP_BYTES)


def txids_of(path: Path, **kwargs: object) -> tuple[SegmentReader, list[int]]:
    reader = SegmentReader(path, layout_version=LAYOUT_VERSION, **kwargs)  # type: ignore[arg-type]
    return reader, [txid for txid, _, _, _ in reader]


def write_open_segment(current: Path, count: int) -> tuple[Path, list[int]]:
    """Txids 1..count in an in-progress segment left open (a crash); the records' offsets
    plus the end offset."""
    j = journal(current)
    j.start_segment_sync(1)
    bounds = [SEGMENT_HEADER_BYTES]
    for txid in range(1, count + 1):
        record = encode_record(txid, op(txid))
        j.write_sync(record)
        bounds.append(bounds[-1] + len(record))
    j.close_sync()
    return current / segment_name(1), bounds


def test_flushes_overwrite_the_zeros_and_extend_a_step_at_a_time(tmp_path: Path) -> None:
    j = journal(tmp_path)
    j.start_segment_sync(1)
    path = tmp_path / segment_name(1)
    assert path.stat().st_size == STEP_BYTES
    end = SEGMENT_HEADER_BYTES
    txid = 0
    while end <= STEP_BYTES:
        txid += 1
        record = encode_record(txid, op(txid))
        j.write_sync(record)
        end += len(record)
        # the size moves only when a flush goes past it, then by whole steps
        assert path.stat().st_size == (STEP_BYTES if end <= STEP_BYTES else 2 * STEP_BYTES)
    j.write_sync(b"".join(encode_record(t, op(t)) for t in range(txid + 1, txid + 200)))
    txid += 199
    assert path.stat().st_size % STEP_BYTES == 0 and path.stat().st_size > 2 * STEP_BYTES
    reader, txids = txids_of(path, torn_tail="allow")
    assert txids == list(range(1, txid + 1))
    assert reader.torn is not None and reader.torn.startswith(ZEROS_AHEAD)
    with pytest.raises(StorageError, match=ZEROS_AHEAD):
        txids_of(path, torn_tail="error")
    finalized = j.finalize_segment_sync(txid)
    assert finalized is not None and finalized.stat().st_size == reader.valid_bytes
    reader, txids = txids_of(finalized, torn_tail="error", expected_end=txid)
    assert txids == list(range(1, txid + 1)) and reader.torn is None


def test_a_crash_leaves_zeros_that_recovery_cuts_off(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path, bounds = write_open_segment(tmp_path, 5)
    assert path.stat().st_size == STEP_BYTES
    with caplog.at_level(logging.INFO, logger="xdfs.editlog"):
        journal(tmp_path).recover_unfinalized_sync(6)
    # every crash leaves the zeros: news, not a warning (a torn record is one, below)
    cuts = [r for r in caplog.records if ZEROS_AHEAD in r.getMessage()]
    assert [r.levelno for r in cuts] == [logging.INFO]
    [seg] = segment_index(tmp_path)
    assert (seg.start, seg.end) == (1, 5) and seg.path.stat().st_size == bounds[-1]
    assert txids_of(seg.path, torn_tail="error")[1] == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("kept", ["half of the record", "two bytes of its head"])
def test_a_record_torn_inside_the_zeros_is_a_torn_tail(
    tmp_path: Path, kept: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The last write reached the disk in part: a prefix of its record, zeros after it."""
    path, bounds = write_open_segment(tmp_path, 4)
    last, end = bounds[-2], bounds[-1]
    cut = (last + end) // 2 if kept == "half of the record" else last + 2
    data = bytearray(path.read_bytes())
    data[cut:end] = bytes(end - cut)
    path.write_bytes(bytes(data))
    reader, txids = txids_of(path, torn_tail="allow")
    assert txids == [1, 2, 3] and reader.valid_bytes == last
    assert reader.torn is not None and f"byte offset {last}" in reader.torn
    with caplog.at_level(logging.INFO, logger="xdfs.editlog"):
        journal(tmp_path).recover_unfinalized_sync(4)
    if kept == "half of the record":  # (two bytes of a head may be zeros: nothing is left)
        assert [r.levelno for r in caplog.records if "truncating" in r.getMessage()] == [
            logging.WARNING]
    assert [(s.start, s.end) for s in segment_index(tmp_path)] == [(1, 3)]


def test_a_bad_record_followed_by_data_is_still_corruption(tmp_path: Path) -> None:
    path, bounds = write_open_segment(tmp_path, 4)
    data = bytearray(path.read_bytes())
    data[bounds[1] + 15] ^= 0x01  # inside txid 2: txids 3 and 4 follow
    path.write_bytes(bytes(data))
    with pytest.raises(StorageError, match="followed by more data"):
        txids_of(path, torn_tail="allow")


def test_the_replicator_reads_an_open_segment_up_to_its_zeros(tmp_path: Path) -> None:
    _, bounds = write_open_segment(tmp_path, 6)
    data, offsets = read_segment_records(tmp_path, 1, 100, layout_version=LAYOUT_VERSION)
    assert len(offsets) == 7 and len(data) == bounds[-1] - SEGMENT_HEADER_BYTES
