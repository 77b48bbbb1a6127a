"""Whole-namespace work does not stop the NameNode (issue 14): a checkpoint is written by a
forked child from the namespace as it was at its txid, while calls are answered and
mutations go on; fsck, -count and a recursive delete's permission check walk in slices, and
calls are answered before they finish (event order asserted, never timings)."""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from xdfs.client.client import AsyncClient
from xdfs.common.images import image_name, md5_name
from xdfs.config import XdfsConfig
from xdfs.errors import AccessDenied, StorageError
from xdfs.namenode import server as server_module
from xdfs.namenode.image import background as background_module
from xdfs.namenode.image.background import Checkpoint, start_checkpoint
from xdfs.namenode.image.format import format_namenode
from xdfs.namenode.image.fsimage import write_checkpoint_files
from xdfs.namenode.image.recovery import load_namespace, save_checkpoint
from xdfs.namenode.image.storage import StorageDirectory
from xdfs.namenode.namespace.ops import Op
from xdfs.namenode.namespace.tree import Namespace
from xdfs.namenode.namesystem import Namesystem
from xdfs.namenode.server import NameNode
from xdfs.namenode.walks import WalkPacer
from xdfs.testing.big_namespace import grow_image
from xdfs.testing.minicluster import MiniCluster
from xdfs.testing.poll import eventually

from ..integration.conftest import ROOT, ROOT_PW, connect, nn_config

ALICE, ALICE_PW = "alice", "alice-pw"


async def _big_namenode(
    minicluster: MiniCluster, dirs: int, files_per_dir: int, *, owner: str = "",
    config: XdfsConfig | None = None,
) -> NameNode:
    """A NameNode started on a namespace with /big/dNNNNNN/fNNNNNN (built off RPC)."""
    name_dirs = [minicluster.base_dir / "nn-dir0"]
    config = config or XdfsConfig()
    format_namenode(name_dirs, config.namenode, superuser=ROOT, password=ROOT_PW,
                    cluster_id="CID-nn")
    grow_image(name_dirs, "big", dirs, files_per_dir, owner=owner)
    return await minicluster.start_namenode(format_dirs=False, config=config)


def _fs(nn: NameNode) -> Namesystem:
    assert nn.fs is not None
    return nn.fs


def _current(nn: NameNode) -> Path:
    return nn.dirs[0].current


def _ckpt_files(nn: NameNode) -> list[str]:
    """The image files a checkpoint writer left in the name dir (``fsimage.ckpt_<txid>``)."""
    return [p.name for p in _current(nn).iterdir() if ".ckpt" in p.name]


async def _mutate(client: AsyncClient, first: int, last: int) -> None:
    """Changes of every kind the image holds, to /big (in the image) and /work."""
    for i in range(first, last):
        await client.mkdirs(f"/work/m{i}/sub")
        await client.rename(f"/big/d{i:06d}", f"/work/m{i}/moved")
        await client.set_permission(f"/work/m{i}/moved/f000001", 0o600)
        await client.delete(f"/big/d{i + 100:06d}", recursive=True, skip_trash=True)
        await client.set_times(f"/work/m{i}", mtime_ms=1_000 + i, atime_ms=2_000 + i)


def _copy_current(nn: NameNode, to: Path, *, drop_image: int | None = None) -> StorageDirectory:
    """A copy of the NameNode's first name dir, optionally without one of its images."""
    shutil.copytree(nn.dirs[0].root, to, ignore=shutil.ignore_patterns("in_use.lock"))
    copy = StorageDirectory(to)
    if drop_image is not None:
        (copy.current / image_name(drop_image)).unlink()
        (copy.current / md5_name(drop_image)).unlink()
    return copy


