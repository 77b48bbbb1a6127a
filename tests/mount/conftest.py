"""Fixtures of the mount tests: the module's real cluster (``live_cluster``: a NameNode and
three DataNodes in this process), ``xdfs mount`` of it as a child process, and a client
to compare what the mount shows with what the cluster holds."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.datapath.conftest import LiveCluster, live_cluster, scratch_dir
from tests.integration.conftest import ROOT, ROOT_PW
from xdfs.client.client import Client
from xdfs.common.process import ServerProcess
from xdfs.mount.run import FUSERMOUNT, READY_LINE, is_mounted

__all__ = ["live_cluster"]


def fuse_missing() -> str | None:
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "/dev/fuse is missing or not usable"
    if shutil.which(FUSERMOUNT) is None:
        return f"{FUSERMOUNT} is not installed (scripts/bootstrap.sh installs fuse3)"
    try:
        import pyfuse3  # noqa: F401
    except ImportError as exc:
        return f"pyfuse3 cannot be loaded ({exc}); scripts/bootstrap.sh installs it"
    return None


@pytest.fixture(autouse=True)
def _needs_fuse() -> None:
    reason = fuse_missing()
    if reason is not None:
        pytest.fail(f"the mount tests need FUSE: {reason}")


class Mount:
    """One ``xdfs mount --foreground`` child of the test."""

    def __init__(self, cluster: LiveCluster, where: Path, log: Path, *options: str) -> None:
        self.path = where
        self.env = {"XDFS_FS": cluster.url, "XDFS_USER": ROOT, "XDFS_PASSWORD": ROOT_PW}
        args = ["mount", str(where), "--foreground"]
        for option in options:
            args += ["-o", option]
        self.process = ServerProcess.xdfs(*args, log_path=log, ready_pattern=READY_LINE,
                                          env=self.env)

    def start(self) -> Mount:
        self.path.mkdir(parents=True, exist_ok=True)
        self.process.start(60.0)
        return self

    def stop(self) -> None:
        if self.process.proc is not None and self.process.alive():
            self.process.terminate(30.0)
        if is_mounted(self.path):
            subprocess.run([FUSERMOUNT, "-u", "-z", str(self.path)], capture_output=True,
                           timeout=30)


@pytest.fixture
def client(live_cluster: LiveCluster) -> Iterator[Client]:
    with live_cluster.client() as made:
        yield made


@pytest.fixture
def base(client: Client) -> Iterator[str]:
    """A fresh xdfs directory for one test."""
    yield from scratch_dir(client, "/mount")


@pytest.fixture
def mount(live_cluster: LiveCluster, tmp_path: Path) -> Iterator[Mount]:
    """The cluster mounted (attribute and entry timeouts short: the tests compare with
    changes made through the client)."""
    made = Mount(live_cluster, tmp_path / "mnt", tmp_path / "mount.log",
                 "attr_timeout=0.2,entry_timeout=0.2,call_timeout=20")
    made.start()
    try:
        yield made
    finally:
        made.stop()
