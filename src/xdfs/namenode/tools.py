"""Offline viewers behind ``xdfs oev`` (edits) and ``xdfs oiv`` (images); no CLI here.

Both stream: ``dump_edits`` holds one read chunk of one segment, ``dump_image`` one image frame
plus a map of *directory* inode id -> path (files are never remembered), so a 10M-inode image
is exported in bounded memory. Nothing here modifies the files it reads: a torn tail of an
in-progress segment simply ends the dump.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from xdfs.common.modes import permission_string
from xdfs.editlog.segments import (
    SegmentInfo,
    SegmentReader,
    parse_segment_name,
    segment_index,
)
from xdfs.errors import StorageError
from xdfs.namenode.editlog.codec import decode_payload
from xdfs.namenode.image.fsimage import Verify, iter_image
from xdfs.namenode.namespace.ops import (
    LAYOUT_VERSION,
    OPS_BY_CODE,
    AddBlockOp,
    AddFileOp,
    AddUserOp,
    CloseFileOp,
    DeleteOp,
    ImageHeader,
    InodeRecord,
    MkdirOp,
    Op,
    RemoveUserOp,
    RenameOp,
    SetOwnerOp,
    SetPasswordOp,
    SetPermissionOp,
    SetQuotaOp,
    SetReplicationOp,
    SetTimesOp,
    UpdateBlocksOp,
    op_to_dict,
)


def _segments(path_or_dir: str | os.PathLike[str]) -> list[SegmentInfo]:
    path = Path(path_or_dir)
    if path.is_dir():
        return segment_index(path)
    parsed = parse_segment_name(path.name)
    if parsed is None:  # any file name: take the start from its header
        return [SegmentInfo(0, None, path)]
    return [SegmentInfo(parsed[0], parsed[1], path)]


def _records(path_or_dir: str | os.PathLike[str]) -> Iterator[tuple[int, int, bytes, Path, int]]:
    for seg in _segments(path_or_dir):
        reader = SegmentReader(
            seg.path,
            layout_version=LAYOUT_VERSION,
            expected_start=seg.start or None,
            expected_end=seg.end,
            torn_tail="allow" if seg.in_progress else "error",
        )
        for txid, opcode, payload, offset in reader:
            yield txid, opcode, payload, seg.path, offset


def iter_edit_ops(path_or_dir: str | os.PathLike[str]) -> Iterator[tuple[int, Op]]:
    """``(txid, op)`` of every record of one segment file or of every segment of a (name or
    ``current``) directory, in txid order."""
    for txid, opcode, payload, path, offset in _records(path_or_dir):
        try:
            op = decode_payload(opcode, payload)
        except ValueError as exc:
            raise StorageError(f"{path} at byte offset {offset}: txid {txid}: {exc}") from None
        yield txid, op


def dump_edits(path_or_dir: str | os.PathLike[str]) -> Iterator[dict[str, object]]:
    """One dict per record, ``{"txid": n, "op": name, <fields>}`` (bytes as hex), from one
    segment file or every segment of a (name or ``current``) directory, in txid order."""
    for txid, op in iter_edit_ops(path_or_dir):
        yield {"txid": txid, **op_to_dict(op)}


class EditRow(NamedTuple):
    """One edit as ``oev --format parquet`` exports it (None: not known from the op)."""

    txid: int
    op: str
    path: str | None
    dst: str | None  # rename target
    user: str | None  # the owner an op names (mkdir, add_file, set_owner) or the user changed
    # when the op happened, for the ops that carry it (their mtime): not set_times, whose
    # times are values chosen by a user
    timestamp_ms: int | None
    size_delta_bytes: int | None  # change of the file's length, when it can be known
    blocks_delta: int | None
    replication: int | None


class _FileSizes:
    """Lengths and block counts of the files these edits created: enough for a size delta on
    every later op on them, in memory bounded by the edits (not the namespace). Ops on files
    older than the edits, or on the files of a deleted or renamed directory, have an unknown
    delta (None): knowing them needs the image."""

    def __init__(self) -> None:
        self.known: dict[str, tuple[int, int]] = {}  # path -> (bytes, blocks)

    def set(self, path: str, size: int, blocks: int) -> tuple[int | None, int | None]:
        old = self.known.get(path)
        self.known[path] = (size, blocks)
        if old is None:
            return None, None
        return size - old[0], blocks - old[1]

    def delete(self, path: str) -> tuple[int | None, int | None]:
        old = self.known.pop(path, None)
        return (None, None) if old is None else (-old[0], -old[1])


def _who_when(op: Op) -> tuple[str | None, int | None]:
    """The user an op names and the time it carries, when it has them."""
    if isinstance(op, MkdirOp | AddFileOp):
        return op.owner, op.mtime_ms
    if isinstance(op, CloseFileOp | DeleteOp | RenameOp):
        return None, op.mtime_ms
    if isinstance(op, SetOwnerOp):
        return op.owner or None, None
    if isinstance(op, AddUserOp | RemoveUserOp | SetPasswordOp):
        return op.name, None
    return None, None


def _size_change(op: Op, sizes: _FileSizes) -> tuple[int | None, int | None]:
    """(bytes, blocks) the op adds to the namespace, None where it cannot be known."""
    if isinstance(op, AddFileOp):
        replaced = sizes.delete(op.path) if op.overwrite else (0, 0)
        sizes.known[op.path] = (0, 0)
        return replaced
    if isinstance(op, AddBlockOp):
        old = sizes.known.get(op.path)
        if old is not None:
            sizes.known[op.path] = (old[0], old[1] + 1)
        return 0, 1  # a new block is empty until the writer reports its length
    if isinstance(op, UpdateBlocksOp | CloseFileOp):
        return sizes.set(op.path, sum(b.num_bytes for b in op.blocks), len(op.blocks))
    if isinstance(op, DeleteOp):
        return sizes.delete(op.path)
    if isinstance(op, RenameOp):
        moved = sizes.known.pop(op.src, None)
        if moved is not None:
            sizes.known[op.dst] = moved
        return 0, 0
    if isinstance(op, MkdirOp | SetOwnerOp | SetPermissionOp | SetTimesOp | SetReplicationOp
                  | SetQuotaOp):
        return 0, 0
    return None, None


def edit_rows(path_or_dir: str | os.PathLike[str]) -> Iterator[EditRow]:
    """The edits as :class:`EditRow` s, in txid order (``oev --format parquet``)."""
    sizes = _FileSizes()
    for txid, op in iter_edit_ops(path_or_dir):
        user, stamp = _who_when(op)
        size_delta, blocks_delta = _size_change(op, sizes)
        path: str | None = getattr(op, "path", None)
        dst: str | None = None
        if isinstance(op, RenameOp):
            path, dst = op.src, op.dst
        replication = op.replication if isinstance(op, AddFileOp | SetReplicationOp) else None
        yield EditRow(txid, op.NAME, path, dst, user, stamp, size_delta, blocks_delta,
                      replication)


def edits_stats(path_or_dir: str | os.PathLike[str]) -> dict[str, int]:
    """Record count per op name (``xdfs oev --stats``), without decoding payloads."""
    counts: collections.Counter[str] = collections.Counter()
    for _, opcode, _, _, _ in _records(path_or_dir):
        op = OPS_BY_CODE.get(opcode)
        counts[op.NAME if op else f"unknown_{opcode}"] += 1
    return dict(sorted(counts.items()))


def dump_image(
    path: str | os.PathLike[str], *, verify: Verify = "streaming", blocks: bool = False
) -> Iterator[dict[str, object]]:
    """One dict per inode with its full path, parents first (HDFS's Delimited columns and
    more): path, inode_id, type, replication, mtime_ms, atime_ms, block_size, blocks_count,
    file_size, permission, mode, owner, group, under_construction (client or "");
    ``blocks=True`` adds the block list. Users and token keys are not exported."""
    for full, _parent, record in iter_inode_paths(path, verify=verify):
        out: dict[str, object] = {
            "path": full,
            "inode_id": record.inode_id,
            "type": "dir" if record.is_dir else "file",
            "replication": record.replication,
            "mtime_ms": record.mtime_ms,
            "atime_ms": record.atime_ms,
            "block_size": record.block_size,
            "blocks_count": len(record.blocks),
            "file_size": sum(b.num_bytes for b in record.blocks),
            "permission": permission_string(record.is_dir, record.mode),
            "mode": record.mode,
            "owner": record.owner,
            "group": record.group,
            "under_construction": record.client,
        }
        if blocks:
            out["blocks"] = [
                {"block_id": b.block_id, "genstamp": b.genstamp, "bytes": b.num_bytes}
                for b in record.blocks
            ]
        yield out


def iter_inode_paths(
    path: str | os.PathLike[str], *, verify: Verify = "streaming"
) -> Iterator[tuple[str, str, InodeRecord]]:
    """``(full path, parent path, record)`` of every inode, parents first (the root's
    parent path is ""). Remembers only directory paths, never files."""
    dir_paths: dict[int, str] = {}
    for record in iter_image(path, verify=verify):
        if not isinstance(record, InodeRecord):
            continue  # header, users and token keys: read on so the md5 is checked
        if record.parent_id == 0:
            parent, full = "", "/"
        else:
            found = dir_paths.get(record.parent_id)
            if found is None:
                raise StorageError(
                    f"image {path}: inode {record.inode_id} comes before its parent "
                    f"{record.parent_id}"
                )
            parent = found
            full = parent + record.name if parent == "/" else f"{parent}/{record.name}"
        if record.is_dir:
            dir_paths[record.inode_id] = full
        yield full, parent, record


def image_summary(
    path: str | os.PathLike[str], *, verify: Verify = "streaming"
) -> dict[str, object]:
    """Header fields plus totals (dirs, files, blocks, bytes) in one streaming pass."""
    totals = {"dirs": 0, "files": 0, "blocks": 0, "bytes": 0}
    header: ImageHeader | None = None
    for record in iter_image(path, verify=verify):
        if isinstance(record, ImageHeader):
            header = record
        elif isinstance(record, InodeRecord):
            if record.is_dir:
                totals["dirs"] += 1
            else:
                totals["files"] += 1
                totals["blocks"] += len(record.blocks)
                totals["bytes"] += sum(b.num_bytes for b in record.blocks)
    assert header is not None
    fields = {name: getattr(header, name) for name in header.__struct_fields__}
    return {**fields, **totals}
