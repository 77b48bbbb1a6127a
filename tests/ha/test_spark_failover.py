"""PySpark (its bundled Hadoop WebHDFS client) on ``webhdfs://<nameservice>/`` across a
failover, with real processes: two NameNodes on a quorum journal, a DataNode, and the
Hadoop settings ``xdfs conf --hadoop --spark`` prints. Tokens come from the standby's
endpoint (the one ``refresh.url``), the active is killed while a job runs, the job fails
over to the other gateway and succeeds. Hadoop's retry sleeps are shortened so the test
stays bounded (its budget: the failover attempts times their longest sleep)."""

from __future__ import annotations

import shlex
import shutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from xdfs.testing.net import free_port

from ..journal.qjm_cluster import USER
from .cluster import IDS, HaCluster, formatted_pair

pytest.importorskip("pyspark")
if shutil.which("java") is None:
    pytest.fail("Spark needs Java 17+ on PATH", pytrace=False)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

NAMESERVICE = "sparkns"
#: Hadoop's WebHDFS failover: attempts and sleeps (defaults 15, 500 ms, 15 s) shortened,
#: and short socket timeouts, so a dead gateway costs little.
FAST_FAILOVER = {
    "dfs.http.client.failover.max.attempts": "60",
    "dfs.http.client.failover.sleep.base.millis": "100",
    "dfs.http.client.failover.sleep.max.millis": "2000",
    "dfs.webhdfs.socket.connect-timeout": "5s",
    "dfs.webhdfs.socket.read-timeout": "60s",
}
ROWS = 2000


@pytest.fixture
def ha(tmp_path: Path) -> Iterator[HaCluster]:
    """nn1 active, nn2 standby, each with a gateway; one DataNode (replication 1)."""
    with formatted_pair(tmp_path, "-D", "datanode.http_address=127.0.0.1:0",
                        "-D", "namenode.default_replication=1") as cluster:
        gateways = {nn: f"127.0.0.1:{free_port()}" for nn in IDS}
        cluster.ha.update({"nameservice": NAMESERVICE, "webhdfs": gateways})
        cluster.write_conf()
        for nn_id in IDS:
            cluster.start(nn_id, "-D", f"namenode.http_address={gateways[nn_id]}")
        result = cluster.admin("-transitionToActive", "nn1")
        assert result.returncode == 0, result.stderr
        cluster.start_datanode(0)
        cluster.wait(lambda: cluster.writable(1), "a live DataNode on nn1")
        yield cluster


def _spark_settings(cluster: HaCluster) -> dict[str, str]:
    """What ``xdfs conf --hadoop --spark`` prints, tokens from nn2 (the standby now)."""
    printed = cluster.xdfs("conf", "--hadoop", "--spark", "--show-secrets",
                           "--token-namenode", "nn2")
    assert printed.returncode == 0, printed.stderr
    words = shlex.split(printed.stdout)
    assert words[::2] == ["--conf"] * (len(words) // 2)
    settings = dict(word.split("=", 1) for word in words[1::2])
    prefix = "spark.hadoop."
    assert all(key.startswith(prefix) for key in settings)
    return {key[len(prefix):]: value for key, value in settings.items()}


@pytest.fixture
def spark(ha: HaCluster) -> Iterator[Any]:
    from pyspark.sql import SparkSession

    # local[2, 4]: a task may be retried, as on a cluster
    session = (SparkSession.builder.master("local[2,4]").appName("xdfs-ha-failover")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.pyspark.python", sys.executable).getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    conf = session.sparkContext._jsc.hadoopConfiguration()
    for key, value in {**_spark_settings(ha), **FAST_FAILOVER}.items():
        conf.set(key, value)
    try:
        yield session
    finally:
        session.stop()


def _held_until(marks: Path) -> Any:
    """A UDF that tells the test the job's tasks are running (``marks/started``) and
    holds them until the test says the failover is over (``marks/go``): the tasks have
    read their input through the old active and write their output through the new one,
    with no timing guessed. Nested, so Spark pickles it by value for its Python workers."""
    from pyspark.sql.functions import udf
    from pyspark.sql.types import LongType

    def hold(value: int) -> int:
        import time
        from pathlib import Path as P

        (P(str(marks)) / "started").touch()
        deadline = time.monotonic() + 300
        while not (P(str(marks)) / "go").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return value

    return udf(lambda value: hold(value), LongType())  # noqa: PLW0108 (untyped: no pandas UDF guess from hints)


def test_a_spark_job_survives_the_active_being_killed(ha: HaCluster, spark: Any,
                                                      tmp_path: Path) -> None:
    settings = _spark_settings(ha)
    assert settings["dfs.nameservices"] == NAMESERVICE
    assert settings[f"dfs.ha.namenodes.{NAMESERVICE}"] == "nn1,nn2"
    gateways: dict[str, str] = ha.ha["webhdfs"]  # type: ignore[assignment]
    assert settings["dfs.webhdfs.oauth2.refresh.url"] == f"http://{gateways['nn2']}/oauth2/token"
    base = f"webhdfs://{NAMESERVICE}/user/{USER}/spark"
    df = spark.createDataFrame([(i, f"n{i}", i * 0.5) for i in range(ROWS)],
                               ["id", "name", "value"]).repartition(2)
    df.write.parquet(f"{base}/before")
    assert spark.read.parquet(f"{base}/before").count() == ROWS

    marks = tmp_path / "marks"
    marks.mkdir()
    hold = _held_until(marks)
    outcome: dict[str, Any] = {}

    def job() -> None:  # reads through nn1, held, writes through nn2 (Hadoop fails over)
        try:
            before = spark.read.parquet(f"{base}/before")
            held = before.filter("id % 2 = 0").withColumn("id", hold("id"))
            held.write.parquet(f"{base}/after")
            outcome["rows"] = spark.read.parquet(f"{base}/after").count()
        except Exception as exc:  # reported below, with the cluster's logs
            outcome["error"] = str(exc)[:4000]

    running = threading.Thread(target=job, name="spark-job")
    running.start()
    ha.wait(lambda: (marks / "started").exists() or not running.is_alive(),
            "the Spark job's tasks running")
    ha.namenodes["nn1"].kill()
    result = ha.admin("-transitionToActive", "nn2")
    assert result.returncode == 0, result.stderr
    ha.wait(lambda: ha.writable(1), "nn2 active with a live DataNode")
    (marks / "go").touch()
    running.join(timeout=400)
    assert not running.is_alive(), "the Spark job did not finish"
    assert "error" not in outcome, f"{outcome.get('error')}\n{ha.logs()[-3000:]}"
    assert outcome["rows"] == ROWS // 2
