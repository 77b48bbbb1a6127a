"""The edit ops of append, truncate and concat: validated before anything changes,
replayed from their records into the same namespace, and a truncate under recovery kept
by the fsimage."""

from __future__ import annotations

import pytest

from xdfs.errors import InvalidArgument, IsADirectory, LeaseError
from xdfs.namenode.editlog.codec import decode_payload, encode_record
from xdfs.namenode.namespace.ops import (
    LAYOUT_VERSION,
    AddBlockOp,
    AddFileOp,
    AppendOp,
    CloseFileOp,
    ConcatOp,
    ImageHeader,
    MkdirOp,
    Op,
    TruncateOp,
    decode_op,
    encode_op,
)
from xdfs.namenode.namespace.tree import Namespace
from xdfs.protocol.blocks import BlockRecord

SUPER = "root"
B = 1 << 30


def _file(path: str, inode_id: int, blocks: list[BlockRecord]) -> list[Op]:
    ops: list[Op] = [AddFileOp(path, inode_id, 0o644, SUPER, "g", 1, 3, 100, "c")]
    ops += [AddBlockOp(path, BlockRecord(b.block_id, b.genstamp, 0)) for b in blocks]
    ops.append(CloseFileOp(path, 2, 2, tuple(blocks)))
    return ops


def _history() -> list[Op]:
    ops: list[Op] = [MkdirOp("/d", 2, 0o755, SUPER, "g", 1)]
    ops += _file("/d/a", 3, [BlockRecord(B, 1000, 100), BlockRecord(B + 1, 1001, 40)])
    ops += _file("/d/b", 4, [BlockRecord(B + 2, 1002, 100)])
    ops += _file("/d/c", 5, [BlockRecord(B + 3, 1003, 30)])
    ops += [
        AppendOp("/d/a", "writer", BlockRecord(B + 1, 1004, 40)),
        CloseFileOp("/d/a", 3, 3, (BlockRecord(B, 1000, 100), BlockRecord(B + 1, 1004, 60))),
        ConcatOp("/d/a", ("/d/b",), 4),
        # at a block boundary: the concatenated block goes
        TruncateOp("/d/a", 160, 5, (BlockRecord(B, 1000, 100), BlockRecord(B + 1, 1004, 60))),
        TruncateOp("/d/c", 10, 6, (BlockRecord(B + 3, 1003, 10),), "recovery", 1005),
    ]
    return ops


def _apply(ops: list[Op]) -> Namespace:
    ns = Namespace(SUPER)
    for op in ops:
        ns.apply(op)
    return ns


def test_replayed_records_rebuild_the_same_namespace() -> None:
    ops = _history()
    live = _apply(ops)
    replayed = Namespace(SUPER)
    for txid, op in enumerate(ops, start=1):
        record = encode_record(txid, op)
        assert record  # framed; the payload below is what the log holds
        replayed.apply(decode_payload(op.OPCODE, encode_op(op)))
    assert replayed.canonical_dump() == live.canonical_dump()
    a = live.resolve("/d/a")
    assert [b.num_bytes for b in live.get_blocks(a)] == [100, 60]
    assert not live.exists("/d/b")
    c = live.resolve("/d/c")
    node = c.get()
    assert live.lease_holder(c) == "recovery" and live.is_truncating(node)  # type: ignore[arg-type]
    assert live.next_genstamp > 1005


def test_image_keeps_a_truncate_under_recovery() -> None:
    ns = _apply(_history())
    header = ImageHeader(
        LAYOUT_VERSION, 1, "cid", 0, ns.next_inode_id, ns.next_block_id, ns.next_genstamp,
        ns.inode_count(), 0, 0, ns.superuser, ns.supergroup,
    )
    loaded = Namespace.from_image(header, list(ns.iter_inode_records()), [], [])
    assert loaded.canonical_dump() == ns.canonical_dump()
    assert loaded.is_truncating(loaded.resolve("/d/c").get())  # type: ignore[arg-type]
    # the recovery's commit closes it: no longer truncating
    loaded.apply(CloseFileOp("/d/c", 7, 7, (BlockRecord(B + 3, 1005, 10),)))
    assert not loaded.is_truncating(loaded.resolve("/d/c").get())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("op", "error"),
    [
        (AppendOp("/d", "w"), IsADirectory),
        (AppendOp("/d/b", ""), InvalidArgument),
        (AppendOp("/d/b", "w", BlockRecord(B + 2, 1002, 100)), InvalidArgument),  # same stamp
        (AppendOp("/d/b", "w", BlockRecord(B + 2, 1009, 99)), InvalidArgument),  # not its length
        (TruncateOp("/d/b", 101, 1, (BlockRecord(B + 2, 1002, 101),)), InvalidArgument),
        (TruncateOp("/d/b", 50, 1, (BlockRecord(B + 2, 1002, 40),)), InvalidArgument),
        (TruncateOp("/d/b", 10, 1, (BlockRecord(B + 9, 1002, 10),)), InvalidArgument),
        (ConcatOp("/d/b", ("/d/b",), 1), InvalidArgument),
        (ConcatOp("/d/b", ("/d/open",), 1), LeaseError),
        (ConcatOp("/d/b", ("/e/x",), 1), InvalidArgument),
        (AppendOp("/d/open", "w"), LeaseError),
    ],
)
def test_bad_ops_change_nothing(op: Op, error: type[Exception]) -> None:
    ns = _apply([
        MkdirOp("/d", 2, 0o755, SUPER, "g", 1), MkdirOp("/e", 3, 0o755, SUPER, "g", 1),
        *_file("/d/b", 4, [BlockRecord(B + 2, 1002, 100)]),
        *_file("/e/x", 5, [BlockRecord(B + 3, 1003, 10)]),
        AddFileOp("/d/open", 6, 0o644, SUPER, "g", 1, 3, 100, "c"),
    ])
    before = ns.canonical_dump()
    with pytest.raises(error):
        ns.apply(op)
    assert ns.canonical_dump() == before
    assert decode_op(op.OPCODE, encode_op(op)) == op
