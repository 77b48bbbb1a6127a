"""Pure pieces of the BackupNode and the edits replicator: slicing cached records, the
in-memory read of synced edits, segment reads, backoff and the checkpoint rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from xdfs.editlog.framing import record_bounds
from xdfs.editlog.segments import FileJournal, read_segment_records
from xdfs.namenode.editlog.codec import encode_record
from xdfs.namenode.editlog.editlog import EditLog, EditLogSettings, read_edits
from xdfs.namenode.editlog.replay import Backoff, checkpoint_due
from xdfs.namenode.editlog.replicator import CachedEdits
from xdfs.namenode.namespace.ops import LAYOUT_VERSION, MkdirOp


def _op(txid: int) -> MkdirOp:
    return MkdirOp(f"/d{txid}", 1000 + txid, 0o755, "root", "supergroup", txid)


def _records(first: int, last: int) -> list[bytes]:
    return [encode_record(t, _op(t)) for t in range(first, last + 1)]


def test_cached_edits_slice_by_count_and_bytes() -> None:
    records = _records(10, 19)
    data = b"".join(records)
    cached = CachedEdits(10, data, record_bounds(data), "buffer")
    assert cached.last_txid == 19 and cached.holds(10) and not cached.holds(20)
    assert cached.slice(10, 3, 10**6) == (3, b"".join(records[:3]))
    assert cached.slice(17, 100, 10**6) == (3, b"".join(records[7:]))
    one = len(records[0])
    assert cached.slice(12, 100, 2 * one + 1) == (2, b"".join(records[2:4]))
    assert cached.slice(12, 100, 1) == (1, records[2])  # never nothing


async def test_read_cached_frames_spans_flushes_and_honours_limits(tmp_path: Path) -> None:
    current = tmp_path / "current"
    current.mkdir()
    settings = EditLogSettings(edits_cache_bytes=1 << 20)
    log = EditLog([FileJournal(current, LAYOUT_VERSION)], settings)
    await log.open_for_write(1)
    for batch in ((1, 5), (6, 9), (10, 12)):  # three flushes
        for t in range(batch[0], batch[1] + 1):
            log.append(_op(t))
        await log.sync()
    everything = b"".join(_records(1, 12))
    assert log.read_cached_frames(1, 100, 1 << 20) == (12, everything)
    count, data = log.read_cached_frames(4, 5, 1 << 20)  # type: ignore[misc]
    assert (count, data) == (5, b"".join(_records(4, 8)))
    assert log.read_cached_frames(13, 10, 1 << 20) == (0, b"")
    one = len(_records(1, 1)[0])
    count, _ = log.read_cached_frames(1, 100, 3 * one)  # type: ignore[misc]
    assert count == 3
    assert list(log.finalized_segments) == []
    await log.roll()
    assert list(log.finalized_segments) == [(1, 12)]
    log.forget_segments_before(13)
    assert list(log.finalized_segments) == []
    await log.close()


async def test_read_segment_records_of_finalized_and_open_segments(tmp_path: Path) -> None:
    current = tmp_path / "current"
    current.mkdir()
    log = EditLog([FileJournal(current, LAYOUT_VERSION)])
    await log.open_for_write(1)
    for t in range(1, 8):
        log.append(_op(t))
    await log.roll()
    for t in range(8, 11):
        log.append(_op(t))
    await log.sync()
    data, bounds = read_segment_records(current, 1, 7, layout_version=LAYOUT_VERSION)
    assert data == b"".join(_records(1, 7)) and len(bounds) == 8
    # the open segment, up to txid 9
    data, bounds = read_segment_records(current, 8, 9, layout_version=LAYOUT_VERSION)
    assert data == b"".join(_records(8, 9))
    with (current / "edits_inprogress_0000000000000000008").open("ab") as f:
        f.write(_records(11, 11)[0][:7])  # a record being written: not yet readable
    data, _ = read_segment_records(current, 8, 100, layout_version=LAYOUT_VERSION)
    assert data == b"".join(_records(8, 10))
    assert [t for t, _ in read_edits([tmp_path], 1, 10)] == list(range(1, 11))
    await log.close()


def test_backoff_doubles_to_its_cap_and_resets() -> None:
    backoff = Backoff(0.05, 0.3)
    assert [backoff.next_s() for _ in range(5)] == [0.05, 0.1, 0.2, 0.3, 0.3]
    backoff.reset()
    assert backoff.next_s() == 0.05


@pytest.mark.parametrize(("now", "synced", "image", "due"), [
    (100.0, 10, 10, False),  # nothing new to save, however long ago
    (100.0, 11, 10, True),  # by time
    (5.0, 11, 10, False),
    (5.0, 1010, 10, True),  # by transactions
])
def test_checkpoint_rule(now: float, synced: int, image: int, due: bool) -> None:
    assert checkpoint_due(now_s=now, last_checkpoint_s=0.0, synced_txid=synced,
                          image_txid=image, period_s=60.0, txns=1000) is due
