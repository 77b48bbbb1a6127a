"""Quotas in the pure namespace: every op that adds names or bytes is checked against every
quota above it, refused with a typed error that changes nothing, and counted incrementally;
an image and a replay of the same ops count exactly alike."""

from __future__ import annotations

import pytest

from xdfs.errors import DSQuotaExceeded, InvalidArgument, NSQuotaExceeded, QuotaExceeded
from xdfs.namenode.namespace.ops import (
    LAYOUT_VERSION,
    AddBlockOp,
    AddFileOp,
    CloseFileOp,
    DeleteOp,
    ImageHeader,
    MkdirOp,
    Op,
    RenameOp,
    SetQuotaOp,
    SetReplicationOp,
    UpdateBlocksOp,
)
from xdfs.namenode.namespace.tree import Namespace
from xdfs.protocol.blocks import BlockRecord

T = 1_700_000_000_000
BS = 1000  # block size of every file here


class Log:
    """A namespace and every op applied to it, to replay on a fresh one."""

    def __init__(self) -> None:
        self.ns = Namespace("hdfs", root_mtime_ms=T)
        self.ops: list[Op] = []

    def do(self, op: Op) -> None:
        self.ns.apply(op)
        self.ops.append(op)

    def refused(self, error: type[Exception], op: Op) -> None:
        before = self.ns.canonical_dump()
        with pytest.raises(error):
            self.ns.apply(op)
        assert self.ns.canonical_dump() == before

    def mkdir(self, path: str) -> MkdirOp:
        return MkdirOp(path, self.ns.allocate_inode_id(), 0o755, "alice", "users", T)

    def create(self, path: str, replication: int = 2, overwrite: bool = False) -> AddFileOp:
        return AddFileOp(path, self.ns.allocate_inode_id(), 0o644, "alice", "users", T,
                         replication, BS, "c1", overwrite)

    def block(self, num_bytes: int = 0) -> BlockRecord:
        return BlockRecord(self.ns.allocate_block_id(), self.ns.allocate_genstamp(), num_bytes)

    def write(self, path: str, sizes: list[int], replication: int = 2) -> None:
        self.do(self.create(path, replication))
        blocks: list[BlockRecord] = []
        for size in sizes:
            block = self.block()
            self.do(AddBlockOp(path, block))
            blocks.append(BlockRecord(block.block_id, block.genstamp, size))
        self.do(CloseFileOp(path, T, T, tuple(blocks)))

    def usage(self, path: str) -> tuple[int, int]:
        found = self.ns.quota_of(path)
        assert found is not None
        return found.names, found.space


def _header(ns: Namespace) -> ImageHeader:
    return ImageHeader(
        LAYOUT_VERSION, 1, "cid", 0, ns.next_inode_id, ns.next_block_id, ns.next_genstamp,
        ns.inode_count(), len(ns.users), len(ns.token_keys), ns.superuser, ns.supergroup,
    )


def _image_and_replay_agree(log: Log) -> None:
    ns = log.ns
    from_image = Namespace.from_image(
        _header(ns), list(ns.iter_inode_records()), ns.user_records(), ns.token_key_records()
    )
    replayed = Namespace("hdfs", root_mtime_ms=T)
    for op in log.ops:
        replayed.apply(op)
    dump = ns.canonical_dump()
    assert any(row[0] == "quota" for row in dump)
    assert from_image.canonical_dump() == dump
    # (the counters aside: ids allocated for a refused op are not in the log)
    assert replayed.canonical_dump()[1:] == dump[1:]


def test_name_quota_counts_the_directory_and_everything_below() -> None:
    log = Log()
    log.do(log.mkdir("/q"))
    log.do(SetQuotaOp("/q", 3, -1))
    assert log.usage("/q") == (1, 0)
    log.do(log.mkdir("/q/d"))
    log.do(log.create("/q/d/f"))
    assert log.usage("/q") == (3, 0)
    log.refused(NSQuotaExceeded, log.mkdir("/q/e"))
    log.refused(NSQuotaExceeded, log.create("/q/g"))
    with pytest.raises(QuotaExceeded, match="quota=3 file count=4"):
        log.ns.apply(log.mkdir("/q/d/x"))
    log.do(log.create("/q/d/f", overwrite=True))  # no new name
    log.do(DeleteOp("/q/d", T))
    assert log.usage("/q") == (1, 0)
    log.do(log.mkdir("/q/e"))
    _image_and_replay_agree(log)


