"""Resolve once: an operation walks its path from the root once (HDFS's INodesInPath), and
hands that to the permission checks, its planning and apply. Counted here on the
Namesystem with an in-memory edits log; replay of the logged ops (which resolve each path
themselves) must give the same namespace."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest

from xdfs.config import NameNodeConfig
from xdfs.errors import AlreadyExists
from xdfs.namenode.namespace.ops import AddFileOp, DeleteOp, MkdirOp, Op, RenameOp
from xdfs.namenode.namespace.tree import Namespace
from xdfs.namenode.namesystem import Namesystem
from xdfs.protocol.namenode import DEFAULT_MODE

USER = "alice"


class MemoryEdits:
    """The edits log reduced to its contract: a txid per op, durable at once."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.buffer_full = False

    @property
    def last_txid(self) -> int:
        return len(self.ops)

    def append(self, op: Op) -> int:
        self.ops.append(op)
        return len(self.ops)

    async def wait_for_room(self) -> None:
        return None

    async def sync(self, txid: int) -> None:
        assert txid <= len(self.ops)

    def synced_future(self, txid: int) -> asyncio.Future[None] | None:
        assert txid <= len(self.ops)
        return None

    def when_synced(self, txid: int, callback: Callable[[BaseException | None], None]) -> None:
        assert txid <= len(self.ops)
        callback(None)


@pytest.fixture
def fs() -> Namesystem:
    ns = Namespace("root")
    ns.apply(MkdirOp("/data", ns.allocate_inode_id(), 0o755, USER, "staff", 1))
    config = replace(NameNodeConfig(), trash_interval_s=3600.0)
    return Namesystem(ns, MemoryEdits(), config, clock=lambda: 1_700_000_000.0)


@pytest.fixture
def walks(fs: Namesystem) -> Iterator[list[str]]:
    """Every path the namespace's resolve walks (the only walk from the root by name)."""
    walked: list[str] = []
    fs.ns.walk_log = walked
    yield walked
    fs.ns.walk_log = None


async def test_a_mkdir_walks_its_path_once(fs: Namesystem, walks: list[str]) -> None:
    status = await fs.mkdirs(USER, "/data/a", DEFAULT_MODE, parents=False)
    assert walks == ["/data/a"]
    assert status.path == "/data/a" and status.is_dir and status.owner == USER
    walks.clear()
    await fs.mkdirs(USER, "/data/b/c/d", DEFAULT_MODE, parents=True)  # three directories
    assert walks == ["/data/b/c/d"]
    assert fs.ns.is_dir("/data/b/c/d")


async def test_a_file_is_created_and_completed_with_a_walk_each(
    fs: Namesystem, walks: list[str]
) -> None:
    status = await fs.create(USER, "client-1", "/data/new/f", mode=DEFAULT_MODE, replication=1,
                             block_size=0, overwrite=False, create_parents=True)
    assert walks == ["/data/new/f"]
    assert status.under_construction and status.owner == USER
    walks.clear()
    closed = await fs.complete(USER, "client-1", "/data/new/f", [])
    assert walks == ["/data/new/f"]
    assert not closed.under_construction


async def test_reads_walk_once(fs: Namesystem, walks: list[str]) -> None:
    await fs.create(USER, "client-1", "/data/f", mode=DEFAULT_MODE, replication=1,
                    block_size=0, overwrite=False, create_parents=False)
    walks.clear()
    fs.stat(USER, "/data/f")
    fs.list_dir(USER, "/data", "", 100)
    fs.block_locations(USER, "/data/f", 0, -1)
    await fs.content_summary(USER, "/data")
    assert walks == ["/data/f", "/data", "/data/f", "/data"]


async def test_moves_walk_each_path_once(fs: Namesystem, walks: list[str]) -> None:
    await fs.mkdirs(USER, "/data/a/b", DEFAULT_MODE, parents=True)
    walks.clear()
    assert await fs.rename(USER, "/data/a", "/data/z") == "/data/z"
    assert walks == ["/data/a", "/data/z"]
    walks.clear()
    trashed = await fs.delete(USER, "/data/z", recursive=True, skip_trash=False)
    assert trashed == "/user/alice/.Trash/Current/data/z"
    assert walks == ["/data/z", "/user/alice/.Trash/Current"]  # the path, and the trash's
    assert fs.ns.is_dir(trashed + "/b")


