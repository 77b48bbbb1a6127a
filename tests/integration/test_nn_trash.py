"""The trash (DESIGN.md section 7): rm to .Trash/Current, restore, expunge, the emptier."""

from __future__ import annotations

import datetime as dt
import re
import time

import pytest

from xdfs.client.client import AsyncClient
from xdfs.errors import (
    AccessDenied,
    AlreadyExists,
    DirectoryNotEmpty,
    InvalidArgument,
    NotADirectory,
    NotFound,
)
from xdfs.testing.minicluster import MiniCluster
from xdfs.testing.poll import eventually

from .conftest import ROOT, Cluster, connect, nn_config, start_cluster, walk

CHECKPOINT = re.compile(r"^\d{12}$")


async def _names(client: AsyncClient, path: str) -> list[str]:
    return [e.path.rsplit("/", 1)[1] for e in await client.list_dir(path)]


async def test_rm_moves_to_the_users_trash(cluster: Cluster) -> None:
    root, alice = cluster.root, cluster["alice"]
    await alice.mkdirs("/tmp/proj/a")
    f = await alice.touchz("/tmp/proj/a/f")
    assert not await root.exists("/user/alice")

    response = await alice.delete("/tmp/proj/a/f")
    assert response.deleted
    assert response.trash_path == "/user/alice/.Trash/Current/tmp/proj/a/f"
    assert not await root.exists("/tmp/proj/a/f")
    moved = await root.stat(response.trash_path)
    assert (moved.inode_id, moved.owner) == (f.inode_id, "alice")

    # the trash directories: /user/alice the user's home, .Trash private to her
    home = await root.stat("/user/alice")
    assert (home.owner, home.mode) == ("alice", 0o755)
    trash = await root.stat("/user/alice/.Trash")
    assert (trash.owner, trash.mode) == ("alice", 0o700)
    assert (await root.stat("/user")).owner == ROOT
    with pytest.raises(AccessDenied):
        await cluster["bob"].list_dir("/user/alice/.Trash")

    # a directory (recursive) whose trash path is taken by the parents made for f
    response = await alice.delete("/tmp/proj/a", recursive=True)
    first = "/user/alice/.Trash/Current/tmp/proj/a"
    assert response.trash_path.startswith(first) and response.trash_path != first
    assert not await root.exists("/tmp/proj/a")
    assert (await root.stat(first + "/f")).inode_id == f.inode_id

    # a non-empty directory still needs recursive
    await alice.mkdirs("/tmp/proj/b/c")
    with pytest.raises(DirectoryNotEmpty):
        await alice.delete("/tmp/proj/b")

    # root's deletions go to root's trash
    await root.mkdirs("/data/x")
    assert (await root.delete("/data/x")).trash_path == "/user/root/.Trash/Current/data/x"


async def test_same_path_deleted_twice_keeps_both(cluster: Cluster) -> None:
    alice = cluster["alice"]
    first = await alice.touchz("/tmp/twice")
    trash1 = (await alice.delete("/tmp/twice")).trash_path
    second = await alice.touchz("/tmp/twice")
    trash2 = (await alice.delete("/tmp/twice")).trash_path
    third = await alice.touchz("/tmp/twice")
    trash3 = (await alice.delete("/tmp/twice")).trash_path
    assert trash1 == "/user/alice/.Trash/Current/tmp/twice"
    assert trash2.startswith(trash1) and trash2 != trash1
    assert len({trash1, trash2, trash3}) == 3
    assert [
        (await alice.stat(t)).inode_id for t in (trash1, trash2, trash3)
    ] == [first.inode_id, second.inode_id, third.inode_id]
    assert len(await alice.list_dir("/user/alice/.Trash/Current/tmp")) == 3


async def test_skip_trash_and_deleting_inside_the_trash(cluster: Cluster) -> None:
    root, alice = cluster.root, cluster["alice"]
    await alice.mkdirs("/tmp/gone/sub")
    response = await alice.delete("/tmp/gone", recursive=True, skip_trash=True)
    assert response.deleted and response.trash_path == ""
    assert not await root.exists("/tmp/gone")
    assert not await root.exists("/user/alice")

    await alice.touchz("/tmp/t")
    trash_path = (await alice.delete("/tmp/t")).trash_path
    # removing an entry of the trash deletes it for good (no trash of the trash)
    response = await alice.delete(trash_path)
    assert response.trash_path == ""
    assert not await root.exists(trash_path)
    assert await _names(alice, "/user/alice/.Trash/Current/tmp") == []


