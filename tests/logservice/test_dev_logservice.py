"""``xdfs dev --logservice`` (next to the file system) and ``--logservice-only`` (alone):
ZooKeeper, three storage nodes and a log service, listed in cluster.json, with client.toml
naming the log service so that ``xdfs log`` and ``LogClient()`` need no arguments; its
children die with it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.zkfc.acl import assert_outsiders_locked_out
from xdfs.common.process import ProcessGroup
from xdfs.common.secrets import read_secret_file
from xdfs.config import load_config
from xdfs.log.client import LogClient

pytestmark = pytest.mark.slow


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state == "Z"


@pytest.mark.parametrize(("flags", "ready", "fs_roles"), [
    (["--datanodes", "1", "--logservice"], r"xdfs dev cluster ready: (\S+)", True),
    (["--logservice-only"], r"xdfs dev log service ready: (\S+)", False),
], ids=["with-fs", "alone"])
def test_dev_logservice(tmp_path: Path, flags: list[str], ready: str, fs_roles: bool) -> None:
    base = tmp_path / "dev"
    env = {"XDFS_USER": "root", "XDFS_PASSWORD": "rootpw"}
    with ProcessGroup(tmp_path) as group:
        dev = group.start_xdfs("dev", "dev", "--base-dir", str(base), "--port", "0", *flags,
                               env=env, ready_pattern=ready, deadline_s=240)
        listing = json.loads((base / "cluster.json").read_text())
        pids = [p["pid"] for p in listing["processes"]]
        try:
            roles = [p["role"] for p in listing["processes"]]
            assert roles.count("logservice") == 1 and roles.count("zookeeper") == 1
            assert roles.count("journalnode") == 3
            assert ("namenode" in roles) == fs_roles and ("datanode" in roles) == fs_roles
            service = next(p for p in listing["processes"] if p["role"] == "logservice")
            if not fs_roles:  # the ready line names the log service
                assert dev.match is not None and dev.match.group(1) == service["address"]
            conf = base / "client.toml"
            config = load_config(conf)
            assert config.client.logservice == service["address"]
            run_env = {**os.environ, "XDFS_CONF": str(conf)}
            made = subprocess.run([sys.executable, "-m", "xdfs", "log", "create", "d"],
                                  env=run_env, capture_output=True, text=True, timeout=120)
            assert made.returncode == 0, made.stderr
            with LogClient(config=config) as client:
                lsn = client.append("d", b"hello")
                records, _ = client.read("d", lsn)
                assert [r.record.payload for r in records] == [b"hello"]
            listed = subprocess.run([sys.executable, "-m", "xdfs", "log", "list"],
                                    env=run_env, capture_output=True, text=True, timeout=120)
            assert listed.returncode == 0 and "d" in listed.stdout.split(), listed
            # the instance's znodes (its logs, the keeper's, the writers') are closed to
            # anybody without DIR/zookeeper.secret
            zookeeper = next(p for p in listing["processes"] if p["role"] == "zookeeper")
            secret = read_secret_file(base / "zookeeper.secret", "zookeeper secret")
            checked = assert_outsiders_locked_out(zookeeper["address"], secret, "/xdfs-log")
            assert "/xdfs-log/logs/d" in checked
            os.kill(dev.pid, signal.SIGKILL)  # its children go with it
            end = time.monotonic() + 60
            while not all(map(_gone, pids)) and time.monotonic() < end:
                time.sleep(0.2)
            assert all(map(_gone, pids)), [p for p in pids if not _gone(p)]
        finally:
            for pid in pids:
                if not _gone(pid):
                    os.kill(pid, signal.SIGKILL)
