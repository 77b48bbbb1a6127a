"""The xdfs Spark data source and Parquet through fsspec, against a real cluster (NameNode +
three DataNodes, in-process, served from a background thread while Spark's Python workers
connect to it)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.datapath.conftest import payload
from tests.integration.conftest import ROOT, ROOT_PW
from xdfs.analytics.datasource import lines_in_range, register
from xdfs.client.client import Client
from xdfs.config import XdfsConfig

pytestmark = pytest.mark.slow
BLOCK = 64 * 1024


@pytest.fixture(scope="module")
def client(fs_uri: str) -> Iterator[Client]:
    with Client(fs_uri, user=ROOT, password=ROOT_PW, token="", config=XdfsConfig()) as c:
        yield c


def _options(fs_uri: str) -> dict[str, str]:
    return {"fs": fs_uri, "user": ROOT, "password": ROOT_PW}


def test_text_lines_split_by_block_range(spark: Any, client: Client, fs_uri: str) -> None:
    register(spark)
    lines = [f"line {i} " + "x" * (i % 97) for i in range(6000)]  # lines straddle blocks
    data = ("\n".join(lines) + "\n").encode()
    client.write_file("/ds/text/a.txt", data, block_size=BLOCK)
    client.write_file("/ds/text/b.txt", b"no final newline\nlast", block_size=BLOCK)
    df = spark.read.format("xdfs").options(**_options(fs_uri), format="text").load(
        "/ds/text")
    assert df.rdd.getNumPartitions() == -(-len(data) // BLOCK) + 1
    assert sorted(r.value for r in df.collect()) == sorted(
        [*lines, "no final newline", "last"])


def test_binary_files_round_trip_and_writer(spark: Any, client: Client, fs_uri: str) -> None:
    register(spark)
    files = {f"/ds/bin/f{i}": payload(1000 * i + 7, seed=i) for i in range(5)}
    for path, content in files.items():
        client.write_file(path, content, block_size=BLOCK)
    df = spark.read.format("xdfs").options(**_options(fs_uri)).load(f"{fs_uri}/ds/bin")
    got = {r.path: bytes(r.content) for r in df.collect()}
    assert got == files
    assert {r.path: r.length for r in df.select("path", "length").collect()} == {
        p: len(c) for p, c in files.items()}
    # binary writer: the same contents under another directory
    df.write.format("xdfs").options(**_options(fs_uri), format="binary").mode(
        "overwrite").save("/ds/bin-copy")
    for path, content in files.items():
        assert client.read_file("/ds/bin-copy/" + path.rsplit("/", 1)[1]) == content
    # text writer, then read back through the reader
    words = spark.createDataFrame([(f"w{i}",) for i in range(500)], "value string")
    words.repartition(3).write.format("xdfs").options(**_options(fs_uri), format="text").mode(
        "overwrite").save("/ds/words")
    names = [e.path.rsplit("/", 1)[1] for e in client.list_dir("/ds/words")]
    assert "_SUCCESS" in names and sum(n.startswith("part-") for n in names) == 3
    back = spark.read.format("xdfs").options(**_options(fs_uri), format="text").load(
        "/ds/words")
    assert sorted(r.value for r in back.collect()) == sorted(f"w{i}" for i in range(500))


def test_parquet_through_fsspec_with_pandas_and_pyarrow(client: Client, fs_uri: str) -> None:
    from xdfs.client.fsspec_impl import XdfsFileSystem

    storage = {"user": ROOT, "password": ROOT_PW}
    frame = pd.DataFrame({"n": range(20000), "s": [f"v{i % 13}" for i in range(20000)]})
    frame.to_parquet(f"{fs_uri}/pq/pandas.parquet", storage_options=storage)
    assert pd.read_parquet(f"{fs_uri}/pq/pandas.parquet",
                           storage_options=storage).equals(frame)
    fs = XdfsFileSystem(fs_uri, user=ROOT, password=ROOT_PW)
    table = pa.table({"x": list(range(1000)), "y": [i * 0.5 for i in range(1000)]})
    pq.write_table(table, "/pq/arrow.parquet", filesystem=fs, row_group_size=100)
    assert pq.read_table("/pq/arrow.parquet", filesystem=fs).equals(table)
    assert pq.ParquetFile(fs.open("/pq/arrow.parquet", "rb")).num_row_groups == 10


@pytest.mark.parametrize("step", [1, 2, 3, 5, 7, 64])
def test_lines_in_range_owns_each_line_once(step: int) -> None:
    data = b"a\nbb\n\nccc\ndddd\ne"
    lines = [line for start in range(0, len(data), step)
             for line in lines_in_range(io.BytesIO(data), start, min(start + step, len(data)))]
    assert lines == [b"a", b"bb", b"", b"ccc", b"dddd", b"e"]


def test_oiv_and_oev_parquet_cli(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from xdfs.cli.main import cli

    runner = CliRunner()
    bad = runner.invoke(cli, ["oiv", "-i", "x", "--format", "parquet"])
    assert bad.exit_code == 2 and "needs -o DIR" in bad.output


_DRIVER = """
from pyspark.sql import SparkSession
from xdfs.analytics.datasource import register
spark = SparkSession.builder.master("local[1]").getOrCreate()
register(spark)
print("ROWS", spark.read.format("xdfs").load("/pyexec").count())
spark.stop()
"""


def test_local_spark_workers_need_no_pyspark_python(
    client: Client, fs_uri: str, tmp_path: Path
) -> None:
    """Issue 17 item 20: with PYSPARK_PYTHON unset, local Spark starts its Python workers
    with `python3` from PATH, which cannot import xdfs; register() makes them run this
    interpreter. Here PATH's python3 is the base interpreter of the virtualenv."""
    client.write_file("/pyexec/a.txt", b"hello\n")
    shim = tmp_path / "bin" / "python3"
    shim.parent.mkdir()
    base = getattr(sys, "_base_executable", sys.executable)  # outside the virtualenv
    shim.write_text(f'#!/bin/sh\nexec "{base}" "$@"\n')
    shim.chmod(0o755)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH")
           and not k.startswith("XDFS_")}
    env.update(PATH=f"{shim.parent}:{env['PATH']}", XDFS_FS=fs_uri, XDFS_USER=ROOT,
               XDFS_PASSWORD=ROOT_PW)
    # the premise: the interpreter PySpark would pick cannot import xdfs
    premise = subprocess.run(["python3", "-c", "import xdfs"], env=env, capture_output=True)
    assert premise.returncode != 0
    done = subprocess.run([sys.executable, "-c", _DRIVER], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ROWS 1" in done.stdout


@pytest.mark.parametrize("kind", ["parquet", "csv", "json"])
def test_spark_formats_point_to_sparks_own_readers_on_webhdfs(
    spark: Any, fs_uri: str, kind: str
) -> None:
    # Spark's readers on webhdfs:// (tests/webhdfs/test_spark.py) split, prune and push
    # filters down; the Python data source says where to go instead of reading row by row
    register(spark)
    with pytest.raises(Exception, match=rf"spark\.read\.{kind}\('webhdfs://"):
        spark.read.format("xdfs").options(**_options(fs_uri), format=kind).load("/ds").count()
