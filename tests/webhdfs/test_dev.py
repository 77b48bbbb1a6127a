"""``xdfs dev`` serves WebHDFS: an ``http`` field (host:port) on each process that serves
HTTP in DIR/cluster.json, the gateway in client.toml, and a file put through the REST
API by curl (real processes) is the file the xdfs client reads."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.datapath.test_dev_cluster import ENV, PASSWORD, READY, USER, _client, _gone
from xdfs.common.process import ProcessGroup

pytestmark = pytest.mark.slow


def test_dev_names_its_http_servers_and_serves_webhdfs(
    processes: ProcessGroup, tmp_path: Path
) -> None:
    base = tmp_path / "dev"
    dev = processes.start_xdfs(
        "dev", "dev", "--base-dir", str(base), "--port", "0", "--datanodes", "2",
        ready_pattern=READY, deadline_s=180, env=ENV,
    )
    listing = json.loads((base / "cluster.json").read_text())["processes"]
    try:
        assert dev.match is not None
        by_role = {p["role"]: p for p in listing}
        assert {p["role"] for p in listing if "http" in p} == {"namenode", "datanode"}
        assert all(p["http"] != p["address"] for p in listing if "http" in p)
        gateway = by_role["namenode"]["http"]
        client_toml = tomllib.loads((base / "client.toml").read_text())["client"]
        assert client_toml["webhdfs"] == gateway

        data = os.urandom(100_000)
        (tmp_path / "local").write_bytes(data)
        url = f"http://{gateway}/webhdfs/v1/rest/file?op=CREATE"
        put = subprocess.run(
            ["curl", "-sS", "--max-time", "60", "-L", "-u", f"{USER}:{PASSWORD}", "-X", "PUT",
             "-T", str(tmp_path / "local"), "-w", "%{http_code}", url],
            capture_output=True, timeout=90)
        assert put.stdout.endswith(b"201"), put
        with _client(dev.match.group(1)) as client:
            assert client.read_file("/rest/file") == data
    finally:
        if dev.alive():
            assert dev.proc is not None
            dev.proc.send_signal(signal.SIGTERM)
            assert dev.proc.wait(60) == 0
        for process in listing:
            if not _gone(process["pid"]):
                os.kill(process["pid"], signal.SIGKILL)


def test_a_busy_http_port_stops_the_namenode_with_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDFS_")}
    env.update(ENV)
    name_dir = tmp_path / "nn"
    xdfs = [sys.executable, "-m", "xdfs"]
    formatted = subprocess.run([*xdfs, "namenode", "--name-dir", str(name_dir), "-format"],
                               env=env, capture_output=True, text=True, timeout=120)
    assert formatted.returncode == 0, formatted.stderr
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        address = f"127.0.0.1:{busy.getsockname()[1]}"
        started = subprocess.run(
            [*xdfs, "-D", f"namenode.http_address={address}", "namenode", "--name-dir",
             str(name_dir), "--rpc-address", "127.0.0.1:0"],
            env=env, capture_output=True, text=True, timeout=120)
    assert started.returncode == 1
    assert "Traceback" not in started.stderr
    assert started.stderr.strip().splitlines()[-1] == (
        f"namenode cannot start: OSError: [Errno 98] namenode cannot serve HTTP on "
        f"{address}: Address already in use")
