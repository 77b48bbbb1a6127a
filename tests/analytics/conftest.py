"""Fixtures of the analytics tests: one namespace built through a real NameNode per session
(tests/analytics/namespace.py), one local SparkSession per module."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.analytics.namespace import Built, build

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
