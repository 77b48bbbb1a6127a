"""Checksum files, directory layout, VERSION and report bookkeeping of the DataNode (pure)."""

from __future__ import annotations

import os
import struct
from pathlib import PurePath

import crc32c
import pytest

from xdfs.datanode import checksums, layout
from xdfs.datanode.reports import (
    IncrementalBatch,
    LogThrottle,
    PendingReports,
    backoff_s,
    report_batches,
)
from xdfs.errors import CorruptReplica, StorageError
from xdfs.protocol.blocks import BlockRecord

CHUNK = 4096


def reference_crcs(data: bytes, chunk: int) -> list[int]:
    return [crc32c.crc32c(data[i : i + chunk]) for i in range(0, len(data), chunk)]


@pytest.mark.parametrize("size", [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 5 * CHUNK + 123])
@pytest.mark.parametrize("piece", [1000, CHUNK, 3 * CHUNK + 7, 1 << 20])
def test_builder_matches_per_chunk_crcs_whatever_the_piece_size(size: int, piece: int) -> None:
    data = os.urandom(size)
    builder = checksums.ChecksumBuilder(CHUNK)
    packed = b"".join(builder.update(data[i : i + piece]) for i in range(0, size, piece))
    packed += builder.finish()
    assert list(checksums.unpack_crcs(packed)) == reference_crcs(data, CHUNK)
    assert checksums.first_bad_chunk(data, packed, CHUNK) is None


def test_meta_header_layout() -> None:
    header = checksums.meta_header(65536)
    assert len(header) == 16
    assert header[:8] == b"XDFSMETA"
    assert struct.unpack(">HHI", header[8:]) == (1, 0, 65536)
    assert checksums.parse_meta_header(header, "m") == 65536


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (b"XDFS", "shorter than its header"),
        (b"NOTAMETA" + struct.pack(">HHI", 1, 0, 4096), "magic"),
        (b"XDFSMETA" + struct.pack(">HHI", 2, 0, 4096), "version 2"),
        (b"XDFSMETA" + struct.pack(">HHI", 1, 0, 0), "implausible"),
    ],
)
def test_bad_meta_headers_are_corrupt_replicas(header: bytes, message: str) -> None:
    with pytest.raises(CorruptReplica, match=message):
        checksums.parse_meta_header(header, "m")


def test_meta_file_sizes() -> None:
    assert checksums.meta_file_bytes(0, CHUNK) == 16
    assert checksums.meta_file_bytes(1, CHUNK) == 20
    assert checksums.meta_file_bytes(CHUNK, CHUNK) == 20
    assert checksums.meta_file_bytes(CHUNK + 1, CHUNK) == 24
    assert checksums.crc_offset(3) == 16 + 12


def test_first_bad_chunk_finds_a_flipped_byte() -> None:
    data = bytearray(os.urandom(3 * CHUNK + 10))
    crcs = checksums.pack_crcs(reference_crcs(bytes(data), CHUNK))
    data[2 * CHUNK + 5] ^= 1
    assert checksums.first_bad_chunk(data, crcs, CHUNK) == 2
    assert checksums.first_bad_chunk(data, crcs[:-4], CHUNK) == 0  # CRC count mismatch


@pytest.mark.parametrize(
    ("block_id", "dirs"),
    [(0, ("subdir0", "subdir0")), (0xFF, ("subdir0", "subdir0")),
     (0x12345, ("subdir1", "subdir35")), (0xFFFF, ("subdir0", "subdir255")),
     (0x10000, ("subdir1", "subdir0")), (0x1_00_00_00, ("subdir0", "subdir0"))],
)
def test_block_ids_map_to_a_256_by_256_tree(block_id: int, dirs: tuple[str, str]) -> None:
    """HDFS's order: 256 consecutive block ids share a leaf."""
    assert layout.subdirs(block_id) == dirs
    path = layout.finalized_dir(PurePath("/f"), block_id)
    assert str(path) == f"/f/{dirs[0]}/{dirs[1]}"
    assert layout.leaf_key(block_id) == int(dirs[0][6:]) << 8 | int(dirs[1][6:])


def test_a_block_has_a_home_of_each_layout() -> None:
    assert layout.legacy_subdirs(0x12345) == ("subdir35", "subdir69")
    assert [str(p) for p in layout.homes(PurePath("/f"), 0x12345)] == [
        "/f/subdir1/subdir35", "/f/subdir35/subdir69"]


def test_file_names_round_trip() -> None:
    assert layout.data_name(17) == "blk_17"
    assert layout.meta_name(17, 1001) == "blk_17_1001.meta"
    assert layout.parse_data_name("blk_17") == 17
    assert layout.parse_meta_name("blk_17_1001.meta") == (17, 1001)
    for other in ("blk_17.tmp", "blk_x", "VERSION", "blk_17_1001.meta.tmp"):
        assert layout.parse_data_name(other) is None
        assert layout.parse_meta_name(other) is None


