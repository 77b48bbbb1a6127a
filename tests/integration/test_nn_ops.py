"""Namespace operations of a real NameNode through its RPC interface (DESIGN.md section 4)."""

from __future__ import annotations

import asyncio
import random

import pytest

from xdfs.client.client import AsyncClient
from xdfs.errors import (
    AlreadyExists,
    DirectoryNotEmpty,
    InvalidArgument,
    InvalidPath,
    IsADirectory,
    LeaseError,
    NotADirectory,
    NotFound,
)
from xdfs.protocol import namenode as p
from xdfs.protocol.blocks import BlockRecord
from xdfs.testing.minicluster import MiniCluster

from .conftest import (
    ROOT,
    ROOT_PW,
    Cluster,
    connect,
    nn_config,
    walk,
    write_file,
)
from .fake_datanodes import fake_datanodes_of

MiB = 1024 * 1024


async def test_mkdirs_with_and_without_parents(root: AsyncClient) -> None:
    status = await root.mkdirs("/a/b/c")
    assert (status.path, status.is_dir) == ("/a/b/c", True)
    for path in ("/a", "/a/b", "/a/b/c"):
        assert (await root.stat(path)).is_dir

    before = await walk(root)
    with pytest.raises(NotFound):
        await root.mkdirs("/x/y", parents=False)
    with pytest.raises(AlreadyExists):
        await root.mkdirs("/a/b", parents=False)
    assert await walk(root) == before

    # mkdir -p of an existing directory is a no-op that answers with its status
    again = await root.mkdirs("/a/b", parents=True)
    assert again.inode_id == before["/a/b"][10]
    assert await walk(root) == before

    # without parents, one missing level is fine
    await root.mkdirs("/a/b/c/d", parents=False)
    assert (await root.stat("/a/b/c/d")).is_dir


async def test_mkdirs_with_a_file_in_the_way(root: AsyncClient) -> None:
    await root.mkdirs("/a")
    await root.touchz("/a/f")
    before = await walk(root)
    for parents in (True, False):
        with pytest.raises(AlreadyExists):
            await root.mkdirs("/a/f", parents=parents)
        with pytest.raises(NotADirectory):
            await root.mkdirs("/a/f/g", parents=parents)
    with pytest.raises(NotADirectory):
        await root.mkdirs("/a/f/g/h/i")
    with pytest.raises(NotADirectory):
        await root.create("/a/f/g")
    assert await walk(root) == before
    assert not (await root.stat("/a/f")).is_dir


async def test_mkdirs_explicit_mode_and_bad_mode(root: AsyncClient) -> None:
    status = await root.mkdirs("/m", mode=0o700)
    assert status.mode == 0o700
    # the explicit mode is for the last component; missing parents get the default
    await root.mkdirs("/p1/p2", mode=0o711)
    assert (await root.stat("/p1")).mode == 0o755
    assert (await root.stat("/p1/p2")).mode == 0o711
    with pytest.raises(InvalidArgument):
        await root.mkdirs("/bad", mode=0o17777)
    assert not await root.exists("/bad")


async def test_touchz_and_stat_fields(cluster: Cluster) -> None:
    root, alice, bob = cluster.root, cluster["alice"], cluster["bob"]
    await root.mkdirs("/proj", mode=0o777)
    await root.set_owner("/proj", group="staff")
    await root.set_times("/proj", mtime_ms=1000)

    f = await alice.touchz("/proj/f")
    assert f.path == "/proj/f"
    assert not f.is_dir and not f.under_construction
    assert (f.owner, f.group) == ("alice", "staff")
    assert f.mode == 0o644  # 666 & ~022
    assert f.replication == 2  # the configured default
    assert f.block_size == 64 * MiB
    assert f.length == 0 and f.children == 0
    assert f.mtime_ms > 1000 and f.atime_ms > 0
    assert await alice.stat("/proj/f") == f
    # creating a file touched the parent's mtime
    parent = await root.stat("/proj")
    assert parent.mtime_ms > 1000 and parent.children == 1

    d = await alice.mkdirs("/proj/d")
    assert (d.owner, d.group, d.mode, d.is_dir) == ("alice", "staff", 0o755, True)
    assert (d.replication, d.block_size, d.length) == (0, 0, 0)

    # the group comes from the parent, not from the creator's groups (bob is in dev only)
    g = await bob.touchz("/proj/g")
    assert (g.owner, g.group) == ("bob", "staff")
    await bob.mkdirs("/proj/p/q/r")
    for path in ("/proj/p", "/proj/p/q", "/proj/p/q/r"):
        status = await root.stat(path)
        assert (status.owner, status.group, status.mode) == ("bob", "staff", 0o755)
    # a file created with missing parents: parents get the parent's group too
    h = await bob.create("/proj/new/deep/h")
    assert (h.group, (await root.stat("/proj/new/deep")).group) == ("staff", "staff")
    assert h.under_construction
    await bob.complete("/proj/new/deep/h", [])
    assert not (await bob.stat("/proj/new/deep/h")).under_construction

    # touchz of an existing empty file leaves it as it is; of a directory it refuses
    assert await alice.touchz("/proj/f") == f
    with pytest.raises(AlreadyExists):
        await alice.touchz("/proj/d")
    # a file with an explicit replication and block size
    r = await alice.create("/proj/r", replication=3, block_size=4 * MiB, mode=0o600)
    assert (r.replication, r.block_size, r.mode) == (3, 4 * MiB, 0o600)
    # the root directory's fields
    slash = await alice.stat("/")
    assert (slash.path, slash.is_dir, slash.owner, slash.mode) == ("/", True, ROOT, 0o755)
    with pytest.raises(NotFound):
        await alice.stat("/proj/missing")