def test_space_quota_charges_a_whole_block_while_writing() -> None:
    log = Log()
    log.do(log.mkdir("/q"))
    log.do(SetQuotaOp("/q", -1, 4 * BS))
    log.do(log.create("/q/f"))  # replication 2
    first = log.block()
    log.do(AddBlockOp("/q/f", first))
    assert log.usage("/q") == (2, 2 * BS)
    full = BlockRecord(first.block_id, first.genstamp, BS)
    log.do(UpdateBlocksOp("/q/f", (full,)))
    second = log.block()
    log.do(AddBlockOp("/q/f", second))
    assert log.usage("/q") == (2, 4 * BS)
    # as the NameNode does: the previous block's length first, then the next block
    second_full = BlockRecord(second.block_id, second.genstamp, BS)
    log.do(UpdateBlocksOp("/q/f", (full, second_full)))
    third = log.block()
    with pytest.raises(DSQuotaExceeded) as refused:
        log.ns.apply(AddBlockOp("/q/f", third))
    assert refused.value.message == (
        "The DiskSpace quota of /q is exceeded: quota = 4000 B = 3.91 KB but diskspace "
        "consumed = 6000 B = 5.86 KB"
    )
    assert log.ns.get_blocks("/q/f") == (full, second_full)
    # closing with a short last block pays back what it did not use
    log.do(CloseFileOp("/q/f", T, T, (full, BlockRecord(second.block_id, second.genstamp, 10))))
    assert log.usage("/q") == (2, 2 * (BS + 10))
    _image_and_replay_agree(log)


def test_replication_change_over_space_quota_is_refused() -> None:
    log = Log()
    log.do(log.mkdir("/q"))
    log.write("/q/f", [600], replication=2)
    log.do(SetQuotaOp("/q", -1, 2000))
    assert log.usage("/q") == (2, 1200)
    log.refused(DSQuotaExceeded, SetReplicationOp("/q/f", 4))
    log.do(SetReplicationOp("/q/f", 3))
    assert log.usage("/q") == (2, 1800)
    log.do(SetReplicationOp("/q/f", 1))
    assert log.usage("/q") == (2, 600)
    _image_and_replay_agree(log)


def test_rename_into_a_quota_tree_is_checked_and_moves_usage() -> None:
    log = Log()
    for path in ("/q", "/q/in", "/free", "/free/sub"):
        log.do(log.mkdir(path))
    log.write("/free/sub/a", [100])
    log.write("/free/sub/b", [100])
    log.do(SetQuotaOp("/q", 4, -1))
    log.do(SetQuotaOp("/q/in", -1, 1000))
    log.refused(NSQuotaExceeded, RenameOp("/free/sub", "/q/sub", T))  # 3 names: 5 > 4
    log.do(SetQuotaOp("/q", 10, -1))
    log.do(SetQuotaOp("/q/in", -1, 300))
    log.refused(DSQuotaExceeded, RenameOp("/free/sub", "/q/in/sub", T))  # 400 > 300
    log.do(SetQuotaOp("/q/in", -1, 1000))
    log.do(SetQuotaOp("/q", 4, -1))
    log.do(DeleteOp("/free/sub/b", T))
    log.do(RenameOp("/free/sub", "/q/in/sub", T))
    assert log.usage("/q") == (4, 200)
    assert log.usage("/q/in") == (3, 200)
    # a move inside the tree changes no quota above both, and out of it gives back
    log.do(RenameOp("/q/in/sub", "/q/sub", T))
    assert (log.usage("/q"), log.usage("/q/in")) == ((4, 200), (1, 0))
    log.do(RenameOp("/q/sub", "/free/sub", T))
    assert log.usage("/q") == (2, 0)
    # a directory with a quota moves with it, usage and all
    log.do(RenameOp("/q/in", "/free/in", T))
    assert log.usage("/free/in") == (1, 0)
    _image_and_replay_agree(log)