async def test_save_under_concurrent_mutations_is_the_image_of_its_txid(
    minicluster: MiniCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nn = await _big_namenode(minicluster, dirs=300, files_per_dir=40)
    writers: list[Checkpoint] = []
    forked = asyncio.Event()
    real_start = start_checkpoint

    def start_stopped(*args: Any) -> Checkpoint:
        """The real fork, then the writer is paused (SIGSTOP) until the test lets it go."""
        checkpoint = real_start(*args)
        os.kill(checkpoint.pid, signal.SIGSTOP)
        writers.append(checkpoint)
        forked.set()
        return checkpoint

    monkeypatch.setattr(server_module, "start_checkpoint", start_stopped)
    async with connect(nn, ROOT, ROOT_PW) as root:
        await _mutate(root, 0, 5)
        save = asyncio.create_task(root.save_namespace())
        await asyncio.wait_for(forked.wait(), 60)
        # the writer has not written a byte: all this is answered while the image is saved
        await _mutate(root, 5, 40)
        assert (await root.stat("/work/m39/moved")).is_dir
        assert not save.done()
        os.kill(writers[0].pid, signal.SIGCONT)
        txid = await save
        await _mutate(root, 40, 60)
    assert txid == writers[0].txid
    live = _fs(nn).ns.canonical_dump()

    # the image plus the edits after it give the live namespace
    restarted, _ = load_namespace([_copy_current(nn, tmp_path / "restart")], Namespace)
    assert restarted.canonical_dump() == live

    # and its bytes are those of a stop-the-world save at txid of a quiesced copy
    replay = _copy_current(nn, tmp_path / "replay", drop_image=txid)
    quiet = _copy_current(nn, tmp_path / "quiet", drop_image=txid)

    def save_at_txid(namespace: Namespace, applied: int, op: Op) -> None:
        if applied == txid:
            save_checkpoint([quiet], namespace, txid)

    load_namespace([replay], Namespace, on_applied=save_at_txid)
    saved = (_current(nn) / image_name(txid)).read_bytes()
    assert (quiet.current / image_name(txid)).read_bytes() == saved


async def test_a_writer_that_fails_leaves_no_image_and_the_namenode_serving(
    minicluster: MiniCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    nn = await _big_namenode(minicluster, dirs=10, files_per_dir=10)
    real_start, real_write = start_checkpoint, write_checkpoint_files

    def write_then_hang(*args: Any) -> str:
        # (in the forked writer) Its files written, it never reports: killed from the
        # NameNode, it has not finished whatever the scheduling (a small image written
        # and reported before the kill landed made the save succeed, once).
        real_write(*args)
        time.sleep(60)
        raise AssertionError("the writer was not killed")

    def start_killed(*args: Any) -> Checkpoint:
        checkpoint = real_start(*args)
        deadline = time.monotonic() + 10
        while not _ckpt_files(nn) and time.monotonic() < deadline:
            time.sleep(0.002)  # until it has files to leave behind
        os.kill(checkpoint.pid, signal.SIGKILL)
        return checkpoint

    monkeypatch.setattr(background_module, "write_checkpoint_files", write_then_hang)
    monkeypatch.setattr(server_module, "start_checkpoint", start_killed)
    async with connect(nn, ROOT, ROOT_PW) as root:
        await root.mkdirs("/after")
        with pytest.raises(StorageError, match="killed by SIGKILL"):
            await root.save_namespace()
        assert _ckpt_files(nn) == []
        assert nn.dirs[0].images() == [0]
        assert (await root.stat("/after")).is_dir
    monkeypatch.setattr(server_module, "start_checkpoint", real_start)
    monkeypatch.setattr(background_module, "write_checkpoint_files", real_write)
    async with connect(nn, ROOT, ROOT_PW) as root:
        txid = await root.save_namespace()
    restarted, _ = load_namespace([nn.dirs[0]], Namespace)
    assert max(nn.dirs[0].images()) == txid
    assert restarted.canonical_dump() == _fs(nn).ns.canonical_dump()


async def test_a_disk_that_fails_under_the_save_gets_a_storage_error_and_the_namenode_serving(
    minicluster: MiniCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk that fails while the image is installed (a power cut on the test's LazyFS
    layer answers ECONNABORTED) is a storage problem, said as one: not an internal error."""
    nn = await _big_namenode(minicluster, dirs=2, files_per_dir=2)

    def install_fails(*args: Any) -> None:
        raise ConnectionAbortedError(errno.ECONNABORTED, "Software caused connection abort")

    monkeypatch.setattr(background_module, "install_checkpoint_files", install_fails)
    async with connect(nn, ROOT, ROOT_PW) as root:
        await root.mkdirs("/before")  # (a save at the image's txid writes no image)
        with pytest.raises(StorageError, match=r"checkpoint failed: .*connection abort"):
            await root.save_namespace()
        assert _ckpt_files(nn) == []
        await root.mkdirs("/after")
        assert (await root.stat("/after")).is_dir


async def test_a_writer_that_hangs_is_killed_after_its_timeout(
    minicluster: MiniCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    nn = await _big_namenode(minicluster, dirs=10, files_per_dir=10,
                             config=nn_config(image_writer_timeout_s=0.5))
    writers: list[Checkpoint] = []

    def start_hung(*args: Any) -> Checkpoint:
        checkpoint = start_checkpoint(*args)
        os.kill(checkpoint.pid, signal.SIGSTOP)  # never finishes on its own
        writers.append(checkpoint)
        return checkpoint

    monkeypatch.setattr(server_module, "start_checkpoint", start_hung)
    async with connect(nn, ROOT, ROOT_PW) as root:
        await root.mkdirs("/after")
        with pytest.raises(StorageError, match=r"still running after 0\.5 s: killed"):
            await root.save_namespace()
        with pytest.raises(ProcessLookupError):  # killed and reaped
            os.kill(writers[0].pid, 0)
        assert _ckpt_files(nn) == []
        assert nn.dirs[0].images() == [0]
        assert (await root.stat("/after")).is_dir


Walk = Callable[[AsyncClient], Awaitable[object]]
WALKS: dict[str, tuple[Walk, Callable[[NameNode], WalkPacer]]] = {
    "fsck": (lambda c: c.fsck("/big"), lambda nn: _fs(nn).fsck_walks),
    "count": (lambda c: c.content_summary("/big"), lambda nn: _fs(nn).walks),
    "delete": (lambda c: c.delete("/big", recursive=True, skip_trash=True),
               lambda nn: _fs(nn).walks),
}


@pytest.mark.parametrize("name", sorted(WALKS))
async def test_a_stat_is_answered_while_a_walk_of_a_large_tree_runs(
    minicluster: MiniCluster, name: str
) -> None:
    """alice (not a superuser: her walks check permissions too) walks /big, 100k inodes in
    slices of one inode; a stat sent once the walk has started is answered before it ends."""
    config = nn_config(walk_slice_inodes=1, fsck_rate_inodes_per_s=0.0)
    nn = await _big_namenode(minicluster, dirs=200, files_per_dir=500, owner=ALICE,
                             config=config)
    walk, pacer_of = WALKS[name]
    pacer = pacer_of(nn)
    events: list[str] = []
    async with connect(nn, ROOT, ROOT_PW) as root:
        await root.add_user(ALICE, ALICE_PW, [])
        await root.set_permission("/", 0o777)  # alice may delete /big
        async with connect(nn, ALICE, ALICE_PW) as alice:
            await alice.stat("/")  # logged in before the walk starts

            async def run_walk() -> None:
                await walk(alice)
                events.append("walk")

            task = asyncio.create_task(run_walk())
            await eventually(lambda: pacer.slices > 0, what="the walk to start")
            assert (await root.stat("/big/d000199/f000499")).length == 0
            events.append("stat")
            await task
    assert events == ["stat", "walk"]
    assert pacer.slices >= 100_000


async def test_fsck_by_a_user_covers_only_what_they_may_read(minicluster: MiniCluster) -> None:
    nn = await _big_namenode(minicluster, dirs=3, files_per_dir=5, owner=ALICE)
    async with connect(nn, ROOT, ROOT_PW) as root:
        await root.add_user(ALICE, ALICE_PW, [])
        await root.mkdirs("/private", mode=0o700)
        async with connect(nn, ALICE, ALICE_PW) as alice:
            with pytest.raises(AccessDenied, match="/private"):
                await alice.fsck("/")
            report = await alice.fsck("/big")
            assert (report.files, report.directories) == (15, 4)
            await root.set_permission("/big/d000002", 0o700)
            await root.set_owner("/big/d000002", owner=ROOT)
            with pytest.raises(AccessDenied, match="d000002"):
                await alice.fsck("/big")
        assert (await root.fsck("/")).files == 15
