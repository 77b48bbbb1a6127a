"""Fixtures of the analytics tests: one namespace built through a real NameNode per session
(tests/analytics/namespace.py), one local SparkSession per module."""

from __future__ import annotations

import asyncio
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.analytics.namespace import Built, build
from tests.datapath.conftest import fast_config, start_cluster
from xdfs.testing.minicluster import MiniCluster

pytest.importorskip("pyspark")
if shutil.which("java") is None:  # scripts/bootstrap.sh installs it; say why if it did not
    pytest.fail("tests/analytics need Java 17+ on PATH for Spark", pytrace=False)


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return asyncio.run(build(tmp_path_factory.mktemp("analytics-cluster")))


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from xdfs.analytics.job import spark_session

    session = spark_session("local[2]", shuffle_partitions=4)
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    return tmp_path / "out"


@pytest.fixture(scope="module")
def fs_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real cluster (NameNode + three DataNodes, in-process) served from a background
    thread, so that Spark's Python workers and blocking clients can reach it."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    stop = asyncio.Event()
    ready: asyncio.Future[str] = asyncio.run_coroutine_threadsafe(_future(), loop).result()

    async def serve() -> None:
        async with MiniCluster(tmp_path_factory.mktemp("ds"), deadline_s=600) as mc:
            cluster = await start_cluster(mc, fast_config())
            await cluster.client.close()
            ready.set_result(f"xdfs://{mc.namenodes[0].address}")
            await stop.wait()

    done = asyncio.run_coroutine_threadsafe(serve(), loop)
    uri = asyncio.run_coroutine_threadsafe(_wait(ready), loop).result(timeout=120)
    try:
        yield uri
    finally:
        loop.call_soon_threadsafe(stop.set)
        done.result(timeout=60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)


async def _future() -> asyncio.Future[str]:
    return asyncio.get_running_loop().create_future()


async def _wait(future: asyncio.Future[str]) -> str:
    return await future