def test_nested_quotas_and_clearing() -> None:
    log = Log()
    log.do(log.mkdir("/a"))
    log.do(log.mkdir("/a/b"))
    log.write("/a/b/f", [300], replication=1)
    log.do(SetQuotaOp("/a/b", 10, -1))
    log.do(SetQuotaOp("/a", 10, 500))  # counts /a/b's tree from its usage
    assert log.usage("/a") == (3, 300)
    log.refused(DSQuotaExceeded, SetReplicationOp("/a/b/f", 2))
    log.do(SetQuotaOp("/a", -1, -1))
    assert log.ns.quota_of("/a") is None
    log.do(SetReplicationOp("/a/b/f", 2))
    assert log.usage("/a/b") == (2, 600)
    summary = log.ns.content_summary("/a/b")
    assert (summary.ns_quota, summary.ds_quota) == (10, -1)
    log.do(DeleteOp("/a", T))
    assert log.ns.quota_of("/") is None
    log.do(SetQuotaOp("/", 100, -1))
    log.do(log.mkdir("/a"))
    assert log.usage("/") == (2, 0)
    _image_and_replay_agree(log)


def test_bad_quota_ops_are_refused() -> None:
    log = Log()
    log.write("/f", [])
    log.refused(InvalidArgument, SetQuotaOp("/f", 5, -1))
    log.do(log.mkdir("/d"))
    log.refused(InvalidArgument, SetQuotaOp("/d", -2, -1))


def test_append_truncate_and_concat_keep_the_counts_exact() -> None:
    """Append reopens a file (its last block counts whole), truncate gives space back,
    concat frees the sources' names and moves their blocks at the target's replication;
    a space quota refuses the append that would take it over, and the counts after
    each op equal what an image and a replay count."""
    from xdfs.namenode.namespace.inodes import FileInode
    from xdfs.namenode.namespace.ops import AppendOp, ConcatOp, TruncateOp

    log = Log()
    log.do(log.mkdir("/q"))
    log.do(SetQuotaOp("/q", -1, 10 * BS))
    log.write("/q/a", [BS, 400])  # 1400 bytes x 2
    log.write("/q/b", [300], replication=1)
    log.write("/q/c", [200], replication=1)
    assert log.usage("/q") == (4, 2800 + 300 + 200)
    def blocks(path: str) -> tuple[BlockRecord, ...]:
        node = log.ns.resolve(path).get()
        assert isinstance(node, FileInode)
        return node.blocks

    last = blocks("/q/a")[-1]
    reopened = BlockRecord(last.block_id, log.ns.allocate_genstamp(), last.num_bytes)
    log.do(AppendOp("/q/a", "c2", reopened))
    assert log.usage("/q") == (4, 2 * 2 * BS + 500)  # open: the last block counts whole
    log.do(CloseFileOp("/q/a", T, T, (blocks("/q/a")[0], reopened)))
    assert log.usage("/q") == (4, 3300)
    log.do(TruncateOp("/q/a", BS, T, (blocks("/q/a")[0],)))
    assert log.usage("/q") == (4, 2 * BS + 500)
    log.do(ConcatOp("/q/a", ("/q/b", "/q/c"), T))  # moved blocks take replication 2
    assert log.usage("/q") == (2, 2 * (BS + 300 + 200))
    _image_and_replay_agree(log)
    # a file whose reopened last block would take the quota over is refused
    log.do(SetQuotaOp("/q", -1, 2 * (BS + 500) + 100))
    last = blocks("/q/a")[-1]
    log.refused(DSQuotaExceeded, AppendOp(
        "/q/a", "c3", BlockRecord(last.block_id, log.ns.allocate_genstamp(), last.num_bytes)))
