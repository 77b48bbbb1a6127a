"""The namespace's block index (block id -> file), kept exact by every op and by loading."""

from __future__ import annotations

import pytest

from xdfs.errors import InvalidArgument
from xdfs.namenode.blocks.block_state import block_state
from xdfs.namenode.namespace.inodes import FileInode
from xdfs.namenode.namespace.ops import (
    LAYOUT_VERSION,
    AddBlockOp,
    AddFileOp,
    CloseFileOp,
    DeleteOp,
    ImageHeader,
    MkdirOp,
    RenameOp,
    UpdateBlocksOp,
)
from xdfs.namenode.namespace.tree import Namespace
from xdfs.protocol.blocks import BlockRecord


def b(block_id: int, num_bytes: int = 0) -> BlockRecord:
    return BlockRecord(block_id, 1000 + block_id, num_bytes)


def owner_path(ns: Namespace, block_id: int) -> str | None:
    node = ns.block_file(block_id)
    return ns.path_of(node) if node is not None else None


def index(ns: Namespace) -> dict[int, str]:
    """Every indexed block -> its file's path, checked against the files' block lists."""
    out: dict[int, str] = {}
    for path, node in ns.walk("/"):
        if isinstance(node, FileInode):
            for block in node.blocks:
                assert ns.block_file(block.block_id) is node
                out[block.block_id] = path
    assert ns.block_count() == len(out)
    return out


@pytest.fixture
def ns() -> Namespace:
    ns = Namespace("root")
    ns.apply(MkdirOp("/d", 2, 0o755, "root", "g", 1))
    ns.apply(AddFileOp("/d/f", 3, 0o644, "root", "g", 1, 2, 4096, "c1"))
    ns.apply(AddBlockOp("/d/f", b(10)))
    ns.apply(AddBlockOp("/d/f", b(11)))
    return ns


def test_ops_keep_the_index_exact(ns: Namespace) -> None:
    assert index(ns) == {10: "/d/f", 11: "/d/f"}
    # update_blocks: a length known, the last block dropped
    assert ns.apply(UpdateBlocksOp("/d/f", (b(10, 4096),))) == (11,)
    assert index(ns) == {10: "/d/f"}
    assert ns.block_file(11) is None
    ns.apply(AddBlockOp("/d/f", b(12)))
    assert ns.apply(CloseFileOp("/d/f", 2, 2, (b(10, 4096), b(12, 5)))) == ()
    assert index(ns) == {10: "/d/f", 12: "/d/f"}
    # rename moves the file, the index follows it
    ns.apply(RenameOp("/d", "/e", 3))
    assert owner_path(ns, 12) == "/e/f"
    # overwrite drops the old file's blocks
    ns.apply(AddFileOp("/e/f", 4, 0o644, "root", "g", 4, 2, 4096, "c2", True))
    assert index(ns) == {}
    ns.apply(AddBlockOp("/e/f", b(13)))
    ns.apply(AddFileOp("/e/g", 5, 0o644, "root", "g", 4, 2, 4096, "c3"))
    ns.apply(AddBlockOp("/e/g", b(14)))
    assert sorted(ns.apply(DeleteOp("/e", 5))) == [13, 14]
    assert index(ns) == {}


def test_a_block_belongs_to_one_file(ns: Namespace) -> None:
    ns.apply(AddFileOp("/d/g", 4, 0o644, "root", "g", 1, 2, 4096, "c2"))
    before = ns.canonical_dump()
    with pytest.raises(InvalidArgument, match="belongs to another file"):
        ns.apply(AddBlockOp("/d/g", b(10)))
    with pytest.raises(InvalidArgument, match="belongs to another file"):
        ns.apply(UpdateBlocksOp("/d/g", (b(11),)))
    with pytest.raises(InvalidArgument, match="belongs to another file"):
        ns.apply(CloseFileOp("/d/g", 2, 2, (b(10),)))
    assert ns.canonical_dump() == before
    assert index(ns) == {10: "/d/f", 11: "/d/f"}


def test_loading_an_image_rebuilds_the_index(ns: Namespace) -> None:
    ns.apply(CloseFileOp("/d/f", 2, 2, (b(10, 7), b(11, 3))))
    header = ImageHeader(
        LAYOUT_VERSION, 1, "cid", 0, ns.next_inode_id, ns.next_block_id, ns.next_genstamp,
        ns.inode_count(), 0, 0, "root", "supergroup",
    )
    loaded = Namespace.from_image(header, ns.iter_inode_records(), [], [])
    assert loaded.canonical_dump() == ns.canonical_dump()
    assert index(loaded) == {10: "/d/f", 11: "/d/f"}


def test_block_state_finds_committed_records_and_the_open_last_block(ns: Namespace) -> None:
    first, last = block_state(ns, 10), block_state(ns, 11)
    assert first is not None and last is not None
    assert (first.record, first.complete) == (b(10), True)
    assert (last.record, last.complete) == (b(11), False)  # being written
    assert ns.open_last_blocks() == [11]
    assert block_state(ns, 99) is None
    ns.apply(CloseFileOp("/d/f", 2, 2, (b(11, 1), b(10, 2))))  # any order is found too
    state = block_state(ns, 10)
    assert state is not None and (state.record, state.complete) == (b(10, 2), True)
    assert ns.open_last_blocks() == []
