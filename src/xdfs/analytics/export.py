"""Parquet exports with pyarrow (no Spark): an fsimage to ``inodes.parquet`` +
``blocks.parquet``, edits to ``edits.parquet``, the live block map to ``replicas.parquet`` +
``datanodes.parquet``.

Every writer streams: rows are buffered up to ``batch_rows`` and written as one row group,
so memory is one batch per table plus what the row source keeps (for an image, the paths of
the directories, see :func:`xdfs.namenode.tools.iter_inode_paths`).

``inodes.parquet`` records the txid of its image in its schema metadata
(``xdfs.image_txid``): the namespace a report describes.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from xdfs.common.modes import permission_string
from xdfs.namenode import tools
from xdfs.namenode.image.fsimage import ImageReader, Verify
from xdfs.protocol.namenode import BlockMapRow, DataNodeInfo

#: Rows per Parquet row group (and per batch held in memory while exporting).
BATCH_ROWS = 64 * 1024

INODES_FILE = "inodes.parquet"
BLOCKS_FILE = "blocks.parquet"
EDITS_FILE = "edits.parquet"
REPLICAS_FILE = "replicas.parquet"
DATANODES_FILE = "datanodes.parquet"

_TS = pa.timestamp("ms", tz="UTC")
#: Schema metadata key of inodes.parquet: the txid of the image it was exported from.
IMAGE_TXID_KEY = b"xdfs.image_txid"

#: The inodes table: HDFS's Delimited columns (Path, Replication, ModificationTime,
#: AccessTime, PreferredBlockSize, BlocksCount, FileSize, Permission, UserName, GroupName)
#: are path, replication, mtime, atime, block_size, block_count, size_bytes, permission,
#: owner, group; NSQUOTA and DSQUOTA are ns_quota and ds_quota (a directory's name and
#: space quota, -1 for none as in HDFS; -1 for files).
INODES_SCHEMA = pa.schema([
    ("inode_id", pa.int64()),
    ("parent_id", pa.int64()),
    ("path", pa.string()),
    ("parent_path", pa.string()),
    ("name", pa.string()),
    ("depth", pa.int32()),
    ("type", pa.string()),
    ("replication", pa.int32()),
    ("block_size", pa.int64()),
    ("block_count", pa.int32()),
    ("size_bytes", pa.int64()),
    ("mtime_ms", pa.int64()),
    ("atime_ms", pa.int64()),
    ("mtime", _TS),
    ("atime", _TS),
    ("owner", pa.string()),
    ("group", pa.string()),
    ("permission", pa.string()),
    ("mode", pa.int32()),
    ("under_construction", pa.bool_()),
    ("client", pa.string()),
    ("ns_quota", pa.int64()),
    ("ds_quota", pa.int64()),
])

BLOCKS_SCHEMA = pa.schema([
    ("block_id", pa.int64()),
    ("inode_id", pa.int64()),
    ("block_index", pa.int32()),
    ("size_bytes", pa.int64()),
    ("genstamp", pa.int64()),
    ("replication", pa.int32()),  # the file's expected replication
])

EDITS_SCHEMA = pa.schema([
    ("txid", pa.int64()),
    ("op", pa.string()),
    ("path", pa.string()),
    ("dst", pa.string()),
    ("user", pa.string()),
    ("timestamp_ms", pa.int64()),
    ("timestamp", _TS),
    ("size_delta_bytes", pa.int64()),
    ("blocks_delta", pa.int64()),
    ("replication", pa.int32()),
])

REPLICAS_SCHEMA = pa.schema([
    ("block_id", pa.int64()),
    ("inode_id", pa.int64()),
    ("path", pa.string()),
    ("block_bytes", pa.int64()),
    ("genstamp", pa.int64()),
    ("expected_replication", pa.int32()),
    ("complete", pa.bool_()),
    ("node_id", pa.string()),
    ("address", pa.string()),
    ("node_state", pa.string()),
    ("replica_state", pa.string()),
    ("replica_bytes", pa.int64()),
    ("replica_genstamp", pa.int64()),
    ("corrupt_flags", pa.int32()),
])

DATANODES_SCHEMA = pa.schema([
    ("node_id", pa.string()),
    ("address", pa.string()),
    ("state", pa.string()),
    ("capacity_bytes", pa.int64()),
    ("used_bytes", pa.int64()),
    ("free_bytes", pa.int64()),
    ("blocks", pa.int64()),
    ("last_contact_s", pa.float64()),
])


class ExportCounts(NamedTuple):
    rows: dict[str, int]  # file name -> rows written
    paths: list[Path]


class BatchWriter:
    """Rows (tuples in schema order) to one Parquet file, a row group per ``batch_rows``."""

    def __init__(self, path: Path, schema: pa.Schema, batch_rows: int = BATCH_ROWS) -> None:
        self.path = path
        self.schema = schema
        self.batch_rows = batch_rows
        self.rows = 0
        self._pending: list[Sequence[Any]] = []
        self._writer = pq.ParquetWriter(str(path), schema, compression="zstd")

    def add(self, row: Sequence[Any]) -> None:
        self._pending.append(row)
        if len(self._pending) >= self.batch_rows:
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        columns = list(zip(*self._pending, strict=True))
        arrays = [
            pa.array(column, type=field.type) for column, field in zip(
                columns, self.schema, strict=True)
        ]
        self._writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=self.schema))
        self.rows += len(self._pending)
        self._pending = []

    def close(self) -> None:
        self.flush()
        self._writer.close()

    def __enter__(self) -> BatchWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _depth(path: str) -> int:
    return 0 if path == "/" else path.count("/")


def export_image(
    image: str | os.PathLike[str], out_dir: str | os.PathLike[str], *,
    verify: Verify = "streaming", batch_rows: int = BATCH_ROWS,
) -> ExportCounts:
    """``inodes.parquet`` and ``blocks.parquet`` of one fsimage, in one streaming pass."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    inodes_path, blocks_path = out / INODES_FILE, out / BLOCKS_FILE
    schema = INODES_SCHEMA.with_metadata({IMAGE_TXID_KEY: str(image_txid(image)).encode()})
    with BatchWriter(inodes_path, schema, batch_rows) as inodes, \
            BatchWriter(blocks_path, BLOCKS_SCHEMA, batch_rows) as blocks:
        for full, parent, rec in tools.iter_inode_paths(image, verify=verify):
            size = 0
            for index, block in enumerate(rec.blocks):
                size += block.num_bytes
                blocks.add((block.block_id, rec.inode_id, index, block.num_bytes,
                            block.genstamp, rec.replication))
            inodes.add((
                rec.inode_id, rec.parent_id, full, parent, rec.name, _depth(full),
                "dir" if rec.is_dir else "file", rec.replication, rec.block_size,
                len(rec.blocks), size, rec.mtime_ms, rec.atime_ms, rec.mtime_ms, rec.atime_ms,
                rec.owner, rec.group, permission_string(rec.is_dir, rec.mode), rec.mode,
                bool(rec.client), rec.client, rec.ns_quota, rec.ds_quota,
            ))
    return ExportCounts({INODES_FILE: inodes.rows, BLOCKS_FILE: blocks.rows},
                        [inodes_path, blocks_path])


