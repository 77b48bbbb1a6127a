"""Durability and restart: edits, images, name dirs, locks, safe mode, status (DESIGN 4)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from xdfs.errors import InvalidArgument, SafeModeError, StorageError
from xdfs.namenode.server import NameNode
from xdfs.protocol import namenode as p
from xdfs.testing.lazyfs import LazyFS
from xdfs.testing.minicluster import MiniCluster
from xdfs.testing.poll import eventually

from .conftest import (
    ROOT,
    ROOT_PW,
    USERS,
    Cluster,
    connect,
    nn_config,
    run_xdfs,
    start_cluster,
    walk,
    write_file,
)

FINALIZED = re.compile(r"^edits_(\d{19})-(\d{19})$")
IN_PROGRESS = re.compile(r"^edits_inprogress_(\d{19})$")
IMAGE = re.compile(r"^fsimage_(\d{19})$")


def _current(minicluster: MiniCluster, index: int = 0) -> Path:
    return minicluster.base_dir / f"nn-dir{index}" / "current"


def _files(current: Path, pattern: re.Pattern[str]) -> list[tuple[int, ...]]:
    out = []
    for path in current.iterdir():
        found = pattern.match(path.name)
        if found:
            out.append(tuple(int(g) for g in found.groups()))
    return sorted(out)


async def _populate(c: Cluster) -> str:
    """A varied namespace; returns a token of alice issued before any restart."""
    root, alice, bob = c.root, c["alice"], c["bob"]
    await root.mkdirs("/data/a/b/c")
    await root.mkdirs("/shared", mode=0o1777)
    await root.set_owner("/shared", group="staff")
    await alice.mkdirs("/shared/alice", mode=0o750)
    await write_file(alice, "/shared/alice/big", [4096, 4096, 123], replication=3)
    await bob.touchz("/shared/bob-empty")
    await bob.create("/shared/bob-open")  # still under construction at the restart
    await root.set_permission("/data/a", 0o700)
    await root.set_times("/data/a/b", mtime_ms=1_000_000, atime_ms=2_000_000)
    await root.set_replication("/shared/alice/big", 1)
    await root.mkdirs("/data/to-delete/x")
    await root.delete("/data/to-delete", recursive=True)  # to the trash
    await root.mkdirs("/data/gone")
    await root.delete("/data/gone", skip_trash=True)
    await root.mkdirs("/data/old-name")
    await root.rename("/data/old-name", "/data/a/b")  # into: /data/a/b/old-name
    return (await root.login("alice", USERS["alice"][0])).token


async def test_clean_restart_keeps_everything(minicluster: MiniCluster) -> None:
    c = await start_cluster(minicluster)
    token = await _populate(c)
    before = await _snapshot(c)
    await c.close()
    await minicluster.stop_namenode(c.nn)
    await _check_restart(minicluster, before, token)


@pytest.mark.powerloss
async def test_power_cut_keeps_everything_acknowledged(tmp_path: Path, lazyfs: LazyFS) -> None:
    """The same namespace, but the machine loses power instead of a clean stop: whatever
    the NameNode acknowledged was synced (edits, and every file and directory under them)."""
    async with MiniCluster(lazyfs.path) as minicluster:
        c = await start_cluster(minicluster)
        token = await _populate(c)
        before = await _snapshot(c)
        await asyncio.to_thread(lazyfs.power_cut)
        await c.close()
        with contextlib.suppress(StorageError):  # its disk is gone: it cannot stop cleanly
            await minicluster.stop_namenode(c.nn)
        await _check_restart(minicluster, before, token)


@dataclass
class _Before:
    tree: dict[str, tuple[object, ...]]
    dump: object
    status: p.NameNodeStatus


async def _snapshot(c: Cluster) -> _Before:
    dump = c.nn.fs.ns.canonical_dump() if c.nn.fs else None
    return _Before(await walk(c.root), dump, await c.root.status())


async def _check_restart(minicluster: MiniCluster, before: _Before, token: str) -> None:
    """A NameNode restarted on the dirs of the stopped one serves exactly ``before``."""
    tree, dump, status = before.tree, before.dump, before.status
    # no DataNode reports the blocks to the new NameNode: without a block threshold it
    # leaves startup safe mode at once (tests/integration/test_nn_datanodes.py covers it)
    nn = await minicluster.start_namenode(
        format_dirs=False, config=nn_config(safe_mode_threshold=0.0)
    )
    assert nn.fs is not None
    async with connect(nn, ROOT, ROOT_PW) as root:
        assert await walk(root) == tree
        assert nn.fs.ns.canonical_dump() == dump  # users, keys and counters too
        again = await root.status()
        assert (again.last_txid, again.inodes, again.files_under_construction) == (
            status.last_txid, status.inodes, 1,
        )
        assert again.cluster_id == status.cluster_id
        assert again.namespace_id == status.namespace_id
        # new inodes never reuse an id
        new = await root.mkdirs("/after-restart")
        assert new.inode_id > max(int(str(fields[10])) for fields in tree.values())
    # passwords and tokens issued before the restart still work
    async with connect(nn, "bob", USERS["bob"][0]) as bob:
        assert (await bob.stat("/shared/bob-empty")).owner == "bob"
    async with connect(nn, token=token) as alice:
        assert (await alice.stat("/shared/alice/big")).length == 8315


async def test_save_namespace_then_edits(minicluster: MiniCluster) -> None:
    c = await start_cluster(minicluster)
    await _populate(c)
    txid = await c.root.save_namespace()
    assert (txid,) in _files(_current(minicluster), IMAGE)
    assert (_current(minicluster) / f"fsimage_{txid:019d}.md5").exists()
    assert (await c.root.status()).image_txid == txid
    # a save with no change since writes no new image
    assert await c.root.save_namespace() >= txid

    # more changes after the image, touching what the image holds
    await c.root.delete("/data/a", recursive=True, skip_trash=True)
    await c.root.rename("/shared/alice", "/alice-moved")
    await c["bob"].complete("/shared/bob-open", [])
    await c.root.add_user("dave", "dave-pw", ["g"])
    await c.root.mkdirs("/after-image")
    tree = await walk(c.root)
    last_txid = (await c.root.status()).last_txid
    assert last_txid > txid
    await c.close()
    await minicluster.stop_namenode(c.nn)

    nn = await minicluster.start_namenode(format_dirs=False)
    async with connect(nn, ROOT, ROOT_PW) as root:
        assert await walk(root) == tree
        status = await root.status()
        assert status.image_txid >= txid and status.last_txid == last_txid
    async with connect(nn, "dave", "dave-pw") as dave:
        assert (await dave.stat("/after-image")).is_dir


async def test_images_retained_and_automatic_checkpoints(minicluster: MiniCluster) -> None:
    config = nn_config(checkpoint_txns=25, checkpoint_check_interval_s=0.05)
    nn = await minicluster.start_namenode(config=config)
    current = _current(minicluster)
    async with connect(nn, ROOT, ROOT_PW) as root:
        txids = []
        for round_number in range(3):
            await root.mkdirs(f"/round{round_number}")
            txids.append(await root.save_namespace())
        images = [t for (t,) in _files(current, IMAGE)]
        assert images[-2:] == txids[-2:] and len(images) == 2  # the newest 2 are kept
        # no finalized segment that only the purged images needed
        for start, end in _files(current, FINALIZED):
            assert end > images[0], (start, end, images)

        # the checkpointer writes an image by itself after checkpoint_txns edits
        await asyncio.gather(*(root.mkdirs(f"/many/d{i}") for i in range(40)))

        async def new_image() -> bool:
            return (await root.status()).image_txid > txids[-1]

        await eventually(new_image)
        image_txid = (await root.status()).image_txid
        assert (image_txid,) in _files(current, IMAGE)
        tree = await walk(root)
    await minicluster.stop_namenode(nn)
    nn = await minicluster.start_namenode(format_dirs=False, config=config)
    async with connect(nn, ROOT, ROOT_PW) as root:
        assert await walk(root) == tree


async def test_roll_edits_finalizes_a_segment(nn: NameNode, minicluster: MiniCluster) -> None:
    current = _current(minicluster)
    async with connect(nn, ROOT, ROOT_PW) as root:
        await root.mkdirs("/x/y")
        before = await root.status()
        start = await root.roll_edits()
        assert start == before.last_txid + 1
        finalized = _files(current, FINALIZED)
        assert finalized and finalized[-1][1] == before.last_txid
        assert all(s <= e for s, e in finalized)
        assert _files(current, IN_PROGRESS) == [(start,)]
        await root.mkdirs("/z")
        status = await root.status()
        assert status.segment_start_txid == start and status.last_txid == start
        # segments are contiguous
        ranges = [*finalized, (start, status.last_txid)]
        for (_s1, e1), (s2, _e2) in itertools.pairwise(ranges):
            assert s2 == e1 + 1
        # every name in the dir follows the layout
        for path in current.iterdir():
            assert re.match(
                r"^(VERSION|seen_txid|edits_\d{19}-\d{19}|edits_inprogress_\d{19}"
                r"|fsimage_\d{19}(\.md5)?)$", path.name,
            ), path.name
        tree = await walk(root)
    await minicluster.stop_namenode(nn)
    # a clean stop finalizes the open segment too
    assert _files(current, IN_PROGRESS) == []
    assert _files(current, FINALIZED)[-1][1] == status.last_txid
    nn = await minicluster.start_namenode(format_dirs=False)
    async with connect(nn, ROOT, ROOT_PW) as root:
        assert await walk(root) == tree


async def test_second_namenode_on_the_same_dir_refuses(
    nn: NameNode, minicluster: MiniCluster
) -> None:
    name_dir = minicluster.base_dir / "nn-dir0"
    second = NameNode(minicluster.config, [name_dir])
    with pytest.raises(StorageError, match="locked"):
        await second.start("127.0.0.1", 0)
    with pytest.raises(StorageError, match="locked"):
        await second.start("127.0.0.1", 0)  # and the failed attempt released nothing
    # another process is refused too
    code, out, err = await run_xdfs(
        "namenode", "--name-dir", str(name_dir), "--rpc-address", "127.0.0.1:0"
    )
    assert code != 0 and "locked" in out + err
    # the first NameNode still owns its dir and serves
    async with connect(nn, ROOT, ROOT_PW) as root:
        await root.mkdirs("/still-serving")
        await root.roll_edits()
        assert (await root.stat("/still-serving")).is_dir


async def test_two_name_dirs_get_identical_files(minicluster: MiniCluster) -> None:
    nn = await minicluster.start_namenode(name_dir_count=2)
    async with connect(nn, ROOT, ROOT_PW) as root:
        await root.mkdirs("/a/b")
        await root.roll_edits()
        await asyncio.gather(*(root.mkdirs(f"/a/d{i}") for i in range(20)))
        await root.save_namespace()
        await root.touchz("/a/f")
        await root.delete("/a/b", skip_trash=True)
        status = await root.status()
        assert len(status.name_dirs) == 2
        tree = await walk(root)
    await minicluster.stop_namenode(nn)

    first, second = _current(minicluster, 0), _current(minicluster, 1)
    names = sorted(p.name for p in first.iterdir() if p.name != "in_use.lock")
    assert names == sorted(p.name for p in second.iterdir() if p.name != "in_use.lock")
    edits = [n for n in names if n.startswith("edits_")]
    assert len(edits) >= 2
    for name in names:
        if name.startswith(("edits_", "fsimage_", "seen_txid")):
            assert (first / name).read_bytes() == (second / name).read_bytes(), name

    # either dir alone is enough to start from
    for survivor in (0, 1):
        other = minicluster.base_dir / f"nn-dir{1 - survivor}"
        hidden = other.with_name(other.name + ".hidden")
        other.rename(hidden)
        try:
            node = NameNode(minicluster.config, [minicluster.base_dir / f"nn-dir{survivor}"])
            await node.start("127.0.0.1", 0)
            try:
                async with connect(node, ROOT, ROOT_PW) as root:
                    assert await walk(root) == tree
            finally:
                await node.stop()
        finally:
            hidden.rename(other)


async def test_safe_mode(cluster: Cluster) -> None:
    root, alice = cluster.root, cluster["alice"]
    await root.mkdirs("/sm/dir")
    await root.touchz("/sm/f")
    await alice.touchz("/tmp/alice-f")

    status = await root.safe_mode("enter")
    assert status.on and status.reason
    assert (await alice.safe_mode("get")).on
    assert (await root.status()).safe_mode
    before_tree = await walk(root)
    before_txid = (await root.status()).last_txid
    for call in (
        lambda: root.mkdirs("/sm/new"),
        lambda: root.create("/sm/g"),
        lambda: root.touchz("/sm/g"),
        lambda: root.delete("/sm/f", skip_trash=True),
        lambda: root.delete("/sm/f"),
        lambda: root.rename("/sm/f", "/sm/h"),
        lambda: root.set_permission("/sm/f", 0o600),
        lambda: root.set_owner("/sm/f", "alice"),
        lambda: root.set_replication("/sm/f", 3),
        lambda: root.set_times("/sm/f", 1, 1),
        root.expunge,
        lambda: root.add_user("dave", "pw"),
        lambda: root.set_password("alice", "new"),
        lambda: alice.mkdirs("/tmp/alice-dir"),
        lambda: alice.delete("/tmp/alice-f"),
    ):
        with pytest.raises(SafeModeError):
            await call()
    # reads work
    assert (await alice.stat("/sm/f")).path == "/sm/f"
    assert [e.path for e in await alice.list_dir("/sm")] == ["/sm/dir", "/sm/f"]
    assert (await alice.content_summary("/sm")).directory_count == 2
    assert await walk(root) == before_tree
    assert (await root.status()).last_txid == before_txid
    # entering twice is fine; leaving ends it
    assert (await root.safe_mode("enter")).on
    status = await root.safe_mode("leave")
    assert not status.on
    assert not (await alice.safe_mode("get")).on
    await root.mkdirs("/sm/new")
    await alice.mkdirs("/tmp/alice-dir")
    assert (await root.status()).last_txid > before_txid
    with pytest.raises(InvalidArgument):
        await root.safe_mode("sideways")


async def test_status_numbers(nn: NameNode, minicluster: MiniCluster) -> None:
    async with connect(nn, ROOT, ROOT_PW) as root:
        s0 = await root.status()
        assert s0.cluster_id == "CID-nn" and s0.namespace_id > 0
        assert s0.inodes == 3  # /, /user and /tmp
        assert s0.files_under_construction == 0
        assert not s0.safe_mode
        assert s0.synced_txid == s0.last_txid
        assert s0.image_txid == 0  # the image format wrote
        assert s0.segment_start_txid == 1
        assert s0.name_dirs == [str(minicluster.base_dir / "nn-dir0")]
        assert 0 < s0.started_at_ms <= int(time.time() * 1000)

        await root.mkdirs("/a/b")  # two mkdir ops
        s1 = await root.status()
        assert s1.last_txid == s0.last_txid + 2 == s1.synced_txid
        assert s1.inodes == 5
        await root.create("/a/open")
        await root.create("/a/open2")
        s2 = await root.status()
        assert (s2.inodes, s2.files_under_construction) == (7, 2)
        assert s2.last_txid == s1.last_txid + 2
        await root.complete("/a/open", [])
        await root.delete("/a/b", skip_trash=True)
        s3 = await root.status()
        assert (s3.inodes, s3.files_under_construction) == (6, 1)
        assert s3.last_txid == s2.last_txid + 2
        start = await root.roll_edits()
        assert (await root.status()).segment_start_txid == start == s3.last_txid + 1
        txid = await root.save_namespace()
        s4 = await root.status()
        assert s4.image_txid == txid and s4.last_txid == s4.synced_txid
        assert (await root.safe_mode("enter")).on and (await root.status()).safe_mode
        await root.safe_mode("leave")