def test_version_round_trip() -> None:
    info = layout.DataNodeVersion("0123456789abcdef0123456789abcdef", "", 1_700_000_000_000)
    text = layout.format_version(info)
    assert "storageType=DATA_NODE\n" in text and "layoutVersion=2\n" in text
    assert "clusterID=\n" in text
    assert layout.parse_version(text) == info
    older = layout.parse_version(text.replace("layoutVersion=2", "layoutVersion=1"))
    assert older.layout_version == 1  # read (then upgraded: DataStorage._upgrade)
    joined = info.with_cluster("CID-1")
    assert layout.parse_version(layout.format_version(joined)).cluster_id == "CID-1"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("storageType=DATA_NODE\n", "missing"),
        ("storageType=NAME_NODE\nlayoutVersion=1\nnodeID=x\nclusterID=\ncTime=1\n",
         "NAME_NODE"),
        ("storageType=DATA_NODE\nlayoutVersion=9\nnodeID=0123456789abcdef0123456789abcdef\n"
         "clusterID=\ncTime=1\n", "layoutVersion 9"),
        ("storageType=DATA_NODE\nlayoutVersion=1\nnodeID=../x\nclusterID=\ncTime=1\n",
         "uuid4"),
        ("storageType=DATA_NODE\nlayoutVersion=1\nnodeID=x\nclusterID=\ncTime=soon\n",
         "bad number"),
        ("garbage\n", "key=value"),
    ],
)
def test_bad_version_files_are_refused(text: str, message: str) -> None:
    with pytest.raises(StorageError, match=message):
        layout.parse_version(text)


def test_report_batches() -> None:
    records = [BlockRecord(i, 1, 10) for i in range(7)]
    batches = report_batches(records, 3)
    assert [len(b) for b, rbw in batches] == [3, 3, 1]
    assert [r for b, _rbw in batches for r in b] == records
    assert report_batches([], 3) == [([], [])]
    assert report_batches(records, 100) == [(records, [])]
    # replicas in state rbw follow the finalized ones, within the same size limit
    partial = [BlockRecord(100 + i, 1, 3) for i in range(3)]
    batches = report_batches(records, 4, partial)
    assert [(len(b), len(rbw)) for b, rbw in batches] == [(4, 0), (3, 1), (0, 2)]
    assert [r for _b, rbw in batches for r in rbw] == partial


def test_pending_reports_keep_the_newest_news_of_each_block() -> None:
    pending = PendingReports()
    a, b = BlockRecord(1, 1, 5), BlockRecord(2, 1, 5)
    pending.add_received(a)
    pending.add_received(b)
    pending.add_deleted([2, 3])
    batch = pending.take()
    assert batch == IncrementalBatch([a], [2, 3])
    assert not pending and pending.take() is None
    # While the batch was in flight block 1 was deleted: the failed batch must not undo it.
    pending.add_deleted([1])
    pending.restore(batch)
    assert pending.received == {} and pending.deleted == {1, 2, 3}
    pending.add_received(BlockRecord(3, 2, 9))
    assert 3 not in pending.deleted
    pending.confirm_received(BlockRecord(3, 1, 9))  # another record: still pending
    assert 3 in pending.received
    pending.confirm_received(BlockRecord(3, 2, 9))
    assert 3 not in pending.received


def test_pending_reports_on_their_way_are_left_to_them_until_confirmed() -> None:
    pending = PendingReports()
    a, b = BlockRecord(1, 1, 5), BlockRecord(2, 1, 5)
    pending.add_received(a)
    pending.add_received(b)
    assert pending.take(reporting={1}) == IncrementalBatch([b], [])
    assert pending.take(reporting={1}) is None  # a's report is still on its way
    assert pending.take() == IncrementalBatch([a], [])  # it failed: the flush sends it
    pending.add_received(a)
    pending.confirm_received(a)
    assert pending.take() is None


def test_pending_rbw_reports_follow_the_same_newest_news_rule() -> None:
    pending = PendingReports()
    kept = BlockRecord(5, 1, 1000)
    pending.add_rbw(kept)
    pending.add_deleted([6])
    batch = pending.take()
    assert batch == IncrementalBatch([], [6], [kept])
    # the kept replica was finalized by a block recovery meanwhile: the news wins
    pending.add_received(BlockRecord(5, 2, 900))
    pending.restore(batch)
    assert pending.rbw == {} and pending.received == {5: BlockRecord(5, 2, 900)}
    assert pending.deleted == {6}
    pending.add_rbw(BlockRecord(6, 1, 10))  # a newer write of 6 broke: no longer deleted
    assert pending.deleted == set() and 6 in pending.rbw


def test_backoff_doubles_to_its_cap() -> None:
    assert [backoff_s(n, 1.0, 10.0) for n in range(6)] == [0.0, 1.0, 2.0, 4.0, 8.0, 10.0]
    assert backoff_s(10_000, 1.0, 10.0) == 10.0


def test_log_throttle_logs_first_failure_then_one_per_interval() -> None:
    throttle = LogThrottle(60.0)
    assert throttle.failure(0.0) == 0
    assert throttle.failure(1.0) is None
    assert throttle.failure(30.0) is None
    assert throttle.failure(61.0) == 2  # two were not logged
    assert throttle.recovered() == 4
    assert throttle.recovered() == 0
    assert throttle.failure(62.0) == 0