def image_txid(image: str | os.PathLike[str]) -> int:
    """The txid of an fsimage (from its header: the first frame only)."""
    with ImageReader(image, verify="none") as reader:
        return reader.read_header().txid


def exported_image_txid(inodes: str | os.PathLike[str]) -> int | None:
    """The image txid an ``inodes.parquet`` records (None: exported before it did)."""
    metadata = pq.read_schema(inodes).metadata or {}
    value = metadata.get(IMAGE_TXID_KEY)
    return int(value) if value is not None else None


def edits_txid_range(edits: str | os.PathLike[str]) -> tuple[int, int] | None:
    """First and last txid of an ``edits.parquet`` (None when it holds no edit)."""
    txids = pq.read_table(edits, columns=["txid"]).column("txid")
    if len(txids) == 0:
        return None
    import pyarrow.compute as pc

    bounds = pc.min_max(txids)
    return int(bounds["min"].as_py()), int(bounds["max"].as_py())


def export_edits(
    source: str | os.PathLike[str], out_dir: str | os.PathLike[str], *,
    batch_rows: int = BATCH_ROWS,
) -> ExportCounts:
    """``edits.parquet`` of one segment or of every segment of a name dir's ``current/``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / EDITS_FILE
    with BatchWriter(path, EDITS_SCHEMA, batch_rows) as edits:
        for row in tools.edit_rows(source):
            edits.add((row.txid, row.op, row.path, row.dst, row.user, row.timestamp_ms,
                       row.timestamp_ms, row.size_delta_bytes, row.blocks_delta,
                       row.replication))
    return ExportCounts({EDITS_FILE: edits.rows}, [path])


class BlockMapWriter:
    """The live block map (rows as they stream from the NameNode) to ``replicas.parquet``;
    the DataNodes of the head to ``datanodes.parquet`` on :meth:`close`."""

    def __init__(self, out_dir: str | os.PathLike[str], batch_rows: int = BATCH_ROWS) -> None:
        self.out = Path(out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self._replicas = BatchWriter(self.out / REPLICAS_FILE, REPLICAS_SCHEMA, batch_rows)

    def add_rows(self, rows: Iterable[BlockMapRow]) -> None:
        add = self._replicas.add
        for r in rows:
            add((r.block_id, r.inode_id, r.path, r.block_bytes, r.genstamp,
                 r.expected_replication, r.complete, r.node_id or None, r.address or None,
                 r.node_state or None, r.replica_state, r.replica_bytes, r.replica_genstamp,
                 r.corrupt_flags))

    def close(self, datanodes: Iterable[DataNodeInfo]) -> ExportCounts:
        self._replicas.close()
        path = self.out / DATANODES_FILE
        with BatchWriter(path, DATANODES_SCHEMA) as nodes:
            for n in datanodes:
                nodes.add((n.node_id, n.address, n.state, n.capacity_bytes, n.used_bytes,
                           n.free_bytes, n.blocks, n.last_contact_s))
        return ExportCounts({REPLICAS_FILE: self._replicas.rows, DATANODES_FILE: nodes.rows},
                            [self._replicas.path, path])


def write_json_lines_image(
    image: str | os.PathLike[str], out_path: str | os.PathLike[str], *,
    verify: Verify = "streaming",
) -> int:
    """The plain JSON-lines export (``xdfs oiv`` without ``--format``) to a file; used by
    the benchmark to compare formats. Returns the rows written."""
    import msgspec

    encoder = msgspec.json.Encoder()
    count = 0
    with open(out_path, "wb") as fh:
        for row in tools.dump_image(image, verify=verify):
            fh.write(encoder.encode(row))
            fh.write(b"\n")
            count += 1
    return count
