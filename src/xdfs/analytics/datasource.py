"""``spark.read.format("xdfs")``: a Spark Python data source (pyspark >= 4.0) over xdfs files.

Register once per session with :func:`register`, then::

    spark.read.format("xdfs").option("fs", "xdfs://nn:8020").load("/logs")        # binary
    spark.read.format("xdfs").option("format", "text").load("/logs")              # lines
    df.write.format("xdfs").option("format", "text").mode("append").save("/out")  # lines

Parquet, CSV, JSON (any Hadoop format) are not read here: Spark's own readers do that on
``webhdfs://`` paths, with splitting, pushdown and partition discovery a Python data
source cannot give; ``format=parquet`` (csv, json, orc, avro) says so (:func:`_mode`).

Options: ``fs`` (default: the client configuration, ``XDFS_FS``/``XDFS_CONF``), ``user``,
``password``, ``token``, ``format`` (``binary``: one row per file with path, length,
modification_time, content; ``text``: one row per line, ``value``), ``recursive``
(``true``: the files of every subdirectory too).

Partitions: ``binary`` reads one file per partition; ``text`` one *block range* per
partition (the file's ``block_size`` slices), splitting lines as Hadoop's text input does:
a partition owns the lines that *start* in its range, reading past its end to finish the
last one. The writer writes one file per task (``part-<partition>-<uuid>.txt`` of the rows'
``value``; or, for ``format=binary``, the ``content`` of each row to ``<path>/<name>``),
then ``_SUCCESS`` on commit; an aborted job deletes what its tasks wrote.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from xdfs.common.addresses import SCHEME, split_uri

BINARY_SCHEMA = "path string, length long, modification_time timestamp, content binary"
TEXT_SCHEMA = "value string"
READ_CHUNK_BYTES = 1 << 20


def register(spark: Any) -> None:
    """Make ``format("xdfs")`` known to ``spark`` (a SparkSession). With a local master,
    the data source's Python workers run this interpreter (see :func:`use_this_python`)."""
    use_this_python(spark.sparkContext)
    spark.dataSource.register(XdfsDataSource)


def use_this_python(context: Any) -> None:
    """Run the Python workers of a *local* Spark with this interpreter, the one that can
    import xdfs, unless the user chose one (``PYSPARK_PYTHON``, ``spark.pyspark.python``).

    PySpark's default is ``python3`` from PATH, usually another interpreter (not the
    virtualenv's): the workers then fail with ``No module named 'xdfs'``. A cluster's
    executors are other machines: there the user sets PYSPARK_PYTHON, nothing is guessed.
    Functions registered after this call (the data source, UDFs) use it."""
    chosen = os.environ.get("PYSPARK_PYTHON") or context.getConf().get("spark.pyspark.python")
    if chosen or not str(context.master).startswith("local"):
        return
    context.pythonExec = sys.executable
    os.environ["PYSPARK_PYTHON"] = sys.executable  # sessions created later in this process


def _client(options: dict[str, str]) -> Any:
    from xdfs.client.client import Client

    kwargs = {k: options[k] for k in ("user", "password", "token") if k in options}
    return Client(options.get("fs"), **kwargs)


#: Formats Spark's own readers and writers handle on ``webhdfs://`` paths (see
#: :func:`_mode`): the data source points there instead of reading them row by row.
SPARK_FORMATS = ("parquet", "csv", "json", "orc", "avro")


def _mode(options: dict[str, str]) -> str:
    mode = options.get("format", "binary").lower()
    if mode in SPARK_FORMATS:
        # A Python data source moves every row through a Python worker, reads whole files
        # per partition and pushes no filter or column down; Spark's own readers on
        # webhdfs:// split files, prune row groups and partitions and merge schemas.
        raise ValueError(
            f"xdfs data source: format {mode!r} is read by Spark itself: use "
            f"spark.read.{mode}('webhdfs://<namenode http address>/<path>') "
            "(Hadoop settings: xdfs.analytics.webhdfs.hadoop_conf; docs/analytics.md)")
    if mode not in ("binary", "text"):
        raise ValueError(f"xdfs data source: format must be binary or text, not {mode!r}")
    return mode


def _path(options: dict[str, str]) -> str:
    path = options.get("path")
    if not path:
        raise ValueError("xdfs data source: give a path (load(path) / save(path))")
    uri = split_uri(path)
    if uri is None:
        return path
    authority, path = uri
    if authority:
        options.setdefault("fs", SCHEME + authority)
    return path


class XdfsDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "xdfs"

    def schema(self) -> str:
        return TEXT_SCHEMA if _mode(self.options) == "text" else BINARY_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return XdfsReader(dict(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        options = dict(self.options)
        base = _path(options)
        if overwrite:
            with _client(options) as client:
                if client.exists(base):
                    client.delete(base, recursive=True, skip_trash=True)
        return XdfsWriter(options, base)


@dataclass
class FileRange(InputPartition):
    path: str
    start: int
    end: int  # exclusive
    length: int  # the whole file's
    mtime_ms: int


def _files(client: Any, base: str, recursive: bool) -> list[Any]:
    top = client.stat(base)
    if not top.is_dir:
        return [top]
    out, stack = [], [base]
    while stack:
        for entry in client.list_dir(stack.pop()):
            if entry.is_dir:
                if recursive:
                    stack.append(entry.path)
            elif not entry.path.rsplit("/", 1)[-1].startswith(("_", ".")):
                out.append(entry)  # _SUCCESS and hidden files are not data, as in Hadoop
    return sorted(out, key=lambda status: status.path)


class XdfsReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.mode = _mode(options)
        self.base = _path(options)

    def partitions(self) -> list[FileRange]:
        recursive = self.options.get("recursive", "false").lower() == "true"
        with _client(self.options) as client:
            files = _files(client, self.base, recursive)
        ranges: list[FileRange] = []
        for f in files:
            if self.mode == "binary" or f.length == 0:
                ranges.append(FileRange(f.path, 0, f.length, f.length, f.mtime_ms))
                continue
            step = f.block_size or f.length
            ranges.extend(
                FileRange(f.path, start, min(start + step, f.length), f.length, f.mtime_ms)
                for start in range(0, f.length, step)
            )
        return ranges or [FileRange("", 0, 0, 0, 0)]  # Spark wants at least one

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, FileRange)
        if not partition.path:
            return
        with _client(self.options) as client:
            if self.mode == "binary":
                content = client.read_file(partition.path)
                when = dt.datetime.fromtimestamp(partition.mtime_ms / 1000, dt.UTC)
                yield (partition.path, len(content), when, content)
                return
            if partition.length == 0:
                return
            with client.open(partition.path, "rb") as fh:
                for line in lines_in_range(fh, partition.start, partition.end):
                    yield (line.decode("utf-8", errors="replace"),)


def lines_in_range(fh: Any, start: int, end: int) -> Iterator[bytes]:
    """The lines (without their newline) that start at a byte offset in [start, end) of the
    seekable binary file ``fh``; the last one may run past ``end``."""
    if start > 0:
        fh.seek(start - 1)
        buffer = b""
        while True:  # skip the line that started before us (or just the newline at start-1)
            chunk = fh.read(READ_CHUNK_BYTES)
            if not chunk:
                return
            newline = chunk.find(b"\n")
            if newline >= 0:
                buffer = chunk[newline + 1:]
                position = fh.tell() - len(buffer)
                break
    else:
        fh.seek(0)
        buffer, position = b"", 0
    while position < end:
        newline = buffer.find(b"\n")
        while newline < 0:
            chunk = fh.read(READ_CHUNK_BYTES)
            if not chunk:
                if buffer:
                    yield buffer  # the last line of a file without a final newline
                return
            buffer += chunk
            newline = buffer.find(b"\n")
        yield buffer[:newline]
        position += newline + 1
        buffer = buffer[newline + 1:]


@dataclass
class _Written(WriterCommitMessage):
    paths: list[str]


class XdfsWriter(DataSourceWriter):
    def __init__(self, options: dict[str, str], base: str) -> None:
        self.options = options
        self.base = base.rstrip("/") or "/"
        self.mode = _mode(options)

    def write(self, iterator: Iterator[Any]) -> _Written:
        from pyspark import TaskContext

        context = TaskContext.get()
        part = context.partitionId() if context is not None else 0
        written: list[str] = []
        with _client(self.options) as client:
            if self.mode == "binary":
                for row in iterator:
                    name = str(row["path"]).rsplit("/", 1)[-1]
                    target = f"{self.base}/{name}"
                    client.write_file(target, bytes(row["content"]), overwrite=True)
                    written.append(target)
                return _Written(written)
            target = f"{self.base}/part-{part:05d}-{uuid.uuid4().hex[:12]}.txt"
            with client.open(target, "wb") as fh:
                for row in iterator:
                    value = row["value"]
                    fh.write(("" if value is None else str(value)).encode() + b"\n")
            written.append(target)
        return _Written(written)

    def commit(self, messages: list[Any]) -> None:
        with _client(self.options) as client:
            client.write_file(f"{self.base}/_SUCCESS", b"", overwrite=True)

    def abort(self, messages: list[Any]) -> None:
        with _client(self.options) as client:
            for message in messages:
                for path in getattr(message, "paths", ()):
                    if client.exists(path):
                        client.delete(path, skip_trash=True)