async def test_replay_of_the_logged_ops_gives_the_same_namespace(fs: Namesystem) -> None:
    """Ops applied with their resolutions, and replayed without (each walked afresh)."""
    await fs.mkdirs(USER, "/data/a/b/c", DEFAULT_MODE, parents=True)
    await fs.create(USER, "c1", "/data/x/y/f", mode=DEFAULT_MODE, replication=1, block_size=0,
                    overwrite=False, create_parents=True)
    await fs.complete(USER, "c1", "/data/x/y/f", [])
    await fs.create(USER, "c2", "/data/x/y/f", mode=DEFAULT_MODE, replication=1, block_size=0,
                    overwrite=True, create_parents=False)
    await fs.rename(USER, "/data/a/b", "/data/x")  # into the existing directory
    trashed = await fs.delete(USER, "/data/x/b", recursive=True, skip_trash=False)
    await fs.delete(USER, "/data/a", recursive=True, skip_trash=False)  # a second trash entry
    assert await fs.restore(USER, trashed) == "/data/x/b"
    await fs.set_permission(USER, "/data/x/b/c", 0o700)
    await fs.delete(USER, "/data/x/y", recursive=True, skip_trash=True)
    assert isinstance(fs.edits, MemoryEdits)
    replayed = Namespace("root")
    replayed.apply(MkdirOp("/data", replayed.allocate_inode_id(), 0o755, USER, "staff", 1))
    for op in fs.edits.ops:
        replayed.apply(op)
    assert replayed.canonical_dump() == fs.ns.canonical_dump()


def test_an_out_of_date_resolution_is_walked_again_and_a_refusal_changes_nothing() -> None:
    ns = Namespace("root")
    stale = ns.resolve("/x")  # /x does not exist yet
    ns.apply(MkdirOp("/x", ns.allocate_inode_id(), 0o755, "root", "g", 1))
    assert ns.fresh(stale) is not stale and ns.fresh(stale).exists
    again = MkdirOp("/x", ns.allocate_inode_id(), 0o755, "root", "g", 2)
    before = ns.canonical_dump()
    with pytest.raises(AlreadyExists):  # the stale "missing" is not believed
        ns.apply(again, (stale,))
    assert ns.canonical_dump() == before
    current = ns.resolve("/x/y")
    ns.apply(MkdirOp("/x/y", ns.allocate_inode_id(), 0o755, "root", "g", 3), (current,))
    assert current.exists and current.version == ns.version  # kept up to date by apply
    assert ns.fresh(current) is current


def test_resolutions_kept_up_to_date_by_apply_match_a_fresh_walk() -> None:
    """Every resolution that apply calls up to date is exactly what a walk gives now."""
    ns = Namespace("root")
    paths = ["/", "/a", "/a/b", "/a/b/f", "/a/b/f/x", "/c", "/c/f", "/c/f/x", "/a/b2",
             "/a/b2/f", "/z"]
    held = [ns.resolve(p) for p in paths]
    ids = iter(range(100, 200))
    ops: list[Op] = [
        MkdirOp("/a", next(ids), 0o755, "root", "g", 1),
        MkdirOp("/a/b", next(ids), 0o755, "root", "g", 1),
        AddFileOp("/a/b/f", next(ids), 0o644, "root", "g", 1, 1, 1024, "c1"),
        AddFileOp("/a/b/f", next(ids), 0o644, "root", "g", 2, 1, 1024, "c2", overwrite=True),
        RenameOp("/a/b", "/c", 3),
        RenameOp("/c", "/a/b2", 4),
        DeleteOp("/a", 5),
    ]
    kept = 0
    for op in ops:
        ns.apply(op, held)
        for iip in held:
            if iip.version == ns.version:
                kept += 1
                walked = ns.resolve(iip.path)
                assert [id(n) for n in iip.inodes] == [id(n) for n in walked.inodes], (op, iip)
        held = [ns.fresh(iip) for iip in held]
    assert kept >= (len(ops) - 1) * len(paths)  # only a path below a moved subtree is dropped
