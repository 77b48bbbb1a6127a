from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from xdfs.common.process import ProcessGroup
from xdfs.testing.lazyfs import CrashSite, LazyFS, fuse_unavailable_reason
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


@pytest.fixture
def lazyfs(tmp_path: Path) -> Iterator[LazyFS]:
    """The power-loss layer mounted at ``tmp_path/disk`` (docs/testing.md): put server
    storage under ``lazyfs.path``, then ``lazyfs.power_cut(*processes)``. Fails, never
    skips, where FUSE is missing: CI machines have it (scripts/bootstrap.sh)."""
    reason = fuse_unavailable_reason()
    if reason is not None:
        pytest.fail(f"the power-loss tests need FUSE: {reason}", pytrace=False)
    with LazyFS(tmp_path / "lazyfs-backing", tmp_path / "disk", log_dir=tmp_path) as disk:
        yield disk


@pytest.fixture(params=["sigkill", pytest.param("power_cut", marks=pytest.mark.powerloss)])
def crash_site(request: pytest.FixtureRequest, tmp_path: Path) -> CrashSite:
    """Runs a crash test twice: storage under ``tmp_path`` and crashes by SIGKILL, then
    storage on the power-loss layer and crashes by power cut (``site.crash(*procs)``)."""
    if request.param == "sigkill":
        return CrashSite(tmp_path)
    disk: LazyFS = request.getfixturevalue("lazyfs")
    return CrashSite(disk.path, disk)