async def test_create_refusals(root: AsyncClient) -> None:
    await root.mkdirs("/c/dir")
    await root.touchz("/c/f")
    before = await walk(root)
    with pytest.raises(AlreadyExists):
        await root.create("/c/f")
    with pytest.raises(IsADirectory):
        await root.create("/c/dir", overwrite=True)
    with pytest.raises(NotFound):
        await root.create("/c/missing/f", create_parents=False)
    with pytest.raises(InvalidArgument):
        await root.create("/c/rep0", replication=40)
    with pytest.raises(InvalidArgument):
        await root.create("/c/small", block_size=100)
    assert await walk(root) == before


async def test_list_paging_over_2500_entries(root: AsyncClient) -> None:
    await root.mkdirs("/big")
    names = [f"n{i}" for i in range(2500)]  # lexicographic order differs from numeric
    shuffled = names[:]
    random.Random(7).shuffle(shuffled)
    for start in range(0, len(shuffled), 250):
        batch = shuffled[start : start + 250]
        await asyncio.gather(*(root.mkdirs(f"/big/{n}", parents=False) for n in batch))
    assert (await root.stat("/big")).children == 2500

    listed = [entry.path async for entry in root.iter_dir("/big", page_size=1000)]
    assert len(listed) == 2500
    assert len(set(listed)) == 2500
    assert listed == [f"/big/{n}" for n in sorted(names)]

    # the pages themselves: 1000, 1000, 500 with the remaining counts
    pages = []
    start_after = ""
    while True:
        listing = await root.rpc.call(p.LIST, p.ListRequest("/big", start_after, 1000))
        pages.append((len(listing.entries), listing.remaining))
        if not listing.remaining:
            break
        start_after = listing.entries[-1].path.rsplit("/", 1)[1]
    assert pages == [(1000, 1500), (1000, 500), (500, 0)]

    # entries added and removed between pages: still sorted, no duplicates, the survivors
    # that were there all along are all listed
    seen: list[str] = []
    async for entry in root.iter_dir("/big", page_size=1000):
        seen.append(entry.path.rsplit("/", 1)[1])
        if len(seen) == 1000:
            await root.delete(f"/big/{seen[0]}", skip_trash=True)  # already listed
            await root.delete("/big/n999", skip_trash=True)  # not listed yet
            await root.mkdirs("/big/n0a", parents=False)  # before the cursor
            await root.mkdirs("/big/zz", parents=False)  # after the cursor
    assert seen == sorted(set(seen))
    assert "zz" in seen and "n999" not in seen and "n0a" not in seen
    assert set(names) - {"n999"} <= set(seen)
    await root.delete("/big/n0a", skip_trash=True)
    await root.delete("/big/zz", skip_trash=True)
    await root.mkdirs("/big/n0", parents=False)
    await root.mkdirs("/big/n999", parents=False)

    # start_after a name that is not there starts at the next one
    listing = await root.rpc.call(p.LIST, p.ListRequest("/big", "n2499a", 3))
    assert [e.path for e in listing.entries] == ["/big/n25", "/big/n250", "/big/n251"]
    # a file lists itself; a missing path is NotFound
    await root.touchz("/big/n1/file")
    assert [e.path for e in await root.list_dir("/big/n1/file")] == ["/big/n1/file"]
    with pytest.raises(NotFound):
        await root.list_dir("/nothing")


