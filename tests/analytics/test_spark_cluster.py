"""``xdfs analyze`` on a Spark standalone cluster (a master and a worker from pyspark's
``bin/spark-class``): the image is read from xdfs and the report written to xdfs through
``webhdfs://``; the driver's working directory is not the worker's, and nothing is written
to it. Once through ``xdfs analyze --master`` (it sets the executors' Python and Hadoop's
WebHDFS settings), once through ``spark-submit`` with the entry point of the docs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.analytics.standalone import Standalone, spark_home, standalone_cluster
from tests.integration.conftest import ROOT, ROOT_PW
from tests.webhdfs.conftest import ALICE, ALICE_PW, WebCluster, start_web_cluster

pytestmark = pytest.mark.slow
FILES = {f"/data/d{i % 3}/f{i}": bytes([i]) * (500 + 100 * i) for i in range(9)}
#: A bounded wait for one whole application (driver, executors, every report table).
APP_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebCluster]:
    yield from start_web_cluster(tmp_path_factory.mktemp("analyze-cluster"))


@pytest.fixture(scope="module")
def image_url(web: WebCluster, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A small namespace's image, saved by the NameNode and stored on xdfs itself."""
    local = tmp_path_factory.mktemp("image")

    async def build() -> str:
        client = web.client(ROOT, ROOT_PW)
        try:
            for path, data in FILES.items():
                await client.write_file(path, data, replication=2)
            await client.save_namespace()
            image = await client.fetch_image(local)
            await client.mkdirs("/analyze")
            await client.set_permission("/analyze", 0o777)
            target = f"/analyze/in/{image.name}"
            await client.write_file(target, image.read_bytes())
            md5 = image.with_name(image.name + ".md5")  # checked when it is exported
            await client.write_file(target + ".md5", md5.read_bytes())
            return target
        finally:
            await client.close()

    return f"webhdfs://{web.http}{web.run(build())}"


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    with standalone_cluster(tmp_path_factory.mktemp("spark-standalone")) as cluster:
        yield cluster


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("XDFS_CONF", "XDFS_FS", "PYSPARK_PYTHON", "SPARK_HOME")}
    src = str(Path(__file__).resolve().parents[2] / "src")  # this checkout's xdfs
    env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")])
    return {**env, "XDFS_USER": ALICE, "XDFS_PASSWORD": ALICE_PW}


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=APP_TIMEOUT_S, check=False)
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    return result.stdout


def _check_report(web: WebCluster, out: str, spark_cluster: Standalone, driver: Path,
                  apps_before: set[str]) -> None:
    summary = json.loads(web.call("GET", f"{out}/summary.json", "OPEN").content)
    assert summary["namespace"]["files"] == len(FILES)
    assert summary["namespace"]["bytes"] == sum(len(d) for d in FILES.values())
    page = web.call("GET", f"{out}/report.html", "OPEN").text
    assert "xdfs metadata report" in page and "spark://127.0.0.1" in page
    tables = web.call("GET", f"{out}/tables", "LISTSTATUS").json()["FileStatuses"]
    names = {s["pathSuffix"] for s in tables["FileStatus"]}
    assert set(summary["tables"]) == names and "small_files_by_dir" in names
    parts = web.call("GET", f"{out}/tables/usage_by_user", "LISTSTATUS").json()
    owners = {s["owner"] for s in parts["FileStatuses"]["FileStatus"]}
    assert owners == {ALICE}  # written by the executors as the user of the OAuth2 token
    assert list(driver.iterdir()) == []  # nothing driver-local
    apps = {p.name for p in spark_cluster.worker_dir.glob("app-*")} - apps_before
    assert len(apps) == 1  # the work ran in the worker's executors


def test_xdfs_analyze_with_a_cluster_master_reads_and_writes_webhdfs(
    web: WebCluster, image_url: str, spark_cluster: Standalone, tmp_path: Path
) -> None:
    driver = tmp_path / "driver"
    driver.mkdir()
    out = f"/analyze/out-{uuid.uuid4().hex[:8]}"
    before = {p.name for p in spark_cluster.worker_dir.glob("app-*")}
    stdout = _run([sys.executable, "-m", "xdfs.analytics", "--master", spark_cluster.master_url,
                   "--image", image_url, "--out", f"webhdfs://{web.http}{out}"],
                  driver, _env())
    assert f"report: webhdfs://{web.http}{out}/report.html" in stdout
    _check_report(web, out, spark_cluster, driver, before)


def test_spark_submit_runs_the_documented_entry_point(
    web: WebCluster, image_url: str, spark_cluster: Standalone, tmp_path: Path
) -> None:
    driver = tmp_path / "driver"
    driver.mkdir()
    out = f"/analyze/submit-{uuid.uuid4().hex[:8]}"
    env = _env()
    entry = _run([sys.executable, "-m", "xdfs.analytics.submit", "--path"], driver, env).strip()
    assert entry.endswith("xdfs/analytics/submit.py") and Path(entry).is_file()
    before = {p.name for p in spark_cluster.worker_dir.glob("app-*")}
    env = {**env, "PYSPARK_PYTHON": sys.executable, "SPARK_HOME": str(spark_home())}
    # no Hadoop settings given: xdfs analyze sets the gateway's (XDFS_USER's token)
    _run([str(spark_home() / "bin" / "spark-submit"), "--master", spark_cluster.master_url,
          entry, "--image", image_url, "--out", f"webhdfs://{web.http}{out}"],
         driver, env)
    _check_report(web, out, spark_cluster, driver, before)