async def test_restore(cluster: Cluster) -> None:
    root, alice, bob = cluster.root, cluster["alice"], cluster["bob"]
    await alice.mkdirs("/tmp/proj/a")
    f = await alice.touchz("/tmp/proj/a/f")
    trash_path = (await alice.delete("/tmp/proj/a/f")).trash_path
    # the parents disappear too
    await alice.delete("/tmp/proj", recursive=True, skip_trash=True)

    with pytest.raises(AccessDenied):
        await bob.restore(trash_path)
    assert await alice.restore(trash_path) == "/tmp/proj/a/f"
    back = await alice.stat("/tmp/proj/a/f")
    assert (back.inode_id, back.owner) == (f.inode_id, "alice")
    assert not await root.exists(trash_path)
    for parent in ("/tmp/proj", "/tmp/proj/a"):
        status = await root.stat(parent)
        assert (status.is_dir, status.owner) == (True, "alice")

    # onto an existing path: refused, nothing changes
    trash_path = (await alice.delete("/tmp/proj/a/f")).trash_path
    await alice.touchz("/tmp/proj/a/f")
    before = await walk(root)
    with pytest.raises(AlreadyExists):
        await alice.restore(trash_path)
    # where a file now sits on the way
    await alice.delete("/tmp/proj/a", recursive=True, skip_trash=True)
    await alice.touchz("/tmp/proj/a")
    with pytest.raises(NotADirectory):
        await alice.restore(trash_path)
    await alice.delete("/tmp/proj/a", skip_trash=True)
    before = await walk(root)
    for bad in ("/tmp/proj", "/user/alice/.Trash/Current", "/user/alice/.Trash/notackpt/x"):
        with pytest.raises(InvalidArgument):
            await alice.restore(bad)
    with pytest.raises(NotFound):
        await alice.restore("/user/alice/.Trash/Current/tmp/never")
    assert await walk(root) == before
    assert await alice.restore(trash_path) == "/tmp/proj/a/f"


async def test_expunge_checkpoints_and_immediate(cluster: Cluster) -> None:
    root, alice = cluster.root, cluster["alice"]
    await alice.mkdirs("/tmp/e/d")
    await alice.touchz("/tmp/e/d/f")
    await alice.touchz("/tmp/e/g")
    await alice.delete("/tmp/e/d", recursive=True)
    await alice.delete("/tmp/e/g")
    before = time.time()
    await alice.expunge()
    after = time.time()

    names = await _names(alice, "/user/alice/.Trash")
    assert len(names) == 1 and CHECKPOINT.match(names[0]), names
    checkpoint = names[0]
    moment = dt.datetime.strptime(checkpoint, "%y%m%d%H%M%S").replace(tzinfo=dt.UTC)
    assert int(before) - 1 <= moment.timestamp() <= after + 1  # named after the UTC time
    base = f"/user/alice/.Trash/{checkpoint}"
    assert (await root.stat(f"{base}/tmp/e/d/f")).owner == "alice"
    assert await root.exists(f"{base}/tmp/e/g")
    # an entry of a checkpoint can be restored
    assert await alice.restore(f"{base}/tmp/e/g") == "/tmp/e/g"

    # a second expunge keeps the young checkpoint and rolls the new Current
    await alice.touchz("/tmp/e/h")
    await alice.delete("/tmp/e/h")
    await alice.expunge()
    names = await _names(alice, "/user/alice/.Trash")
    assert checkpoint in names and "Current" not in names
    assert all(CHECKPOINT.match(n) for n in names)
    found = [n for n in names if await root.exists(f"/user/alice/.Trash/{n}/tmp/e/h")]
    assert len(found) == 1
    # expunge touches only the caller's trash
    await root.mkdirs("/r")
    await root.delete("/r")
    await alice.expunge(immediate=True)
    assert await _names(alice, "/user/alice/.Trash") == []
    assert await root.exists("/user/root/.Trash/Current/r")
    assert not await root.exists(f"{base}/tmp/e/d/f")
    # nothing in the trash: expunge is a no-op
    await alice.expunge()
    await alice.expunge(immediate=True)
    async with connect(cluster.nn, "carol", "carol-pw") as carol:
        await carol.expunge()  # no trash at all


async def test_emptier_deletes_old_checkpoints(minicluster: MiniCluster) -> None:
    config = nn_config(trash_interval_s=1.0, trash_checkpoint_interval_s=0.1)
    c = await start_cluster(minicluster, config, users=False)
    try:
        root = c.root
        await root.mkdirs("/data/sub")
        await root.touchz("/data/sub/f")
        trash_path = (await root.delete("/data", recursive=True)).trash_path
        assert trash_path == "/user/root/.Trash/Current/data"
        assert (await root.stat(trash_path)).is_dir

        async def emptied() -> bool:
            return await _names(root, "/user/root/.Trash") == []

        await eventually(emptied)  # rolled into a checkpoint, then deleted when old
        assert not await root.exists("/data")
        # the emptier's deletions are logged like any other change: they survive a restart
        await minicluster.stop_namenode(c.nn)
        await c.close()
        nn = await minicluster.start_namenode(format_dirs=False, config=config)
        async with connect(nn, ROOT, "rootpw") as again:
            assert await _names(again, "/user/root/.Trash") == []
            assert (await again.stat("/user/root/.Trash")).is_dir
    finally:
        await c.close()


