"""Segment files: the validating reader, torn tails vs corruption, FileJournal, read side."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from xdfs.editlog.framing import SEGMENT_HEADER_BYTES, SegmentHeader, decode_segment_header
from xdfs.editlog.segments import (
    FileJournal,
    SegmentInfo,
    SegmentReader,
    scan_segment,
    segment_index,
    segment_name,
    truncate_segment,
)
from xdfs.errors import StorageError
from xdfs.namenode.editlog.codec import encode_record
from xdfs.namenode.editlog.editlog import read_edits
from xdfs.namenode.image.storage import read_seen_txid, write_seen_txid
from xdfs.namenode.namespace.ops import LAYOUT_VERSION, MkdirOp, Op


def op(i: int) -> Op:
    return MkdirOp(f"/dir{i}", 100 + i, 0o755, "alice", "staff", i)


def name_dir_journal(current: Path) -> FileJournal:
    """A journal as the NameNode keeps one: its layout version, and a seen_txid."""
    return FileJournal(current, LAYOUT_VERSION,
                       seen_txid=functools.partial(write_seen_txid, current))


def write_segment(
    current: Path, first: int, count: int, *, finalize: bool = True
) -> tuple[Path, list[int]]:
    """Write txids first..first+count-1; returns the path and each record's start offset."""
    current.mkdir(parents=True, exist_ok=True)
    journal = name_dir_journal(current)
    journal.start_segment_sync(first)
    offsets = []
    pos = SEGMENT_HEADER_BYTES
    for txid in range(first, first + count):
        record = encode_record(txid, op(txid))
        offsets.append(pos)
        pos += len(record)
        journal.write_sync(record)
    if finalize:
        path = journal.finalize_segment_sync(first + count - 1)
        assert path is not None
        return path, offsets
    journal.close_sync()
    return current / segment_name(first), offsets


def read_all(path: Path, **kwargs: object) -> tuple[SegmentReader, list[int]]:
    reader = SegmentReader(path, layout_version=LAYOUT_VERSION, **kwargs)  # type: ignore[arg-type]
    return reader, [txid for txid, _, _, _ in reader]


def test_write_finalize_read(tmp_path: Path) -> None:
    path, _ = write_segment(tmp_path, 5, 10)
    assert path.name == "edits_0000000000000000005-0000000000000000014"
    reader, txids = read_all(path, expected_start=5, expected_end=14)
    assert txids == list(range(5, 15))
    assert reader.torn is None and reader.valid_bytes == path.stat().st_size
    assert read_seen_txid(tmp_path) == 14
    assert [s.name for s in segment_index(tmp_path)] == [path.name]
    assert [o for _, o in read_edits([tmp_path], 5)] == [op(i) for i in range(5, 15)]


def test_empty_in_progress_segment_is_deleted_on_finalize(tmp_path: Path) -> None:
    journal = name_dir_journal(tmp_path)
    journal.start_segment_sync(7)
    assert (tmp_path / segment_name(7)).stat().st_size == SEGMENT_HEADER_BYTES
    assert read_seen_txid(tmp_path) == 6
    assert journal.finalize_segment_sync(6) is None
    assert segment_index(tmp_path) == []


def test_journal_of_another_owner_writes_its_version_and_no_seen_txid(tmp_path: Path) -> None:
    """A JournalNode's FileJournal: its own layout version, no seen_txid file."""
    journal = FileJournal(tmp_path, 7)
    journal.start_segment_sync(1)
    journal.write_sync(encode_record(1, op(1)))
    path = journal.finalize_segment_sync(1)
    assert path is not None and not (tmp_path / "seen_txid").exists()
    assert decode_segment_header(path.read_bytes(), None) == SegmentHeader(7, 1)
    assert [t for t, _, _, _ in SegmentReader(path, layout_version=7)] == [1]
    with pytest.raises(StorageError, match="segment layout version 7, this build reads 1"):
        list(SegmentReader(path, layout_version=LAYOUT_VERSION))


def test_torn_tail_at_every_byte_of_the_last_record(tmp_path: Path) -> None:
    path, offsets = write_segment(tmp_path / "src", 1, 4, finalize=False)
    data = path.read_bytes()
    last_start = offsets[-1]
    for cut in range(last_start, len(data)):
        torn = tmp_path / f"case{cut}" / segment_name(1)
        torn.parent.mkdir()
        torn.write_bytes(data[:cut])
        reader, txids = read_all(torn, expected_start=1, torn_tail="allow")
        assert txids == [1, 2, 3], cut
        assert reader.last_txid == 3 and reader.valid_bytes == last_start, cut
        assert (reader.torn is None) == (cut == last_start), cut
        with pytest.raises(StorageError, match=rf"{torn.name} at byte offset {last_start}") \
                if cut > last_start else _nothing():
            read_all(torn, torn_tail="error")
        truncate_segment(torn, reader.valid_bytes)
        assert torn.stat().st_size == last_start
        assert read_all(torn, torn_tail="error")[1] == [1, 2, 3]


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *a: object) -> None:
        return None


def test_crc_mismatch_in_final_record_is_torn(tmp_path: Path) -> None:
    path, offsets = write_segment(tmp_path, 1, 3, finalize=False)
    data = bytearray(path.read_bytes())
    data[-6] ^= 0xFF  # payload of the last record
    path.write_bytes(bytes(data))
    reader, txids = read_all(path, torn_tail="allow")
    assert txids == [1, 2] and reader.valid_bytes == offsets[-1]
    assert reader.torn is not None and "crc32c mismatch" in reader.torn
    assert f"byte offset {offsets[-1]}" in reader.torn


