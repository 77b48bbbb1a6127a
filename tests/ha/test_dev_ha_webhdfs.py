"""``xdfs dev --ha``: each NameNode serves WebHDFS on a port of its own kept in
``DIR/ha.json``, listed in ``cluster.json`` (``http``) and in ``client.toml``
(``[ha] webhdfs``); the active one's gateway works, the standby's answers
StandbyException, and ``xdfs.client.webhdfs_ha`` finds the active one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.datapath.test_dev_cluster import ENV, PASSWORD, READY, USER, _gone
from tests.zkfc.acl import assert_outsiders_locked_out
from xdfs.client.webhdfs_ha import active_webhdfs, is_standby, webhdfs_filesystem
from xdfs.common.process import ProcessGroup
from xdfs.common.secrets import read_secret_file

pytestmark = pytest.mark.slow


def test_dev_ha_lists_both_gateways_and_the_active_one_serves(
    processes: ProcessGroup, tmp_path: Path
) -> None:
    base = tmp_path / "dev"
    dev = processes.start_xdfs(
        "dev", "dev", "--base-dir", str(base), "--ha", "--datanodes", "1",
        ready_pattern=READY, deadline_s=240, env=ENV,
    )
    listing = json.loads((base / "cluster.json").read_text())["processes"]
    try:
        layout = json.loads((base / "ha.json").read_text())
        expected = {nn_id: f"127.0.0.1:{port}" for nn_id, port in layout["http"].items()}
        settings = tomllib.loads((base / "client.toml").read_text())
        assert settings["ha"]["webhdfs"] == expected
        gateways = sorted(p["http"] for p in listing if p["role"] == "namenode")
        assert gateways == sorted(expected.values())
        assert settings["client"]["webhdfs"] in gateways

        active = active_webhdfs(gateways)
        (standby,) = [g for g in gateways if g != active]
        assert is_standby(standby, 30) and not is_standby(active, 30)
        fs = webhdfs_filesystem(gateways, user=USER, password=PASSWORD)
        fs.mkdir("/rest")
        assert fs.isdir("/rest")

        # the controllers' znodes are closed to anybody without DIR/zookeeper.secret, and
        # a graceful failover through client.toml reaches the configured controllers
        assert settings["ha"]["controllers"] == {
            nn_id: f"127.0.0.1:{port}" for nn_id, port in layout["controllers"].items()}
        secret = read_secret_file(base / "zookeeper.secret", "zookeeper secret")
        checked = assert_outsiders_locked_out(settings["ha"]["zookeeper_quorum"], secret,
                                              "/xdfs-ha")
        assert "/xdfs-ha/xdfs/ActiveBreadCrumb" in checked
        env = {**os.environ, "XDFS_CONF": str(base / "client.toml")}
        old = next(nn_id for nn_id, gateway in expected.items() if gateway == active)
        new = "nn2" if old == "nn1" else "nn1"
        moved = subprocess.run([sys.executable, "-m", "xdfs", "admin", "-failover", old, new],
                               env=env, capture_output=True, text=True, timeout=180)
        assert moved.returncode == 0 and f"Failover to NameNode {new} successful" in (
            moved.stdout), moved
    finally:
        if dev.alive():
            assert dev.proc is not None
            dev.proc.send_signal(signal.SIGTERM)
            assert dev.proc.wait(60) == 0
        for process in listing:
            if not _gone(process["pid"]):
                os.kill(process["pid"], signal.SIGKILL)
