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

from xdfs.common.modes import permission_string
from xdfs.errors import StorageError
from xdfs.namenode.editlog.records import decode_payload
from xdfs.namenode.editlog.segments import (
    SegmentInfo,
    SegmentReader,
    parse_segment_name,
    segment_index,
)
from xdfs.namenode.image import Verify, iter_image
from xdfs.namenode.ops import OPS_BY_CODE, ImageHeader, InodeRecord, op_to_dict


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
            expected_start=seg.start or None,
            expected_end=seg.end,
            torn_tail="allow" if seg.in_progress else "error",
        )
        for txid, opcode, payload, offset in reader:
            yield txid, opcode, payload, seg.path, offset


def dump_edits(path_or_dir: str | os.PathLike[str]) -> Iterator[dict[str, object]]:
    """One dict per record, ``{"txid": n, "op": name, <fields>}`` (bytes as hex), from one
    segment file or every segment of a (name or ``current``) directory, in txid order."""
    for txid, opcode, payload, path, offset in _records(path_or_dir):
        try:
            op = decode_payload(opcode, payload)
        except ValueError as exc:
            raise StorageError(f"{path} at byte offset {offset}: txid {txid}: {exc}") from None
        yield {"txid": txid, **op_to_dict(op)}


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
    dir_paths: dict[int, str] = {}
    for record in iter_image(path, verify=verify):
        if isinstance(record, ImageHeader):
            continue
        if not isinstance(record, InodeRecord):
            continue  # users and token keys: read on to the end so the md5 is checked
        if record.parent_id == 0:
            full = "/"
        else:
            parent = dir_paths.get(record.parent_id)
            if parent is None:
                raise StorageError(
                    f"image {path}: inode {record.inode_id} comes before its parent "
                    f"{record.parent_id}"
                )
            full = parent + record.name if parent == "/" else f"{parent}/{record.name}"
        if record.is_dir:
            dir_paths[record.inode_id] = full
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
