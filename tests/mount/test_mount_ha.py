"""``xdfs mount`` of an HA pair (``xdfs dev --ha``, its ``client.toml``): a graceful
failover in the middle of a write through the mount, and between two copies, is invisible
to the programs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.datapath.conftest import payload
from tests.datapath.test_dev_cluster import ENV, READY, stop_dev
from xdfs.common.process import ProcessGroup, ServerProcess
from xdfs.mount.run import READY_LINE

pytestmark = pytest.mark.slow

SLOW_WRITER = """
import sys
data = open(sys.argv[1], "rb").read()
with open(sys.argv[2], "wb") as out:
    for start in range(0, len(data), 1 << 18):
        out.write(data[start:start + (1 << 18)])
        out.flush()
        if start == 0:
            print("started", flush=True)
            sys.stdin.readline()  # the failover happens here, the file half written
"""


def test_failover_under_a_mount(processes: ProcessGroup, tmp_path: Path) -> None:
    base = tmp_path / "dev"
    dev = processes.start_xdfs("dev", "dev", "--base-dir", str(base), "--ha", "--datanodes",
                               "1", ready_pattern=READY, deadline_s=240, env=ENV)
    listing = json.loads((base / "cluster.json").read_text())["processes"]
    env = {**ENV, "XDFS_CONF": str(base / "client.toml")}
    where = tmp_path / "mnt"
    where.mkdir()
    mount = ServerProcess.xdfs("mount", str(where), "--foreground", log_path=tmp_path / "m.log",
                               ready_pattern=READY_LINE, env=env)
    try:
        mount.start(120)
        local = tmp_path / "local.bin"
        local.write_bytes(payload(3 << 20, seed=5))
        subprocess.run(["cp", str(local), str(where / "before")], check=True, timeout=120)
        writer = subprocess.Popen([sys.executable, "-c", SLOW_WRITER, str(local),
                                   str(where / "during")], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        assert writer.stdout is not None and writer.stdout.readline() == "started\n"
        moved = subprocess.run([sys.executable, "-m", "xdfs", "admin", "-failover", "nn1",
                                "nn2"], env={**os.environ, **env}, capture_output=True,
                               text=True, timeout=180)
        if moved.returncode != 0:  # nn2 was the active one
            moved = subprocess.run([sys.executable, "-m", "xdfs", "admin", "-failover", "nn2",
                                    "nn1"], env={**os.environ, **env}, capture_output=True,
                                   text=True, timeout=180)
        assert moved.returncode == 0 and "successful" in moved.stdout, moved
        assert writer.stdin is not None
        writer.stdin.write("go\n")
        writer.stdin.close()
        assert writer.wait(180) == 0
        subprocess.run(["cp", str(local), str(where / "after")], check=True, timeout=120)
        for name in ("before", "during", "after"):
            assert (where / name).read_bytes() == local.read_bytes()
    finally:
        if mount.alive():
            mount.terminate(60)
        stop_dev(dev, listing)