async def test_delete(root: AsyncClient) -> None:
    await root.mkdirs("/d/full/sub")
    await root.touchz("/d/full/sub/f")
    await root.mkdirs("/d/empty")
    before = await walk(root)
    with pytest.raises(DirectoryNotEmpty):
        await root.delete("/d/full", recursive=False, skip_trash=True)
    with pytest.raises(DirectoryNotEmpty):
        await root.delete("/d/full")  # to the trash: still needs recursive
    for recursive in (False, True):
        with pytest.raises(InvalidArgument):
            await root.delete("/", recursive=recursive, skip_trash=True)
    with pytest.raises(NotFound):
        await root.delete("/d/missing", skip_trash=True)
    assert await walk(root) == before

    response = await root.delete("/d/empty", skip_trash=True)
    assert response.deleted and response.trash_path == ""
    assert not await root.exists("/d/empty")
    response = await root.delete("/d/full", recursive=True, skip_trash=True)
    assert response.deleted and response.trash_path == ""
    for path in ("/d/full", "/d/full/sub", "/d/full/sub/f"):
        assert not await root.exists(path)
    assert (await root.stat("/d")).children == 0
    assert not await root.exists("/user/root/.Trash")
    # a file
    await root.touchz("/d/f")
    await root.delete("/d/f", skip_trash=True)
    assert not await root.exists("/d/f")


async def test_rename_files(root: AsyncClient) -> None:
    await root.mkdirs("/r/dir")
    a = await root.touchz("/r/a")
    assert await root.rename("/r/a", "/r/b") == "/r/b"
    assert not await root.exists("/r/a")
    assert (await root.stat("/r/b")).inode_id == a.inode_id

    # into an existing directory: moves inside it
    assert await root.rename("/r/b", "/r/dir") == "/r/dir/b"
    assert (await root.stat("/r/dir/b")).inode_id == a.inode_id
    assert not await root.exists("/r/b")
    # a trailing slash names the same directory
    assert await root.rename("/r/dir/b", "/r/") == "/r/b"

    # onto an existing file: refused, nothing changes
    await root.touchz("/r/c")
    before = await walk(root)
    with pytest.raises(AlreadyExists):
        await root.rename("/r/b", "/r/c")
    # into a directory that already has that name
    await root.touchz("/r/dir/b")
    before = await walk(root)
    with pytest.raises(AlreadyExists):
        await root.rename("/r/b", "/r/dir")
    with pytest.raises(NotFound):
        await root.rename("/r/missing", "/r/x")
    with pytest.raises(NotFound):
        await root.rename("/r/b", "/r/nodir/x")
    with pytest.raises(NotADirectory):
        await root.rename("/r/b", "/r/c/x")
    with pytest.raises(InvalidArgument):
        await root.rename("/", "/r/rootmoved")
    assert await walk(root) == before


async def test_rename_updates_both_parents_mtime(root: AsyncClient) -> None:
    await root.mkdirs("/src")
    await root.mkdirs("/dst")
    await root.touchz("/src/f")
    await root.set_times("/src", mtime_ms=1000)
    await root.set_times("/dst", mtime_ms=1000)
    await root.rename("/src/f", "/dst/f")
    assert (await root.stat("/src")).mtime_ms > 1000
    assert (await root.stat("/dst")).mtime_ms > 1000


