from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from xdfs.common.process import ProcessGroup
from xdfs.testing.minicluster import MiniCluster


@pytest.fixture
async def minicluster(tmp_path: Path) -> AsyncIterator[MiniCluster]:
    async with MiniCluster(tmp_path) as cluster:
        yield cluster


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[ProcessGroup]:
    """Start real server processes; every survivor is SIGKILLed at teardown."""
    with ProcessGroup(tmp_path) as group:
        yield group
