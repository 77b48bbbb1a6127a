"""Block pools per metadata shard on a DataNode's disk (layout.py, storage.py): shard 0's
pool is the unsharded layout as it is, shard k's is ``current/BP-<k>``; a replica's pool is
the shard of its block id."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_dn_storage import CHUNK, NOW_MS, keep, store
from xdfs.config.datanode import DataNodeConfig
from xdfs.datanode import layout
from xdfs.datanode.directory_scanner import DirectoryScanner
from xdfs.datanode.replica import Replica
from xdfs.datanode.storage import DataStorage
from xdfs.namenode.namespace.tree_base import FIRST_BLOCK_ID
from xdfs.sharding.ids import first_id

B0 = first_id(0, FIRST_BLOCK_ID)  # an unsharded NameNode's first block id
B1 = first_id(1, FIRST_BLOCK_ID)
B2 = first_id(2, FIRST_BLOCK_ID)


def opened(root: Path, shards: tuple[int, ...] = (0, 1)) -> DataStorage:
    storage = DataStorage(root, CHUNK, shards=shards)
    storage.open(NOW_MS)
    return storage


def reopen(storage: DataStorage, shards: tuple[int, ...] = (0, 1)) -> DataStorage:
    storage.close()
    return opened(storage.root, shards)


def relative(storage: DataStorage, replica: Replica) -> str:
    return str(replica.data_path.relative_to(storage.current))


def test_pool_names() -> None:
    assert layout.pool_dir(Path("c"), 0) == Path("c")
    assert layout.pool_dir(Path("c"), 7) == Path("c/BP-7")
    assert [layout.parse_pool_name(n) for n in ("BP-7", "BP-0", "BP-07", "BP-x", "rbw")] == [
        7, None, None, None, None]
    # The same leaf numbers in two pools are two leaves.
    assert layout.leaf_key(B0) != layout.leaf_key(B1)
    assert layout.leaf_key(B0) == (B0 >> 8) & 0xFFFF  # shard 0's keys as before


def test_each_shard_replica_goes_to_its_pool_and_comes_back_after_a_restart(
    tmp_path: Path,
) -> None:
    storage = opened(tmp_path / "dn")
    r0 = store(storage, B0, 1, b"zero" * 100)
    r1 = store(storage, B1, 1, b"one" * 300)
    kept = keep(storage, B1 + 1, 1, b"k" * 10)
    assert kept is not None
    storage.add(kept)
    a, b = layout.subdirs(B1)
    assert relative(storage, r0) == f"finalized/{'/'.join(layout.subdirs(B0))}/blk_{B0}"
    assert relative(storage, r1) == f"BP-1/finalized/{a}/{b}/blk_{B1}"
    assert relative(storage, kept) == f"BP-1/rbw/blk_{B1 + 1}"
    assert storage.pool_used == {0: r0.disk_bytes, 1: r1.disk_bytes + kept.disk_bytes}
    assert storage.storage_report(1).used_bytes == storage.pool_used[1]
    assert storage.storage_report(0).capacity_bytes == storage.storage_report(1).capacity_bytes

    again = reopen(storage)
    try:
        assert again.report_records(0) == [r0.record]
        assert again.report_records(1) == [r1.record]
        assert [r.block_id for r in again.replicas.values() if not r.finalized] == [B1 + 1]
        assert again.rbw_records(0) == [] and len(again.rbw_records(1)) == 1
        assert again.pool_used == storage.pool_used
    finally:
        again.close()


def test_an_unsharded_data_dir_is_shard_0s_pool_unchanged(tmp_path: Path) -> None:
    """A data dir written by a DataNode of one NameNode opens as shard 0's pool: nothing
    moves, every replica is where it was."""
    plain = DataStorage(tmp_path / "dn", CHUNK)
    plain.open(NOW_MS)
    replica = store(plain, B0, 3, b"x" * 5000)
    before = sorted(p.relative_to(plain.root) for p in plain.root.rglob("*") if p.is_file())
    sharded = reopen(plain)
    try:
        assert sharded.get(B0) is not None
        assert sharded.get(B0).data_path == replica.data_path  # type: ignore[union-attr]
        after = sorted(p.relative_to(plain.root) for p in plain.root.rglob("*") if p.is_file())
        assert after == before  # (BP-1 holds only empty directories)
    finally:
        sharded.close()


def test_a_pool_not_served_is_left_on_disk_and_not_loaded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    storage = opened(tmp_path / "dn")
    r1 = store(storage, B1, 1, b"one")
    only_0 = reopen(storage, (0,))
    try:
        assert only_0.get(B1) is None and not only_0.serves(B1)
        assert r1.data_path.exists()
        assert "block pool" in caplog.text and "does not serve shard 1" in caplog.text
    finally:
        only_0.close()


def test_a_replica_in_another_pools_tree_is_ignored_not_deleted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A block of shard 1 found in shard 0's tree (moved there by hand) is not loaded as
    shard 0's, nor adopted by the directory scanner, nor deleted."""
    storage = opened(tmp_path / "dn")
    r1 = store(storage, B1, 1, b"one")
    wrong = storage.pool_finalized[0] / Path(*layout.subdirs(B1))
    wrong.mkdir(parents=True)
    moved = [path.rename(wrong / path.name) for path in (r1.data_path, r1.meta_path)]
    again = reopen(storage)
    try:
        assert again.get(B1) is None
        assert all(path.exists() for path in moved)
        assert "belongs in another directory" in caplog.text
    finally:
        again.close()


async def test_the_directory_scanner_adopts_each_pools_replicas_in_its_own_pool(
    tmp_path: Path,
) -> None:
    storage = opened(tmp_path / "dn")
    try:
        r0 = store(storage, B0, 1, b"zero")
        r1 = store(storage, B1, 1, b"one")
        for block_id in (B0, B1):
            storage.take(block_id)  # as if the map had lost them
        found: list[Replica] = []

        async def missing(replicas: list[Replica]) -> None:
            raise AssertionError(replicas)

        scanner = DirectoryScanner(storage, DataNodeConfig(), missing, found.extend)
        result = await scanner.scan_once()
        assert sorted(result.added) == [B0, B1]
        assert {r.data_path for r in found} == {r0.data_path, r1.data_path}
        assert storage.pool_used == {0: r0.disk_bytes, 1: r1.disk_bytes}
    finally:
        storage.close()


def test_a_block_of_a_shard_not_served_has_no_pool(tmp_path: Path) -> None:
    storage = opened(tmp_path / "dn")
    try:
        assert storage.serves(B0) and storage.serves(B1) and not storage.serves(B2)
        with pytest.raises(KeyError):
            storage.rbw_of(B2)
    finally:
        storage.close()
