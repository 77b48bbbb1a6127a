"""The ZooKeeper process helper and the controllers' znode operations, on a real
standalone server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tests.zkfc.conftest import TICK_S
from xdfs.common.coordination import new_client
from xdfs.common.zookeeper import ZooKeeperEnsemble, four_letter_word, server_mode
from xdfs.errors import Unavailable
from xdfs.protocol.zkfc import ControllerIdentity
from xdfs.zkfc import znodes

ME = ControllerIdentity("ns", "nn1", "h1:8020", "h1:8019")
OTHER = ControllerIdentity("ns", "nn2", "h2:8020", "h2:8019")
PATHS = znodes.Paths.of("/xdfs-ha", "ns")
SECRET = "ab" * 32


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[ZooKeeperEnsemble]:
    with ZooKeeperEnsemble(tmp_path / "zk", 1, tick_s=TICK_S) as zk:
        zk.start()
        yield zk


@pytest.fixture
def clients(standalone: ZooKeeperEnsemble) -> Iterator[list[KazooClient]]:
    made = []
    for _ in range(2):
        client = new_client(standalone.hosts, SECRET, 3.0)
        client.start(30)
        made.append(client)
    yield made
    for client in made:
        client.stop()
        client.close()


def test_standalone_server_answers_pauses_and_dies_by_pid(
    standalone: ZooKeeperEnsemble,
) -> None:
    (server,) = standalone.servers
    assert server_mode(server.address) == "standalone"
    assert four_letter_word(server.address, "ruok") == "imok"
    text = (server.directory / "zoo.cfg").read_text()
    assert "admin.enableServer=false" in text and "clientPortAddress=127.0.0.1" in text
    server.pause()
    assert server_mode(server.address, timeout_s=0.5) == ""  # stopped: no answer
    server.resume()
    assert server_mode(server.address) == "standalone"
    server.kill()
    assert not server.alive() and server_mode(server.address, timeout_s=0.5) == ""


def test_lock_goes_to_one_session_and_the_breadcrumb_follows_the_holder(
    clients: list[KazooClient],
) -> None:
    mine, theirs = clients
    fired: list[object] = []
    won = znodes.try_acquire(mine, PATHS, ME, fired.append)
    assert won == znodes.JoinResult(True, None)
    assert znodes.try_acquire(mine, PATHS, ME, fired.append).won  # ours already: won
    lost = znodes.try_acquire(theirs, PATHS, OTHER, fired.append)
    assert lost == znodes.JoinResult(False, ME)
    with pytest.raises(znodes.LostLock):
        znodes.write_breadcrumb(theirs, PATHS, OTHER)  # not the holder: refused
    znodes.write_breadcrumb(mine, PATHS, ME)
    assert znodes.read_breadcrumb(theirs, PATHS) == ME
    assert not znodes.release(theirs, PATHS, OTHER, delete_breadcrumb=True)  # not theirs
    assert znodes.read_holder(theirs, PATHS) == ME
    # a holder that steps down cleanly takes the breadcrumb with it
    assert znodes.release(mine, PATHS, ME, delete_breadcrumb=True)
    assert znodes.read_holder(theirs, PATHS) is None
    assert znodes.read_breadcrumb(theirs, PATHS) is None
    assert fired, "the watch on the lock fired when it was released"
    assert znodes.try_acquire(theirs, PATHS, OTHER, fired.append) == znodes.JoinResult(
        True, None)


def test_a_dead_holders_breadcrumb_names_it_to_the_next_winner(
    standalone: ZooKeeperEnsemble, clients: list[KazooClient]
) -> None:
    _, theirs = clients
    doomed = new_client(standalone.hosts, SECRET, 3.0)
    doomed.start(30)
    assert znodes.try_acquire(doomed, PATHS, ME, lambda event: None).won
    znodes.write_breadcrumb(doomed, PATHS, ME)
    doomed.stop()  # the session ends: its ephemeral lock goes, the breadcrumb stays
    doomed.close()
    assert znodes.try_acquire(theirs, PATHS, OTHER, lambda event: None) == znodes.JoinResult(
        True, ME)


def test_registration_replaces_a_predecessors_and_is_found_by_admin(
    standalone: ZooKeeperEnsemble, clients: list[KazooClient]
) -> None:
    old, new = clients
    znodes.register(old, PATHS, ME)
    moved = ControllerIdentity("ns", "nn1", "h1:8020", "h1:9999")
    znodes.register(new, PATHS, moved)  # a restarted controller, before the old session ends
    assert znodes.find_controller(standalone.hosts, SECRET, PATHS, "nn1", 10.0) == moved
    with pytest.raises(Unavailable, match="no controller of NameNode nn2 is registered"):
        znodes.find_controller(standalone.hosts, SECRET, PATHS, "nn2", 10.0)
    assert znodes.decode(b"not json") is None


def test_a_server_started_to_die_with_its_parent_does(tmp_path: Path) -> None:
    """xdfs dev's ZooKeeper: the JVM gets SIGTERM when the process that started it dies."""
    code = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from xdfs.common.zookeeper import ZooKeeperEnsemble\n"
        "zk = ZooKeeperEnsemble(Path(sys.argv[1]), 1, tick_s=0.5, die_with_parent=True)\n"
        "zk.start()\n"
        "print(zk.servers[0].pid, zk.hosts, flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "zk")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        pid_text, hosts = parent.stdout.readline().split()
        pid = int(pid_text)
        assert server_mode(hosts) == "standalone"
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 60
    while _running(pid):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)  # clean up before failing
            raise AssertionError(f"ZooKeeper {pid} outlived its parent")
        time.sleep(0.1)


def _running(pid: int) -> bool:
    """Alive and not a zombie (the JVM's parent is gone: init reaps it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"
