"""Mounting and unmounting ``xdfs mount``: SIGINT, SIGTERM and ``fusermount3 -u`` each
unmount cleanly; a bad mount point or a cluster that is down is one clear line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.datapath.conftest import LiveCluster
from tests.integration.conftest import ROOT, ROOT_PW
from tests.mount.conftest import Mount
from xdfs.mount.run import FUSERMOUNT, is_mounted
from xdfs.testing.net import free_port


def xdfs_mount(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "xdfs", "mount", *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **env})


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "fusermount3"])
def test_unmounts_cleanly(live_cluster: LiveCluster, tmp_path: Path, how: str) -> None:
    mount = Mount(live_cluster, tmp_path / "mnt", tmp_path / "mount.log").start()
    try:
        assert is_mounted(mount.path)
        assert os.stat(mount.path).st_ino == 1  # the root of the mount
        proc = mount.process.proc
        assert proc is not None
        if how == "fusermount3":
            subprocess.run([FUSERMOUNT, "-u", str(mount.path)], check=True, timeout=30)
        else:
            proc.send_signal(getattr(signal, how))
        assert proc.wait(60) == 0, mount.process.log_text()
        assert not is_mounted(mount.path)
        assert list(mount.path.iterdir()) == []  # the empty directory it was
    finally:
        mount.stop()


def test_bad_mount_points_are_one_line(live_cluster: LiveCluster, tmp_path: Path) -> None:
    env = {"XDFS_FS": live_cluster.url, "XDFS_USER": ROOT, "XDFS_PASSWORD": ROOT_PW}
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("x")
    (tmp_path / "file").write_text("x")
    for where, why in [(full, "is not empty"), (tmp_path / "file", "is not a directory"),
                       (tmp_path / "none", "is not a directory")]:
        done = xdfs_mount(str(where), "--foreground", env=env)
        assert done.returncode == 1
        assert done.stderr.strip().splitlines() == [
            f"xdfs: InvalidArgument: {where} {why}"]
    done = xdfs_mount(str(tmp_path), "-o", "bogus=1", env=env)
    assert done.returncode == 1
    assert "unknown mount option 'bogus'" in done.stderr


@pytest.mark.parametrize("mode", ["--foreground", "--daemon"])
def test_cluster_down_is_one_line(tmp_path: Path, mode: str) -> None:
    env = {"XDFS_FS": f"xdfs://127.0.0.1:{free_port()}", "XDFS_USER": ROOT,
           "XDFS_PASSWORD": ROOT_PW}
    where = tmp_path / "mnt"
    where.mkdir()
    done = xdfs_mount(str(where), mode, "-o", "call_timeout=10", env=env)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "xdfs: Unavailable: cannot reach the cluster 127.0.0.1:"), done.stderr
    assert not is_mounted(where)


def test_daemon_returns_once_mounted(live_cluster: LiveCluster, tmp_path: Path) -> None:
    env = {"XDFS_FS": live_cluster.url, "XDFS_USER": ROOT, "XDFS_PASSWORD": ROOT_PW}
    where = tmp_path / "mnt"
    where.mkdir()
    done = xdfs_mount(str(where), "--daemon", "--log-file", str(tmp_path / "d.log"), env=env)
    try:
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"xdfs mounted on {where}"
        assert is_mounted(where)
        assert (where / "x").exists() is False
    finally:
        subprocess.run([FUSERMOUNT, "-u", str(where)], timeout=30)
