"""``xdfs dev`` as a new user meets it (issue 17, items 14 and 17): its ready line means a
write succeeds right away (also on a restart, when the NameNode starts in safe mode), a
second ``xdfs dev`` on the same directory or on a busy port fails in one line, and its
children die with it even when it is SIGKILLed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from xdfs.client.client import Client
from xdfs.common.process import ProcessGroup, ServerProcess
from xdfs.config import XdfsConfig

pytestmark = pytest.mark.slow

USER, PASSWORD = "root", "rootpw"
ENV = {"XDFS_USER": USER, "XDFS_PASSWORD": PASSWORD}
READY = r"xdfs dev cluster ready: (\S+)"


def _start_dev(processes: ProcessGroup, base: Path, name: str) -> tuple[ServerProcess, str]:
    dev = processes.start_xdfs(
        name, "dev", "--base-dir", str(base), "--port", "0", "--datanodes", "3",
        ready_pattern=READY, deadline_s=180, env=ENV,
    )
    assert dev.match is not None
    return dev, dev.match.group(1)


def _client(uri: str) -> Client:
    return Client(uri, user=USER, password=PASSWORD, token="", config=XdfsConfig())


def _gone(pid: int) -> bool:
    """Exited (a zombie no one has reaped yet counts as exited)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state == "Z"


def stop_dev(dev: ServerProcess, listing: list[dict[str, Any]]) -> None:
    """SIGTERM ``xdfs dev`` (it stops its servers), then SIGKILL any server of ``listing``
    (its cluster.json's processes) still running: they run in their own sessions, and a
    regression must not leak them."""
    if dev.alive():
        assert dev.proc is not None
        dev.proc.send_signal(signal.SIGTERM)
        dev.proc.wait(60)
    for process in listing:
        if not _gone(process["pid"]):
            os.kill(process["pid"], signal.SIGKILL)


def _wait_gone(pids: list[int], deadline_s: float = 60.0) -> None:
    end = time.monotonic() + deadline_s
    while not all(map(_gone, pids)):
        if time.monotonic() > end:
            alive = [pid for pid in pids if not _gone(pid)]
            raise AssertionError(f"processes {alive} still alive after {deadline_s} s")
        time.sleep(0.1)


def _xdfs(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDFS_")}
    return subprocess.run([sys.executable, "-m", "xdfs", *args], env={**env, **ENV},
                          capture_output=True, text=True, timeout=180)


def test_dev_ready_means_writable_and_its_children_die_with_it(
    processes: ProcessGroup, tmp_path: Path
) -> None:
    base = tmp_path / "dev"
    try:
        _check_dev_cluster(processes, base, tmp_path)
    finally:  # a regression must not leak the children (they run in their own sessions)
        for pid in _listed_pids(base):
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)


def _listed_pids(base: Path) -> list[int]:
    listing = base / "cluster.json"
    if not listing.exists():
        return []
    return [p["pid"] for p in json.loads(listing.read_text())["processes"]]


def _check_dev_cluster(processes: ProcessGroup, base: Path, tmp_path: Path) -> None:
    dev, uri = _start_dev(processes, base, "dev1")
    data = os.urandom(200_000)
    with _client(uri) as client:  # right after the ready line
        client.write_file("/first", data)
    pids = _listed_pids(base)

    # a second dev on the same directory, and one on the NameNode's (busy) port
    port = uri.rsplit(":", 1)[1]
    for args, why in (
        (["--base-dir", str(base)], "locked"),
        (["--base-dir", str(tmp_path / "other"), "--port", port], "address already in use"),
    ):
        done = _xdfs("dev", *args, "--datanodes", "1")
        assert done.returncode == 1, done
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
        assert why in done.stderr, done.stderr

    # SIGKILL gives xdfs dev no chance to stop its children: the kernel does
    os.kill(dev.pid, signal.SIGKILL)
    _wait_gone(pids)

    # a restart finds data: its NameNode starts in safe mode; ready still means writable
    dev, uri = _start_dev(processes, base, "dev2")
    with _client(uri) as client:
        client.write_file("/second", data)
        assert client.read_file("/first") == data
    assert dev.proc is not None
    dev.proc.send_signal(signal.SIGTERM)
    assert dev.proc.wait(60) == 0


def test_dev_journal_runs_the_namenode_on_three_journalnodes(
    processes: ProcessGroup, tmp_path: Path
) -> None:
    """``xdfs dev --journal 3``: three JournalNodes in cluster.json; a JournalNode killed
    is invisible to clients; the cluster restarts on the same journal with its data."""
    base = tmp_path / "dev"
    try:
        dev = processes.start_xdfs(
            "dev", "dev", "--base-dir", str(base), "--port", "0", "--datanodes", "2",
            "--journal", "3", ready_pattern=READY, deadline_s=180, env=ENV,
        )
        assert dev.match is not None
        listing = json.loads((base / "cluster.json").read_text())["processes"]
        journalnodes = [p for p in listing if p["role"] == "journalnode"]
        assert len(journalnodes) == 3 and all(p["address"] for p in journalnodes)
        with _client(dev.match.group(1)) as client:
            client.mkdirs("/before")
            os.kill(journalnodes[0]["pid"], signal.SIGKILL)
            for n in range(20):
                client.mkdirs(f"/with-two/{n}")
        assert dev.terminate() == 0
        again = processes.start_xdfs(
            "dev-again", "dev", "--base-dir", str(base), "--port", "0", "--datanodes", "2",
            "--journal", "3", ready_pattern=READY, deadline_s=180, env=ENV,
        )
        assert again.match is not None
        with _client(again.match.group(1)) as client:
            assert client.stat("/before").is_dir
            assert len(client.list_dir("/with-two")) == 20
        assert again.terminate() == 0
    finally:
        for pid in _listed_pids(base):
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize(("args", "message"), [
    (("--journal", "2"), "odd number"),
    (("--journal", "3", "--backup"), "do not go together"),
])
def test_dev_journal_refuses_what_cannot_work(tmp_path: Path, args: tuple[str, ...],
                                              message: str) -> None:
    result = _xdfs("dev", "--base-dir", str(tmp_path / "dev"), "--port", "0", *args)
    assert result.returncode == 2 and message in result.stderr
    assert "Traceback" not in result.stderr  # a usage error