async def test_rename_directory_moves_subtree_intact(cluster: Cluster) -> None:
    root, alice = cluster.root, cluster["alice"]
    await root.mkdirs("/t", mode=0o777)
    await alice.mkdirs("/t/src/a/x")
    await alice.mkdirs("/t/src/b", mode=0o700)
    await write_file(alice, "/t/src/a/file", [1000, 24], replication=3)
    await alice.touchz("/t/src/a/x/empty")
    await root.set_owner("/t/src/b", owner="bob", group="dev")
    await alice.create("/t/src/open")  # under construction: the lease follows the file
    before = await walk(root, "/t/src")

    assert await alice.rename("/t/src", "/t/dst") == "/t/dst"
    assert not await root.exists("/t/src")
    after = await walk(root, "/t/dst")
    moved = {
        "/t/dst" + path[len("/t/src") :]: ("/t/dst" + path[len("/t/src") :], *fields[1:])
        for path, fields in before.items()
    }
    # the subtree arrives intact: same inodes, modes, owners, times, blocks, leases
    assert after.keys() == moved.keys()
    assert after == moved
    await alice.complete("/t/dst/open", [])

    # into its own subtree: refused, nothing changes
    before = await walk(root)
    with pytest.raises(InvalidArgument):
        await alice.rename("/t/dst", "/t/dst/a/x")
    with pytest.raises(InvalidArgument):
        await alice.rename("/t/dst", "/t/dst")  # dst is a dir: would be /t/dst/dst
    assert await walk(root) == before

    # into an existing directory
    await root.mkdirs("/t/into", mode=0o777)
    assert await alice.rename("/t/dst", "/t/into") == "/t/into/dst"
    assert (await root.stat("/t/into/dst/a/file")).length == 1024


async def test_set_permission_owner_replication_times(root: AsyncClient) -> None:
    await root.mkdirs("/s/dir")
    await root.touchz("/s/f")

    await root.set_permission("/s/f", 0o600)
    assert (await root.stat("/s/f")).mode == 0o600
    await root.set_permission("/s/dir", 0o1777)
    assert (await root.stat("/s/dir")).mode == 0o1777
    with pytest.raises(InvalidArgument):
        await root.set_permission("/s/f", 0o10000)
    with pytest.raises(InvalidArgument):
        await root.set_permission("/s/f", -5)
    with pytest.raises(NotFound):
        await root.set_permission("/s/missing", 0o644)

    await root.set_owner("/s/f", "alice", "staff")
    status = await root.stat("/s/f")
    assert (status.owner, status.group) == ("alice", "staff")
    await root.set_owner("/s/f", group="dev")  # group only
    status = await root.stat("/s/f")
    assert (status.owner, status.group) == ("alice", "dev")
    await root.set_owner("/s/f", owner="bob")  # owner only
    status = await root.stat("/s/f")
    assert (status.owner, status.group) == ("bob", "dev")
    with pytest.raises(InvalidArgument):
        await root.set_owner("/s/f")
    with pytest.raises(InvalidPath):
        await root.set_owner("/s/f", owner="bad/name")
    with pytest.raises(InvalidPath):
        await root.set_owner("/s/f", "alice", "bad\x00group")

    await root.set_replication("/s/f", 5)
    assert (await root.stat("/s/f")).replication == 5
    with pytest.raises(IsADirectory):
        await root.set_replication("/s/dir", 3)
    for bad in (0, 33):
        with pytest.raises(InvalidArgument):
            await root.set_replication("/s/f", bad)
    assert (await root.stat("/s/f")).replication == 5

    await root.set_times("/s/f", mtime_ms=123_000, atime_ms=456_000)
    status = await root.stat("/s/f")
    assert (status.mtime_ms, status.atime_ms) == (123_000, 456_000)
    await root.set_times("/s/f", atime_ms=789_000)  # mtime -1: unchanged
    status = await root.stat("/s/f")
    assert (status.mtime_ms, status.atime_ms) == (123_000, 789_000)
    await root.set_times("/s/dir", mtime_ms=5_000)
    assert (await root.stat("/s/dir")).mtime_ms == 5_000
    with pytest.raises(InvalidArgument):
        await root.set_times("/s/f", mtime_ms=-7)


async def test_content_summary(root: AsyncClient) -> None:
    await root.mkdirs("/cs/a/b")
    await root.mkdirs("/cs/c")
    await write_file(root, "/cs/f1", [100])  # replication 2 (default)
    await write_file(root, "/cs/a/f2", [4096, 4096, 10], replication=3)
    await root.touchz("/cs/a/b/empty")

    summary = await root.content_summary("/cs")
    assert (summary.length, summary.file_count, summary.directory_count) == (8302, 3, 4)
    assert summary.space_consumed == 100 * 2 + 8202 * 3

    a = await root.content_summary("/cs/a")
    assert (a.length, a.file_count, a.directory_count, a.space_consumed) == (8202, 2, 2, 24606)
    f = await root.content_summary("/cs/a/f2")
    assert (f.length, f.file_count, f.directory_count, f.space_consumed) == (8202, 1, 0, 24606)
    assert (await root.stat("/cs/a/f2")).length == 8202

    # setrep changes the space consumed
    await root.set_replication("/cs/a/f2", 1)
    assert (await root.content_summary("/cs")).space_consumed == 200 + 8202
    with pytest.raises(NotFound):
        await root.content_summary("/cs/missing")

    # block_locations follows the block lengths
    located = await root.block_locations("/cs/a/f2")
    assert located.file_length == 8202 and not located.under_construction
    assert [(b.offset, b.block.num_bytes) for b in located.blocks] == [
        (0, 4096), (4096, 4096), (8192, 10),
    ]
    middle = await root.block_locations("/cs/a/f2", offset=5000, length=10)
    assert [b.offset for b in middle.blocks] == [4096]
    with pytest.raises(IsADirectory):
        await root.block_locations("/cs/a")


