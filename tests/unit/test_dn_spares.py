"""DataNode spare files (datanode/spares.py): taken for new replicas' files, given back by
deletes, made ahead, and handled at startup; never counted as replicas."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.unit.test_dn_storage import CHUNK, NOW_MS, read_all, store
from xdfs.common.faults import FAULTS
from xdfs.datanode.idle_work import work_while_idle
from xdfs.datanode.spares import Spares
from xdfs.datanode.storage import DataStorage

SPARES_MAX = 8


@pytest.fixture(autouse=True)
def _disarm() -> Iterator[None]:
    yield
    FAULTS.disarm()


def open_storage(root: Path, spares_max: int = SPARES_MAX) -> DataStorage:
    storage = DataStorage(root, CHUNK, spare_files_max=spares_max)
    storage.open(NOW_MS)
    return storage


def spare_names(root: Path) -> list[str]:
    return sorted(os.listdir(root / "current" / "spares"))


def inode(path: Path) -> int:
    return path.stat().st_ino


def test_a_new_replicas_files_are_spares_renamed(tmp_path: Path) -> None:
    storage = open_storage(tmp_path / "dn")
    assert storage.spares.make(SPARES_MAX) == SPARES_MAX
    spares = tmp_path / "dn" / "current" / "spares"
    inodes = {inode(spares / name) for name in spare_names(tmp_path / "dn")}
    data = os.urandom(3 * CHUNK + 5)
    replica = store(storage, 7, 1, data)
    # both files are inodes of the stock: nothing was created
    assert {inode(replica.data_path), inode(replica.meta_path)} <= inodes
    assert len(spare_names(tmp_path / "dn")) == SPARES_MAX - 2 == len(storage.spares)
    assert read_all(replica) == data
    assert storage.used_bytes == replica.disk_bytes  # spares count for nothing
    storage.close()


def test_without_spares_files_are_created(tmp_path: Path) -> None:
    storage = open_storage(tmp_path / "dn")
    data = os.urandom(CHUNK)
    assert read_all(store(storage, 7, 1, data)) == data
    assert storage.spares.taken == 0
    storage.close()


def test_deleted_replicas_become_empty_spares_up_to_the_bound(tmp_path: Path) -> None:
    storage = open_storage(tmp_path / "dn", spares_max=3)
    replicas = [store(storage, block_id, 1, os.urandom(2 * CHUNK)) for block_id in (1, 2)]
    inodes = [inode(r.data_path) for r in replicas] + [inode(r.meta_path) for r in replicas]
    for replica in replicas:
        assert storage.take(replica.block_id) is replica
    storage.delete_files(replicas)
    for replica in replicas:  # gone from finalized/
        assert not replica.data_path.exists() and not replica.meta_path.exists()
    spares = tmp_path / "dn" / "current" / "spares"
    names = spare_names(tmp_path / "dn")
    assert len(names) == 3 == len(storage.spares)  # the fourth file was unlinked
    assert all((spares / name).stat().st_size == 0 for name in names)  # no old byte
    # the data file goes first: the first replica's files and the second's data file
    assert {inode(spares / name) for name in names} == {inodes[0], inodes[2], inodes[1]}
    assert storage.used_bytes == 0 and storage.report_records() == []
    storage.close()


def test_an_aborted_write_gives_its_files_back(tmp_path: Path) -> None:
    storage = open_storage(tmp_path / "dn")
    storage.claim(5)
    writer = storage.new_writer(5, 1)
    writer.open()
    writer.write(b"x" * 100)
    writer.abort()
    storage.release(5)
    assert os.listdir(storage.rbw) == []
    assert len(storage.spares) == 2 and storage.spares.given == 2
    storage.close()


def test_startup_cuts_spares_drops_strangers_and_keeps_the_bound(tmp_path: Path) -> None:
    storage = open_storage(tmp_path / "dn", spares_max=4)
    storage.spares.make(4)
    storage.close()
    spares = tmp_path / "dn" / "current" / "spares"
    # a give cut short by a crash (renamed, not cut yet) and something that is no spare
    (spares / "spare_1").write_bytes(b"old replica bytes")
    (spares / "blk_9").write_bytes(b"not a spare")
    again = open_storage(tmp_path / "dn", spares_max=3)
    names = spare_names(tmp_path / "dn")
    assert names == ["spare_0", "spare_1", "spare_2"] and len(again.spares) == 3
    assert all((spares / name).stat().st_size == 0 for name in names)
    assert again.replicas == {}
    # a new spare never reuses a name of before
    again.spares.make(1)
    assert spare_names(tmp_path / "dn") == names
    again.close()
    assert spare_names(tmp_path / "dn") == names
    third = open_storage(tmp_path / "dn", spares_max=0)  # none wanted: all removed
    assert spare_names(tmp_path / "dn") == [] and len(third.spares) == 0
    third.close()


def test_a_spare_name_sharing_a_replicas_inode_is_never_cut(tmp_path: Path) -> None:
    """A crash that kept a spare's old name next to the replica it became (its move not
    written back): startup keeps the replica whole and drops the spare's name."""
    storage = open_storage(tmp_path / "dn")
    data = os.urandom(2 * CHUNK)
    replica = store(storage, 3, 1, data)
    storage.close()
    stale = tmp_path / "dn" / "current" / "spares" / "spare_40"
    os.link(replica.data_path, stale)
    again = open_storage(tmp_path / "dn")
    assert not stale.exists() and len(again.spares) == 0
    assert read_all(again.replicas[3]) == data
    again.close()


