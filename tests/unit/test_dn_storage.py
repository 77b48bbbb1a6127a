"""DataNode storage: layout on disk, VERSION, finalize, startup cleanup, capacity, reads."""

from __future__ import annotations

import os
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path

import crc32c
import pytest

from xdfs.common.faults import FAULTS
from xdfs.config.datanode import DataNodeConfig
from xdfs.datanode import layout
from xdfs.datanode.directory_scanner import DirectoryScanner
from xdfs.datanode.replica import Replica, ReplicaReader
from xdfs.datanode.storage import DataStorage
from xdfs.errors import AlreadyExists, BlockNotFound, CorruptReplica, StorageError
from xdfs.protocol.blocks import BlockRecord

CHUNK = 4096
NOW_MS = 1_700_000_000_000


@pytest.fixture(autouse=True)
def _disarm() -> Iterator[None]:
    yield
    FAULTS.disarm()


def open_storage(root: Path, reserved_bytes: int = 0, direct_io: bool = False) -> DataStorage:
    storage = DataStorage(root, CHUNK, reserved_bytes, direct_io=direct_io)
    storage.open(NOW_MS)
    return storage


@pytest.fixture(params=[False, True], ids=["buffered", "direct"])
def storage(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[DataStorage]:
    """Storage writing its data files buffered, and with O_DIRECT (datanode.direct_io)."""
    s = open_storage(tmp_path / "dn", direct_io=request.param)
    yield s
    s.close()


def store(storage: DataStorage, block_id: int, genstamp: int, data: bytes) -> Replica:
    """Write and finalize a replica as the write path does (without threads)."""
    storage.claim(block_id)
    try:
        writer = storage.new_writer(block_id, genstamp)
        writer.open()
        for i in range(0, len(data), 1000):
            writer.write(data[i : i + 1000])
        replica = storage.commit(writer, storage.get(block_id))
        storage.add(replica)
        return replica
    finally:
        storage.release(block_id)


def keep(storage: DataStorage, block_id: int, genstamp: int, data: bytes) -> Replica | None:
    """Write ``data`` as a write whose stream then broke does: kept in state rbw."""
    storage.claim(block_id)
    try:
        writer = storage.new_writer(block_id, genstamp)
        writer.open()
        writer.write(data)
        return writer.keep()
    finally:
        storage.release(block_id)


def reopened(storage: DataStorage) -> DataStorage:
    """Close ``storage`` and open its dir again, as a restarted DataNode does (closed again
    at once: the replica map stays readable)."""
    storage.close()
    again = open_storage(storage.root)
    again.close()
    return again


def read_all(replica: Replica, offset: int = 0, length: int | None = None) -> bytes:
    """The range read with O_DIRECT and buffered (both must give the same bytes)."""
    length = replica.num_bytes - offset if length is None else length
    results = []
    for direct_io in (True, False):
        reader = ReplicaReader(replica, offset, length, 3 * CHUNK, direct_io)
        try:
            parts = []
            while (piece := reader.read_piece()) is not None:
                parts.append(bytes(piece))
            results.append(b"".join(parts))
        finally:
            reader.close()
    assert results[0] == results[1]
    return results[0]


def test_new_dir_gets_a_version_with_a_node_id_and_no_cluster(tmp_path: Path) -> None:
    root = tmp_path / "dn"
    storage = open_storage(root)
    try:
        text = (root / "current" / "VERSION").read_text()
        info = layout.parse_version(text)
        assert info.cluster_id == "" and info.ctime_ms == NOW_MS
        assert len(info.node_id) == 32 and storage.node_id == info.node_id
        assert (root / "in_use.lock").exists()
        assert (root / "current" / "rbw").is_dir() and (root / "current" / "finalized").is_dir()
        storage.set_cluster_id("CID-7")
    finally:
        storage.close()
    again = open_storage(root)
    try:
        assert again.node_id == info.node_id  # created once, kept across restarts
        assert again.cluster_id == "CID-7"
    finally:
        again.close()


def test_a_locked_dir_is_refused(storage: DataStorage) -> None:
    second = DataStorage(storage.root, CHUNK)
    with pytest.raises(StorageError, match="locked by pid"):
        second.open(NOW_MS)


def test_another_roles_dir_is_refused(tmp_path: Path) -> None:
    current = tmp_path / "dn" / "current"
    current.mkdir(parents=True)
    (current / "VERSION").write_text(
        "namespaceID=1\nclusterID=C\ncTime=1\nstorageType=NAME_NODE\nlayoutVersion=1\n"
    )
    with pytest.raises(StorageError, match="NAME_NODE"):
        DataStorage(tmp_path / "dn", CHUNK).open(NOW_MS)
    # The refusal released the lock.
    assert DataStorage(tmp_path / "dn", CHUNK)._lock.locked is False


def test_finalized_replica_layout_and_meta_format(storage: DataStorage) -> None:
    block_id = 0x1_02_03
    data = os.urandom(2 * CHUNK + 100)
    replica = store(storage, block_id, 1007, data)
    leaf = storage.finalized / "subdir1" / "subdir2"  # (block_id >> 16, block_id >> 8)
    assert replica.data_path == leaf / f"blk_{block_id}"
    assert replica.meta_path == leaf / f"blk_{block_id}_1007.meta"
    assert replica.data_path.read_bytes() == data
    meta = replica.meta_path.read_bytes()
    assert meta[:16] == b"XDFSMETA" + struct.pack(">HHI", 1, 0, CHUNK)
    crcs = struct.unpack(">3I", meta[16:])
    assert list(crcs) == [crc32c.crc32c(data[i : i + CHUNK]) for i in range(0, len(data), CHUNK)]
    assert os.listdir(storage.rbw) == []
    assert storage.get(block_id) == replica
    assert storage.used_bytes == len(data) + len(meta)


def test_empty_replica(storage: DataStorage) -> None:
    replica = store(storage, 5, 1, b"")
    assert replica.num_bytes == 0
    assert replica.meta_path.stat().st_size == 16
    assert read_all(replica) == b""


def test_range_reads_verify_and_return_exact_bytes(storage: DataStorage) -> None:
    data = os.urandom(7 * CHUNK + 333)
    replica = store(storage, 9, 1, data)
    for offset, length in [(0, len(data)), (1, 10), (CHUNK - 1, 2), (3 * CHUNK, CHUNK),
                           (len(data) - 1, 1), (len(data), 0), (100, 5 * CHUNK)]:
        assert read_all(replica, offset, length) == data[offset : offset + length]


def test_flipped_byte_and_truncation_are_corrupt(storage: DataStorage) -> None:
    data = os.urandom(3 * CHUNK)
    replica = store(storage, 11, 1, data)
    assert read_all(replica, 0, CHUNK) == data[:CHUNK]  # the chunk before is fine
    with open(replica.data_path, "r+b") as fh:
        fh.seek(CHUNK + 7)
        fh.write(bytes([data[CHUNK + 7] ^ 1]))
    assert read_all(replica, 0, CHUNK) == data[:CHUNK]
    with pytest.raises(CorruptReplica, match="checksum mismatch in bytes 4096-8191"):
        read_all(replica, CHUNK + 100, 10)
    os.truncate(replica.data_path, 2 * CHUNK)
    with pytest.raises(CorruptReplica, match="expected"):
        read_all(replica)


def test_reading_a_removed_replica_is_block_not_found(storage: DataStorage) -> None:
    replica = store(storage, 12, 1, b"abc")
    taken = storage.take(12)
    assert taken is replica and storage.used_bytes == 0
    storage.delete_files([replica])
    assert not replica.data_path.exists() and not replica.meta_path.exists()
    with pytest.raises(BlockNotFound):
        read_all(replica)


def test_a_newer_genstamp_replaces_the_older_replica(storage: DataStorage) -> None:
    old = store(storage, 13, 1, b"old bytes")
    new = store(storage, 13, 2, b"new!")
    assert not old.meta_path.exists()
    assert sorted(p.name for p in new.data_path.parent.iterdir()) == ["blk_13", "blk_13_2.meta"]
    assert read_all(new) == b"new!"
    assert storage.used_bytes == new.disk_bytes


def test_busy_blocks_cannot_be_claimed_twice(storage: DataStorage) -> None:
    storage.claim(1)
    with pytest.raises(AlreadyExists):
        storage.claim(1)
    storage.release(1)
    storage.claim(1)


def test_restart_drops_empty_rbw_and_half_written_files_and_loads_the_rest(
    tmp_path: Path,
) -> None:
    root = tmp_path / "dn"
    storage = open_storage(root)
    keep = store(storage, 1, 3, b"kept")
    store(storage, 2, 1, b"data without meta")
    store(storage, 3, 1, b"meta without data")
    stale = store(storage, 4, 5, b"four")
    storage.claim(6)
    writer = storage.new_writer(6, 1)
    writer.open()
    writer.write(b"partial")  # never finalized, not one checksum: the writer "crashed"
    storage.close()
    storage.get(2).meta_path.unlink()  # type: ignore[union-attr]
    storage.get(3).data_path.unlink()  # type: ignore[union-attr]
    shutil.copy(stale.meta_path, stale.meta_path.with_name("blk_4_2.meta"))  # older genstamp
    again = DataStorage(root, CHUNK)
    summary = again.open(NOW_MS)
    try:
        assert summary.rbw_removed == ["blk_6", "blk_6_1.meta"]
        assert sorted(os.path.basename(p) for p in summary.leftovers_removed) == [
            "blk_2", "blk_3_1.meta", "blk_4_2.meta"
        ]
        assert os.listdir(again.rbw) == []
        assert sorted(again.replicas) == [1, 4]
        assert again.get(1) == keep
        assert again.get(4).genstamp == 5  # type: ignore[union-attr]
        assert again.used_bytes == keep.disk_bytes + stale.disk_bytes
        assert read_all(again.get(4)) == b"four"  # type: ignore[arg-type]
    finally:
        again.close()


def test_names_left_in_rbw_by_a_finalize_are_dropped_at_restart(tmp_path: Path) -> None:
    # A finalize syncs the directory its files move to, not rbw/: a file system may show
    # them in both after a crash (a hard link stands in for that). The finalized one stays.
    root = tmp_path / "dn"
    storage = open_storage(root)
    replica = store(storage, 7, 2, b"seven")
    storage.close()
    os.link(replica.data_path, root / "current" / "rbw" / "blk_7")
    os.link(replica.meta_path, root / "current" / "rbw" / "blk_7_2.meta")
    again = reopened(storage)
    assert os.listdir(again.rbw) == []
    assert again.get(7) == replica
    assert again.used_bytes == replica.disk_bytes
    assert read_all(again.get(7)) == b"seven"  # type: ignore[arg-type]


def test_a_new_leaf_directory_is_durable_before_its_first_replica_moves_in(
    storage: DataStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[Path] = []
    monkeypatch.setattr("xdfs.datanode.storage.fsync_dir", synced.append)
    store(storage, 0x05_01_00, 1, b"first")
    first = storage.finalized / "subdir5"
    assert os.listdir(first) == ["subdir1"]  # that leaf only: it takes 256 block ids
    # the new first level, then the leaf, then (the commit) the replica's leaf
    assert synced == [storage.finalized, first, first / "subdir1"]
    synced.clear()
    store(storage, 0x05_01_FF, 1, b"next")  # its leaf exists: no directory made
    assert synced == [first / "subdir1"]  # (only the commit's fsync)
    synced.clear()
    store(storage, 0x05_02_00, 1, b"next leaf")  # a new leaf in an existing first level
    assert synced == [first, first / "subdir2"]


def to_layout_1(root: Path) -> list[int]:
    """Turn a data dir into one written by layout version 1: each
    finalized replica's files moved to ``subdir<id >> 8 & 0xFF>/subdir<id & 0xFF>``, the
    leaves it leaves empty removed, ``VERSION`` saying 1. Returns the block ids moved."""
    finalized = root / "current" / "finalized"
    moved = []
    for path in sorted(finalized.glob("*/*/blk_*")):
        parsed = layout.parse_data_name(path.name) or layout.parse_meta_name(path.name)
        block_id = parsed[0] if isinstance(parsed, tuple) else parsed
        assert block_id is not None
        first, second = layout.legacy_subdirs(block_id)
        (finalized / first / second).mkdir(parents=True, exist_ok=True)
        path.rename(finalized / first / second / path.name)
        moved.append(block_id)
    for leaf in finalized.glob("*/*"):
        if not any(leaf.iterdir()):
            leaf.rmdir()
    version = root / "current" / "VERSION"
    version.write_text(version.read_text().replace("layoutVersion=2", "layoutVersion=1"))
    return sorted(set(moved))


def test_a_data_dir_of_layout_1_keeps_its_replicas_where_they_are(tmp_path: Path) -> None:
    """A DataNode of layout 2 opening a dir written by layout 1 (replicas in other leaves)
    loads, reports, reads, replaces and deletes every replica there, writes new ones in
    the new leaves, and records layout 2 (a DataNode of layout 1 then refuses the dir)."""
    root = tmp_path / "dn"
    storage = open_storage(root)
    blocks = {block_id: os.urandom(100 + block_id % 7) for block_id in (1, 2, 300, 0x1_02_03)}
    for block_id, data in blocks.items():
        store(storage, block_id, 1, data)
    storage.close()
    assert to_layout_1(root) == sorted(blocks)
    assert (root / "current" / "finalized" / "subdir2" / "subdir3" / "blk_66051").exists()
    storage = open_storage(root)
    try:
        assert [r.block_id for r in storage.report_records()] == sorted(blocks)
        for block_id, data in blocks.items():
            replica = storage.get(block_id)
            assert replica is not None and read_all(replica) == data
            first, second = layout.legacy_subdirs(block_id)
            assert replica.data_path.parent == storage.finalized / first / second
        assert storage.used_bytes == sum(r.disk_bytes for r in storage.replicas.values())
        assert "layoutVersion=2\n" in (root / "current" / "VERSION").read_text()
        old = storage.get(300)
        assert old is not None
        replaced = store(storage, 300, 2, b"newer")  # the old files go, the new ones in place
        assert not old.data_path.exists() and not old.meta_path.exists()
        assert replaced.data_path.parent == storage.finalized / "subdir0" / "subdir1"
        gone = storage.take(2)
        assert gone is not None
        storage.delete_files([gone])
        assert not gone.data_path.exists() and not gone.meta_path.exists()
        store(storage, 0x1_02_04, 1, b"new")  # a new block: the new layout
    finally:
        storage.close()
    again = reopened(storage)
    assert sorted(again.replicas) == [1, 300, 0x1_02_03, 0x1_02_04]
    assert read_all(again.replicas[300]) == b"newer"
    assert again.replicas[0x1_02_04].data_path.parent == again.finalized / "subdir1" / "subdir2"
    assert again.replicas[0x1_02_03].data_path.parent == again.finalized / "subdir2" / "subdir3"


async def test_the_directory_scanner_keeps_and_adopts_replicas_of_layout_1(
    tmp_path: Path,
) -> None:
    """Replicas where layout 1 put them are neither missing nor strangers to the directory
    scanner: one the map lost is adopted again from there."""
    root = tmp_path / "dn"
    storage = open_storage(root)
    for block_id in (1, 300):
        store(storage, block_id, 1, b"x" * block_id)
    storage.close()
    to_layout_1(root)
    storage = open_storage(root)
    missing: list[Replica] = []
    found: list[Replica] = []

    async def on_missing(replicas: list[Replica]) -> None:
        missing.extend(replicas)

    scanner = DirectoryScanner(storage, DataNodeConfig(), on_missing, found.extend)
    try:
        result = await scanner.scan_once()
        assert result.missing == [] and result.added == [] and missing == []
        lost = storage.take(300)
        assert lost is not None
        result = await scanner.scan_once()
        assert result.added == [300] and storage.get(300) == lost
    finally:
        storage.close()


def test_crash_before_finalize_leaves_no_finalized_replica(tmp_path: Path) -> None:
    root = tmp_path / "dn"
    storage = open_storage(root)
    FAULTS.arm("datanode.before_finalize", RuntimeError("crash"))
    with pytest.raises(RuntimeError):
        store(storage, 21, 1, b"x" * 10_000)
    storage.close()
    again = open_storage(root)
    try:
        assert list(again.finalized.rglob("blk_*")) == []
        # the bytes stay in rbw, whole and checksummed, for a block recovery
        kept = again.get(21)
        assert kept is not None and not kept.finalized and kept.num_bytes == 10_000
        assert again.report_records() == [] and again.rbw_records() == [kept.record]
        assert read_all(kept) == b"x" * 10_000
    finally:
        again.close()


def _crashed_writer(storage: DataStorage, block_id: int, data: bytes) -> None:
    """A write cut by a crash: data and the checksums of whole chunks on disk, nothing
    finished or fsynced by the writer itself."""
    storage.claim(block_id)
    writer = storage.new_writer(block_id, 7)
    writer.open()
    writer.write(data)
    writer._close()


def test_restart_keeps_rbw_replicas_cut_to_what_their_checksums_cover(tmp_path: Path) -> None:
    root = tmp_path / "dn"
    storage = open_storage(root)
    data = os.urandom(3 * CHUNK + 100)
    _crashed_writer(storage, 30, data)  # the partial last chunk has no checksum yet
    _crashed_writer(storage, 31, data)
    _crashed_writer(storage, 32, data[:CHUNK])
    storage.close()
    # block 31: the data of its last whole chunk changed after its checksum was written
    flip(root / "current" / "rbw" / "blk_31", 2 * CHUNK + 5)
    # block 32: more checksums than data (the data write was lost): the last one fails
    with (root / "current" / "rbw" / "blk_32").open("r+b") as fh:
        fh.truncate(CHUNK - 10)
    again = open_storage(root)
    try:
        lengths = {r.block_id: r.num_bytes for r in again.replicas.values()}
        assert lengths == {30: 3 * CHUNK, 31: 2 * CHUNK}  # 32 kept no valid byte
        assert not any(r.finalized for r in again.replicas.values())
        assert read_all(again.get(30)) == data[: 3 * CHUNK]  # type: ignore[arg-type]
        assert read_all(again.get(31)) == data[: 2 * CHUNK]  # type: ignore[arg-type]
        assert sorted(os.listdir(again.rbw)) == sorted(
            ["blk_30", "blk_30_7.meta", "blk_31", "blk_31_7.meta"]
        )
        assert again.used_bytes == sum(r.disk_bytes for r in again.replicas.values())
    finally:
        again.close()


def test_a_kept_write_reloads_whole(tmp_path: Path) -> None:
    root = tmp_path / "dn"
    storage = open_storage(root)
    data = os.urandom(2 * CHUNK + 333)
    kept = keep(storage, 40, 2, data)  # the stream broke: the partial chunk gets its checksum
    assert kept is not None and kept.num_bytes == len(data) and not kept.finalized
    assert read_all(kept) == data
    assert keep(storage, 41, 2, b"") is None
    assert sorted(os.listdir(storage.rbw)) == ["blk_40", "blk_40_2.meta"]
    assert reopened(storage).get(40) == kept


@pytest.mark.parametrize("finalized", [True, False])
def test_recovery_cuts_a_replica_and_gives_it_the_new_genstamp(
    tmp_path: Path, finalized: bool
) -> None:
    root = tmp_path / "dn"
    storage = open_storage(root)
    data = os.urandom(3 * CHUNK + 500)
    kept = store(storage, 50, 4, data) if finalized else keep(storage, 50, 4, data)
    assert kept is not None
    replica = kept
    for length, genstamp in ((len(data), 5), (2 * CHUNK + 7, 6), (2 * CHUNK, 7)):
        recovered = storage.recover(replica, genstamp, length)
        storage.add(recovered)
        assert recovered.finalized and recovered.record == BlockRecord(50, genstamp, length)
        assert recovered.data_path.parent == Path(layout.finalized_dir(storage.finalized, 50))
        assert sorted(p.name for p in recovered.data_path.parent.iterdir()) == [
            "blk_50", f"blk_50_{genstamp}.meta"
        ]
        assert read_all(recovered) == data[:length]
        replica = recovered
    assert os.listdir(storage.rbw) == []
    assert storage.used_bytes == replica.disk_bytes
    assert reopened(storage).get(50) == replica


def test_recovery_refuses_to_cut_inside_a_damaged_chunk(storage: DataStorage) -> None:
    data = os.urandom(2 * CHUNK)
    replica = store(storage, 60, 1, data)
    flip(replica.data_path, CHUNK + 10)
    with pytest.raises(CorruptReplica):
        storage.recover(replica, 2, CHUNK + 100)
    assert replica.meta_path.exists()  # nothing changed
    assert replica.data_path.stat().st_size == 2 * CHUNK


def flip(path: Path, offset: int) -> None:
    with path.open("r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ 0xFF]))


def test_capacity_reports_disk_totals_reserve_and_tracked_use(tmp_path: Path) -> None:
    storage = open_storage(tmp_path / "dn", reserved_bytes=1 << 20)
    try:
        replica = store(storage, 1, 1, os.urandom(10_000))
        report = storage.storage_report()
        usage = shutil.disk_usage(tmp_path)
        assert report.capacity_bytes == usage.total
        assert report.used_bytes == replica.disk_bytes == 10_000 + 16 + 4 * 3
        # Free space moves with other processes; the reserve is what must show.
        assert 0 <= report.free_bytes <= usage.free
        assert abs((usage.free - (1 << 20)) - report.free_bytes) < 64 << 20
        huge = DataStorage(tmp_path / "dn2", CHUNK, reserved_bytes=usage.total * 2)
        huge.open(NOW_MS)
        try:
            assert huge.storage_report().free_bytes == 0
        finally:
            huge.close()
    finally:
        storage.close()


def test_report_records_skip_corrupt_replicas(storage: DataStorage) -> None:
    a = store(storage, 2, 1, b"a")
    b = store(storage, 1, 1, b"b")
    assert storage.report_records() == [b.record, a.record]
    assert storage.mark_corrupt(a) is True
    assert storage.mark_corrupt(a) is False  # once
    assert storage.report_records() == [b.record]
    stale = Replica(1, 0, 0, b.data_path, b.meta_path, 0)
    assert storage.mark_corrupt(stale) is False  # not the replica the map holds
