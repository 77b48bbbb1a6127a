"""The slot map in a real ZooKeeper: registration, the controller's election and epoch, the
initial map, and a deposed controller's write failing whole."""

from __future__ import annotations

import asyncio
import itertools
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from xdfs.common.coordination import new_client
from xdfs.common.zookeeper import ZooKeeperEnsemble, installed
from xdfs.errors import NotController
from xdfs.sharding.slotmap import SlotMap, initial_map
from xdfs.sharding.zkmap import ShardCoordinator, ShardPaths, read_map, read_members
from xdfs.testing.poll import eventually

pytestmark = pytest.mark.skipif(not installed(), reason="ZooKeeper is not installed")

def wait_until(check: object, timeout_s: float, what: str) -> None:
    asyncio.run(eventually(check, timeout_s=timeout_s, what=what))  # type: ignore[call-overload]


SECRET = secrets.token_hex(16)
WAIT_S = 30.0
_roots = itertools.count(1)


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperEnsemble]:
    with ZooKeeperEnsemble(tmp_path_factory.mktemp("zk"), 1, tick_s=0.5) as zk:
        zk.start(60.0)
        yield zk


@pytest.fixture
def sessions(zookeeper: ZooKeeperEnsemble) -> Iterator[list[KazooClient]]:
    opened: list[KazooClient] = []
    yield opened
    for zk in opened:
        zk.stop()
        zk.close()


def session(zookeeper: ZooKeeperEnsemble, opened: list[KazooClient]) -> KazooClient:
    zk = new_client(zookeeper.hosts, SECRET, 10.0)
    zk.start(WAIT_S)
    opened.append(zk)
    return zk


class Seen:
    """What a shard's watches delivered."""

    def __init__(self) -> None:
        self.maps: list[tuple[SlotMap, int]] = []
        self.lock = threading.Lock()

    def on_map(self, slot_map: SlotMap, version: int) -> None:
        with self.lock:
            self.maps.append((slot_map, version))


def shard(zookeeper: ZooKeeperEnsemble, opened: list[KazooClient], root: str, k: int,
          expected: int = 2) -> tuple[ShardCoordinator, Seen]:
    seen = Seen()
    coordinator = ShardCoordinator(session(zookeeper, opened), root, k, f"127.0.0.1:{9000 + k}",
                                   shards_expected=expected, on_map=seen.on_map)
    coordinator.start()
    return coordinator, seen


def test_initial_map_once_every_expected_shard_registered(
        zookeeper: ZooKeeperEnsemble, sessions: list[KazooClient]) -> None:
    root = f"/t{next(_roots)}"
    first, seen_first = shard(zookeeper, sessions, root, 0)
    assert first.is_controller and first.controller_epoch == 1
    assert read_map(first.zk, root) == (None, -1)  # one of two registered: no map yet
    second, seen_second = shard(zookeeper, sessions, root, 1)
    assert not second.is_controller
    wait_until(lambda: seen_first.maps and seen_second.maps, WAIT_S, "the map to be seen")
    written, version = read_map(first.zk, root)
    assert written == initial_map(["0", "1"]) and version == 0
    assert seen_second.maps[-1] == (written, 0)
    assert read_members(first.zk, root) == {"0": "127.0.0.1:9000", "1": "127.0.0.1:9001"}


def test_a_deposed_controller_writes_nothing(
        zookeeper: ZooKeeperEnsemble, sessions: list[KazooClient]) -> None:
    root = f"/t{next(_roots)}"
    old, _ = shard(zookeeper, sessions, root, 0, expected=1)
    new, _ = shard(zookeeper, sessions, root, 1, expected=1)
    written, version = read_map(old.zk, root)
    assert written is not None and old.is_controller and not new.is_controller
    # ZooKeeper ends the old controller's lock behind its back (as a session expiry does
    # to a paused process): the other shard wins and raises the controller epoch
    admin = session(zookeeper, sessions)
    admin.delete(ShardPaths(root).controller)
    wait_until(lambda: new.is_controller, WAIT_S, "the second shard to win")
    assert new.controller_epoch == old.controller_epoch + 1
    assert old.is_controller  # it has not noticed
    moved = initial_map(["1", "0"])
    with pytest.raises(NotController):
        old.write_map(moved, version)
    assert read_map(admin, root) == (written, version)  # nothing written
    assert old.epoch_version is None  # it knows now
    assert new.write_map(moved, version) == version + 1
    assert read_map(admin, root) == (moved, version + 1)


def test_not_a_controller_writes_nothing(
        zookeeper: ZooKeeperEnsemble, sessions: list[KazooClient], tmp_path: Path) -> None:
    root = f"/t{next(_roots)}"
    shard(zookeeper, sessions, root, 0, expected=0)  # no map is ever written by itself
    other, _ = shard(zookeeper, sessions, root, 1, expected=0)
    with pytest.raises(NotController):
        other.write_map(initial_map(["0", "1"]), -1)
    assert read_map(other.zk, root) == (None, -1)
