"""What ``xdfs analyze`` sets for a cluster's executors, and where it reads and writes
(no Spark started: tests/analytics/test_spark_cluster.py runs the whole job on a cluster)."""

from __future__ import annotations

import sys

import click
import pytest

from xdfs.analytics.storage import is_url, join, webhdfs_authorities
from xdfs.cli.analyze import spark_settings
from xdfs.cli.main import CliState


@pytest.fixture
def state(monkeypatch: pytest.MonkeyPatch) -> CliState:
    for name in ("XDFS_CONF", "XDFS_FS", "PYSPARK_PYTHON"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDFS_USER", "alice")
    monkeypatch.setenv("XDFS_PASSWORD", "pw")
    return CliState()


def test_a_cluster_master_gets_the_executors_python_and_the_gateways_settings(
    state: CliState, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = spark_settings(state, "spark://m:7077", None,
                          ["webhdfs://gw:9870/in/fsimage_1", None, None, "webhdfs://gw:9870/r"])
    assert conf["spark.pyspark.python"] == sys.executable
    assert conf["spark.hadoop.dfs.webhdfs.oauth2.client.id"] == "alice"
    assert conf["spark.hadoop.dfs.webhdfs.oauth2.credential"] == "pw"
    assert conf["spark.hadoop.dfs.webhdfs.oauth2.refresh.url"] == "http://gw:9870/oauth2/token"
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/py/bin/python3")
    assert spark_settings(state, "spark://m:7077", None, [])["spark.pyspark.python"] == (
        "/opt/py/bin/python3")
    assert spark_settings(state, "spark://m:7077", "/x/python", [])[
        "spark.pyspark.python"] == "/x/python"


def test_local_paths_and_a_local_master_need_nothing(state: CliState) -> None:
    assert spark_settings(state, "local[2]", None, ["/img/fsimage_1", None, None, "out"]) == {}
    assert spark_settings(state, None, None, ["hdfs://nn:8020/img", "s3a://b/r"]) == {}


def test_two_gateways_are_refused(state: CliState) -> None:
    with pytest.raises(click.UsageError, match="several gateways"):
        spark_settings(state, None, None, ["webhdfs://a:1/x", "webhdfs://b:2/y"])


def test_urls_keep_their_double_slash() -> None:
    assert is_url("webhdfs://gw:9870/r") and is_url("file:///tmp/r") and not is_url("/tmp/r")
    assert join("webhdfs://gw:9870/r/", "tables", "t") == "webhdfs://gw:9870/r/tables/t"
    assert join("out", "tables") == "out/tables"
    assert webhdfs_authorities("webhdfs://a:1/x", None, "webhdfs://a:1/y", "/z") == ["a:1"]


def test_spark_shows_its_progress_bar_on_a_terminal_only() -> None:
    import io
    import os
    import pty

    from xdfs.cli.analyze import progress_settings

    leader, follower = pty.openpty()
    try:
        with os.fdopen(follower, "w", closefd=False) as terminal:
            assert progress_settings(terminal) == {"spark.ui.showConsoleProgress": "true"}
    finally:
        os.close(leader)
        os.close(follower)
    assert progress_settings(io.StringIO()) == {"spark.ui.showConsoleProgress": "false"}