def test_zero_filled_tail_is_torn(tmp_path: Path) -> None:
    path, _ = write_segment(tmp_path, 1, 3, finalize=False)
    with open(path, "ab") as f:
        f.write(b"\0" * 4096)
    reader, txids = read_all(path, torn_tail="allow")
    assert txids == [1, 2, 3] and reader.torn is not None
    assert reader.valid_bytes == path.stat().st_size - 4096


@pytest.mark.parametrize("which", [0, 1])
def test_flipped_byte_in_a_middle_record_is_corruption(tmp_path: Path, which: int) -> None:
    path, offsets = write_segment(tmp_path, 1, 4, finalize=which == 0)
    data = bytearray(path.read_bytes())
    data[offsets[1] + 15] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(StorageError) as info:
        read_all(path, torn_tail="allow")
    message = str(info.value)
    assert path.name in message and f"byte offset {offsets[1]}" in message
    assert "crc32c mismatch" in message and "followed by more data" in message


def test_txid_gap_inside_a_segment(tmp_path: Path) -> None:
    tmp_path.mkdir(exist_ok=True)
    journal = name_dir_journal(tmp_path)
    journal.start_segment_sync(1)
    journal.write_sync(encode_record(1, op(1)) + encode_record(3, op(3)))
    journal.close_sync()
    path = tmp_path / segment_name(1)
    with pytest.raises(StorageError, match=r"byte offset \d+: txid 3 where 2 was expected"):
        read_all(path, torn_tail="allow")


def test_finalized_name_must_match_content(tmp_path: Path) -> None:
    path, _ = write_segment(tmp_path, 1, 3)
    wrong = tmp_path / segment_name(1, 4)
    path.rename(wrong)
    info = SegmentInfo(1, 4, wrong)
    with pytest.raises(StorageError, match="ends at txid 3, its name says 4"):
        scan_segment(info, layout_version=LAYOUT_VERSION)
    renamed = tmp_path / segment_name(2, 4)
    wrong.rename(renamed)
    with pytest.raises(StorageError, match="header says first txid 1, the name says 2"):
        scan_segment(SegmentInfo(2, 4, renamed), layout_version=LAYOUT_VERSION)


def test_bad_header(tmp_path: Path) -> None:
    path, _ = write_segment(tmp_path, 1, 2, finalize=False)
    data = bytearray(path.read_bytes())
    data[0:8] = b"NOTEDITS"
    path.write_bytes(bytes(data))
    with pytest.raises(StorageError, match="byte offset 0: bad segment magic"):
        read_all(path, torn_tail="allow")
    path.write_bytes(bytes(data[:7]))  # a crash while creating it
    reader, txids = read_all(path, expected_start=1, torn_tail="allow")
    assert txids == [] and reader.torn is not None and reader.valid_bytes == 0
    truncate_segment(path, 0)
    assert not path.exists()


def test_small_read_chunks_cross_record_boundaries(tmp_path: Path) -> None:
    path, _ = write_segment(tmp_path, 1, 50)
    for chunk in (1, 7, 64):
        reader = SegmentReader(path, layout_version=LAYOUT_VERSION, chunk_bytes=chunk)
        assert [t for t, _, _, _ in reader] == list(range(1, 51))


def test_recover_unfinalized_finalizes_and_truncates(tmp_path: Path) -> None:
    write_segment(tmp_path, 1, 5)
    path, offsets = write_segment(tmp_path, 6, 3, finalize=False)
    with open(path, "r+b") as f:
        f.truncate(offsets[-1] + 5)  # torn last record
    journal = name_dir_journal(tmp_path)
    journal.recover_unfinalized_sync(8)
    names = [s.name for s in segment_index(tmp_path)]
    assert names == [segment_name(1, 5), segment_name(6, 7)]
    with pytest.raises(StorageError, match="already holds txids up to 7"):
        journal.recover_unfinalized_sync(7)


def test_read_edits_ranges_and_gaps(tmp_path: Path) -> None:
    write_segment(tmp_path, 1, 5)
    write_segment(tmp_path, 6, 5)
    write_segment(tmp_path, 11, 3, finalize=False)
    assert [t for t, _ in read_edits([tmp_path], 1)] == list(range(1, 14))
    assert [t for t, _ in read_edits([tmp_path], 4, 7)] == [4, 5, 6, 7]
    assert [t for t, _ in read_edits([tmp_path], 12)] == [12, 13]
    assert list(read_edits([tmp_path], 14)) == []
    with pytest.raises(StorageError, match="to 20 are not available"):
        list(read_edits([tmp_path], 12, 20))
    (tmp_path / segment_name(6, 10)).unlink()
    with pytest.raises(StorageError, match=r"txids 6..10 are missing"):
        list(read_edits([tmp_path], 1))


def test_read_edits_falls_back_to_another_dir(tmp_path: Path) -> None:
    a, b = tmp_path / "a" / "current", tmp_path / "b" / "current"
    for d in (a, b):
        write_segment(d, 1, 5)
        write_segment(d, 6, 5)
    damaged = a / segment_name(6, 10)
    data = bytearray(damaged.read_bytes())
    data[SEGMENT_HEADER_BYTES + 20] ^= 1
    damaged.write_bytes(bytes(data))
    txids = [t for t, _ in read_edits([tmp_path / "a", tmp_path / "b"], 1)]
    assert txids == list(range(1, 11))
    with pytest.raises(StorageError, match="byte offset"):
        list(read_edits([a], 1))