async def test_configured_defaults(minicluster: MiniCluster) -> None:
    config = nn_config(
        umask=0o027, default_replication=3, default_block_size_bytes=8 * MiB, list_limit_max=100
    )
    nn = await minicluster.start_namenode(config=config)
    async with connect(nn, ROOT, ROOT_PW) as root:
        d = await root.mkdirs("/cfg/d")
        assert d.mode == 0o750 and (await root.stat("/cfg")).mode == 0o750
        f = await root.touchz("/cfg/f")
        assert (f.mode, f.replication, f.block_size) == (0o640, 3, 8 * MiB)
        # an explicit mode is not masked
        assert (await root.mkdirs("/cfg/open", mode=0o777)).mode == 0o777

        await asyncio.gather(*(root.mkdirs(f"/cfg/many/{i:03d}") for i in range(250)))
        listing = await root.rpc.call(p.LIST, p.ListRequest("/cfg/many", "", 1000))
        assert (len(listing.entries), listing.remaining) == (100, 150)  # capped page
        listed = [e.path async for e in root.iter_dir("/cfg/many", page_size=1000)]
        assert listed == [f"/cfg/many/{i:03d}" for i in range(250)]
        listing = await root.rpc.call(p.LIST, p.ListRequest("/cfg/many", "", 0))
        assert len(listing.entries) == 1  # at least one entry per page


async def test_write_protocol_checks(root: AsyncClient) -> None:
    await root.create("/w/f")
    first = await root.rpc.call(p.ADD_BLOCK, p.AddBlockRequest("/w/f", root.client_name))
    block1 = await fake_datanodes_of(root).store(first, 4096)  # its targets report it
    # the previous block must be the file's last block
    wrong = BlockRecord(first.block.block_id + 99, first.block.genstamp, 4096)
    with pytest.raises(InvalidArgument):
        await root.rpc.call(p.ADD_BLOCK, p.AddBlockRequest("/w/f", root.client_name, wrong))
    second = await root.rpc.call(p.ADD_BLOCK, p.AddBlockRequest("/w/f", root.client_name, block1))
    assert second.offset == 4096 and second.block.block_id != first.block.block_id
    block2 = await fake_datanodes_of(root).store(second, 10)
    # complete needs exactly the NameNode's block list, with lengths >= 0
    with pytest.raises(InvalidArgument):
        await root.complete("/w/f", [block1])
    with pytest.raises(InvalidArgument):
        await root.complete("/w/f", [block2, block1])
    with pytest.raises(InvalidArgument):
        await root.complete("/w/f", [block1, BlockRecord(block2.block_id, block2.genstamp, -1)])
    assert (await root.stat("/w/f")).under_construction
    done = await root.complete("/w/f", [block1, block2])
    assert (done.length, done.under_construction) == (4106, False)
    # a closed file takes no more blocks and cannot be completed again
    with pytest.raises(LeaseError):
        await root.rpc.call(p.ADD_BLOCK, p.AddBlockRequest("/w/f", root.client_name, block2))
    with pytest.raises(LeaseError):
        await root.complete("/w/f", [block1, block2])
    with pytest.raises(IsADirectory):
        await root.complete("/w", [])
    with pytest.raises(NotFound):
        await root.complete("/w/missing", [])
    with pytest.raises(InvalidArgument):
        await root.block_locations("/w/f", offset=-1)
    with pytest.raises(InvalidArgument):
        await root.rpc.call(p.CREATE, p.CreateRequest("/w/g", ""))  # no client name
    # renaming a file onto itself is a no-op
    assert await root.rename("/w/f", "/w/f") == "/w/f"
    assert (await root.stat("/w/f")).length == 4106