def test_taking_a_vanished_spare_creates_the_file(tmp_path: Path) -> None:
    storage = open_storage(tmp_path / "dn")
    storage.spares.make(2)
    for name in spare_names(tmp_path / "dn"):  # removed by hand
        os.unlink(tmp_path / "dn" / "current" / "spares" / name)
    data = os.urandom(CHUNK + 1)
    assert read_all(store(storage, 4, 1, data)) == data
    storage.close()


def test_a_crash_after_a_take_leaves_no_replica(tmp_path: Path) -> None:
    storage = open_storage(tmp_path / "dn")
    storage.spares.make(2)
    FAULTS.arm("datanode.spare_taken", RuntimeError("crash"))
    storage.claim(6)
    with pytest.raises(RuntimeError):
        storage.new_writer(6, 1).open()
    storage.close()
    again = open_storage(tmp_path / "dn")
    assert again.replicas == {} and os.listdir(again.rbw) == []
    again.close()


def test_a_crash_after_a_give_leaves_neither_replica_nor_old_bytes(tmp_path: Path) -> None:
    storage = open_storage(tmp_path / "dn")
    replica = store(storage, 8, 1, os.urandom(3 * CHUNK))
    storage.take(8)
    FAULTS.arm("datanode.spare_given", RuntimeError("crash"))
    with pytest.raises(RuntimeError):
        storage.delete_files([replica])
    storage.close()
    again = open_storage(tmp_path / "dn")
    assert again.replicas == {} and again.report_records() == []
    spares = tmp_path / "dn" / "current" / "spares"
    assert [(spares / n).stat().st_size for n in spare_names(tmp_path / "dn")] == [0]
    again.close()


def test_make_stops_at_the_bound(tmp_path: Path) -> None:
    spares = Spares(tmp_path, 3)
    spares.scan()
    spares.load({}, [])
    assert spares.make(10) == 3 and spares.wanted == 0 and spares.make(1) == 0
    assert spares.give(tmp_path / "missing") is False  # full: the caller unlinks


async def test_spares_are_made_ahead_only_while_idle(tmp_path: Path) -> None:
    storage = open_storage(tmp_path / "dn")
    store(storage, 5, 1, os.urandom(100))
    storage.close()
    storage = open_storage(tmp_path / "dn", spares_max=100)
    storage.claim(9)  # busy: nothing is made

    async def run(job: Callable[[], object]) -> object:
        return await asyncio.to_thread(job)

    finalized = tmp_path / "dn" / "current" / "finalized"
    task = asyncio.create_task(
        work_while_idle(storage, run, period_s=0.01, duty=1.0, quiet_s=0.3))
    try:
        await asyncio.sleep(0.1)
        assert len(storage.spares) == 0
        storage.release(9)
        await asyncio.sleep(0.1)  # released, but not quiet for long enough yet
        assert len(storage.spares) == 0
        for _ in range(1000):
            if storage.idle_job(64) is None:
                break
            await asyncio.sleep(0.01)
        assert len(storage.spares) == 100 == len(spare_names(tmp_path / "dn"))
        # no directory made ahead while idle (layout 2: the writes make the next leaf)
        assert os.listdir(finalized) == ["subdir0"]
        assert os.listdir(finalized / "subdir0") == ["subdir0"]
        assert storage.replicas.keys() == {5}
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        storage.close()
