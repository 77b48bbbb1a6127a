"""Spark with its bundled Hadoop client on xdfs through ``webhdfs://`` paths, as a user
authenticated with OAuth2 bearer tokens from the gateway: Parquet, CSV and JSON read and
written by Spark itself (local[2])."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from tests.webhdfs.conftest import ALICE, ALICE_PW, WebCluster
from xdfs.analytics.webhdfs import configure, hadoop_conf

pytest.importorskip("pyspark")
if shutil.which("java") is None:  # scripts/bootstrap.sh installs it; say why if it did not
    pytest.fail("Spark needs Java 17+ on PATH", pytrace=False)


@pytest.fixture(scope="module")
def spark(web: WebCluster) -> Iterator[Any]:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[2]").appName("xdfs-webhdfs")
    builder = builder.config("spark.sql.shuffle.partitions", "4")
    for key, value in hadoop_conf(web.http, ALICE, ALICE_PW).items():
        builder = builder.config(f"spark.hadoop.{key}", value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    configure(session, web.http, ALICE, ALICE_PW)  # also when getOrCreate found a session
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def base(web: WebCluster, web_dir: str) -> str:
    return f"webhdfs://{web.http}{web_dir}"


def rows(count: int) -> list[tuple[int, str, float]]:
    return [(i, f"name-{i}", i * 0.5) for i in range(count)]


def test_parquet_written_and_read_by_spark(spark: Any, web: WebCluster, web_dir: str,
                                           base: str) -> None:
    df = spark.createDataFrame(rows(5000), ["id", "name", "value"]).repartition(3)
    df.write.parquet(f"{base}/table")
    listing = web.call("GET", f"{web_dir}/table", "LISTSTATUS").json()
    files = {s["pathSuffix"]: s for s in listing["FileStatuses"]["FileStatus"]}
    assert "_SUCCESS" in files
    parts = [name for name in files if name.endswith(".parquet")]
    assert len(parts) == 3
    assert all(files[name]["owner"] == ALICE for name in parts)  # written as alice
    back = spark.read.parquet(f"{base}/table")
    assert back.count() == 5000
    assert back.agg({"value": "sum"}).collect()[0][0] == sum(i * 0.5 for i in range(5000))
    assert sorted(back.filter("id < 3").select("name").collect()) == [
        ("name-0",), ("name-1",), ("name-2",)]
    df.write.mode("overwrite").parquet(f"{base}/table")
    assert spark.read.parquet(f"{base}/table").count() == 5000


def test_csv_and_json_with_schemas(spark: Any, web: WebCluster, base: str) -> None:
    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

    schema = StructType([StructField("id", LongType()), StructField("name", StringType()),
                         StructField("value", DoubleType())])
    df = spark.createDataFrame(rows(300), schema)
    df.write.option("header", True).csv(f"{base}/csv")
    csv = spark.read.option("header", True).schema(schema).csv(f"{base}/csv")
    assert sorted(csv.collect()) == sorted(df.collect())
    df.write.json(f"{base}/json")
    json = spark.read.json(f"{base}/json")
    assert {f.name: f.dataType for f in json.schema.fields} == {
        "id": LongType(), "name": StringType(), "value": DoubleType()}
    assert json.count() == 300


def test_spark_reads_what_xdfs_clients_wrote(spark: Any, web: WebCluster, web_dir: str,
                                             base: str) -> None:
    text = "".join(f"{i},{i * i}\n" for i in range(1000)).encode()
    client = web.client()
    try:
        web.run(client.write_file(f"{web_dir}/squares.csv", text))
    finally:
        web.run(client.close())
    squares = spark.read.csv(f"{base}/squares.csv", schema="n LONG, square LONG")
    assert squares.filter("square != n * n").count() == 0
    assert squares.count() == 1000


def test_hadoop_filesystem_api_through_webhdfs(spark: Any, web: WebCluster, web_dir: str,
                                               base: str) -> None:
    """Hadoop's own FileSystem client (the one Spark uses) parses every answer it needs:
    statuses, listings, renames, deletes, permissions, content summaries and the file
    checksum (it checks the algorithm name against the bytes)."""
    from py4j.protocol import Py4JJavaError

    from tests.webhdfs.test_rest import DATA, hdfs_checksum, put_file

    jvm = spark._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()

    def path(name: str) -> Any:
        return jvm.org.apache.hadoop.fs.Path(f"{base}/{name}")

    fs = path("").getFileSystem(conf)
    out = fs.create(path("data"))
    out.write(bytearray(DATA))
    out.close()
    status = fs.getFileStatus(path("data"))
    assert (status.getLen(), status.isFile(), status.getOwner()) == (len(DATA), True, ALICE)
    put_file(web, f"{web_dir}/roots", b"r")  # root's: alice may not change its mode
    with pytest.raises(Py4JJavaError, match="AccessControlException"):
        fs.setPermission(path("roots"), jvm.org.apache.hadoop.fs.permission.FsPermission(
            "777"))
    assert fs.mkdirs(path("d/e"))
    assert fs.rename(path("data"), path("d/moved"))
    assert not fs.rename(path("data"), path("d/again"))  # gone: false, as HDFS
    listed = sorted(entry.getPath().getName() for entry in fs.listStatus(path("d")))
    assert listed == ["e", "moved"]
    fs.setPermission(path("d/moved"), jvm.org.apache.hadoop.fs.permission.FsPermission(
        "640"))
    assert fs.getFileStatus(path("d/moved")).getPermission().toString() == "rw-r-----"
    summary = fs.getContentSummary(path("d"))
    assert (summary.getFileCount(), summary.getLength()) == (1, len(DATA))
    checksum = fs.getFileChecksum(path("d/moved"))
    algorithm, hexdigest = hdfs_checksum(DATA, status.getBlockSize())
    # Hadoop's serialized form is the 28 bytes of the wire, then its CRC type (4 bytes)
    assert (checksum.getAlgorithmName(), bytes(checksum.getBytes())[:28].hex()) == (
        algorithm, hexdigest)
    stream = fs.open(path("d/moved"))
    try:
        stream.seek(100_000)
        assert bytes(stream.read() for _ in range(10)) == DATA[100_000:100_010]
    finally:
        stream.close()
    assert fs.delete(path("d"), True)
    assert not fs.exists(path("d"))