async def test_trash_disabled_deletes_at_once(minicluster: MiniCluster) -> None:
    c = await start_cluster(minicluster, nn_config(trash_interval_s=0), users=False)
    try:
        await c.root.mkdirs("/x/y")
        response = await c.root.delete("/x", recursive=True)
        assert response.deleted and response.trash_path == ""
        assert not await c.root.exists("/x")
        assert not await c.root.exists("/user/root")
        await c.root.expunge()  # nothing to do
    finally:
        await c.close()


async def test_trash_edge_cases(cluster: Cluster) -> None:
    root, alice = cluster.root, cluster["alice"]
    # a path that contains the trash cannot move into it, and nothing is left behind
    await root.mkdirs("/user/root/docs")
    before = await walk(root)
    for path in ("/user/root", "/user"):
        with pytest.raises(InvalidArgument, match="contains the trash"):
            await root.delete(path, recursive=True)
    assert await walk(root) == before
    status = await root.status()
    assert status.last_txid == status.synced_txid

    # a file trashed earlier sits where a later deletion needs a directory
    await alice.touchz("/tmp/a")
    await alice.delete("/tmp/a")
    await alice.mkdirs("/tmp/a/b")
    trash_path = (await alice.delete("/tmp/a/b")).trash_path
    assert trash_path.startswith("/user/alice/.Trash/Current/tmp/a")
    assert trash_path.endswith("/b")
    assert (await root.stat(trash_path)).is_dir
    assert not (await root.stat("/user/alice/.Trash/Current/tmp/a")).is_dir
    assert not await root.exists("/tmp/a/b")

    # restoring what is not there creates nothing on the way
    before = await walk(root)
    with pytest.raises(NotFound):
        await root.restore("/user/root/.Trash/Current/p/q/r")
    assert not await root.exists("/p")
    assert await walk(root) == before


async def test_restore_of_suffixed_trash_names_goes_back_to_the_original(
    cluster: Cluster,
) -> None:
    """Issue 17 item 13: the second trashed copy of a path (``Current/p<ms>``) restores to
    ``p``; names that end in digits, on their own or on the way, come back unchanged."""
    root, alice = cluster.root, cluster["alice"]
    first = await alice.touchz("/tmp/p")
    trash1 = (await alice.delete("/tmp/p")).trash_path
    second = await alice.touchz("/tmp/p")
    trash2 = (await alice.delete("/tmp/p")).trash_path
    assert re.fullmatch(r"/user/alice/\.Trash/Current/tmp/p\d{13}", trash2), trash2
    assert await alice.restore(trash2) == "/tmp/p"
    assert (await alice.stat("/tmp/p")).inode_id == second.inode_id
    with pytest.raises(AlreadyExists):
        await alice.restore(trash1)
    await alice.delete("/tmp/p", skip_trash=True)
    assert await alice.restore(trash1) == "/tmp/p"
    assert (await alice.stat("/tmp/p")).inode_id == first.inode_id

    # a name that already ends in 13 digits is suffixed in the trash, so it survives restore
    stamped = "/tmp/events-1700000000000"
    await alice.touchz(stamped)
    trash3 = (await alice.delete(stamped)).trash_path
    assert trash3 != "/user/alice/.Trash/Current" + stamped
    assert await alice.restore(trash3) == stamped
    # ... and so does a directory of such a name on the way to the entry
    await alice.mkdirs("/tmp/day-1700000000000_/part")
    await alice.touchz("/tmp/day-1700000000000_/part/x")
    trash4 = (await alice.delete("/tmp/day-1700000000000_/part/x")).trash_path
    assert await alice.restore(trash4) == "/tmp/day-1700000000000_/part/x"

    # a file on the way (trashed /tmp/a, then /tmp/a/b): the suffixed component restores too
    await alice.touchz("/tmp/a")
    await alice.delete("/tmp/a")
    await alice.mkdirs("/tmp/a/b")
    trash5 = (await alice.delete("/tmp/a/b")).trash_path
    assert re.fullmatch(r"/user/alice/\.Trash/Current/tmp/a\d{13}/b", trash5), trash5
    await alice.delete("/tmp/a", recursive=True, skip_trash=True)
    assert await alice.restore(trash5) == "/tmp/a/b"
    assert (await root.stat("/tmp/a/b")).is_dir
