"""``xdfs dev --shards 2`` as real processes: files under many partition roots, written and
read back through the CLI and fsspec, land on the shard owning their slot and nowhere else;
a request sent to the wrong shard is answered WrongShard; a client with a stale map
recovers; a controller paused past its ZooKeeper session and resumed writes nothing."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from xdfs.client.client import Client
from xdfs.client.fsspec_impl import XdfsFileSystem
from xdfs.client.shards import KnownMap
from xdfs.common.coordination import new_client
from xdfs.common.process import ProcessGroup
from xdfs.common.zookeeper import installed
from xdfs.config import XdfsConfig
from xdfs.errors import CrossShardRename, TopLayerChange, WrongShard
from xdfs.protocol import namenode as p
from xdfs.protocol.sharding import GET_SLOT_MAP, SlotMapRequest
from xdfs.rpc.client import RpcClient
from xdfs.rpc.messages import PROTOCOL_VERSION, Hello
from xdfs.sharding.ids import shard_of_id
from xdfs.sharding.routing import Routing
from xdfs.sharding.slotmap import SlotMap, initial_map
from xdfs.sharding.slots import DEFAULT
from xdfs.sharding.zkmap import ShardPaths, read_map
from xdfs.testing.poll import eventually

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not installed(), reason="ZooKeeper is not installed")]

USER, PASSWORD = "root", "rootpw"
ENV = {"XDFS_USER": USER, "XDFS_PASSWORD": PASSWORD}
READY = r"xdfs dev cluster ready: (\S+)"
ROOT = "/xdfs-shards"


@dataclass
class Dev:
    base: Path
    uri: str
    shards: list[str]  # shard k's address

    @property
    def conf(self) -> Path:
        return self.base / "client.toml"

    def pid_of(self, shard: int) -> int:
        listing = json.loads((self.base / "cluster.json").read_text())
        return next(int(proc["pid"]) for proc in listing["processes"]
                    if proc["role"] == "namenode" and proc["address"] == self.shards[shard])


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dev]:
    tmp = tmp_path_factory.mktemp("shards")
    base = tmp / "dev"
    with ProcessGroup(tmp) as group:
        try:
            proc = group.start_xdfs(
                "dev", "dev", "--base-dir", str(base), "--port", "0", "--datanodes", "1",
                "--shards", "2", ready_pattern=READY, deadline_s=240, env=ENV)
            assert proc.match is not None
            layout = json.loads((base / "shards.json").read_text())
            yield Dev(base, proc.match.group(1),
                      [f"127.0.0.1:{port}" for port in layout["namenodes"]])
        finally:  # the children run in sessions of their own
            listing = base / "cluster.json"
            if listing.exists():
                for entry in json.loads(listing.read_text())["processes"]:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(entry["pid"]), signal.SIGCONT)
                        os.kill(int(entry["pid"]), signal.SIGKILL)


def run_xdfs(dev: Dev, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDFS_")}
    return subprocess.run([sys.executable, "-m", "xdfs", *args],
                          env={**env, "XDFS_CONF": str(dev.conf)},
                          capture_output=True, text=True, timeout=180)


def xdfs(dev: Dev, *args: str) -> str:
    done = run_xdfs(dev, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def direct(address: str) -> RpcClient:
    """A connection to one shard only, with no routing."""
    return RpcClient(address, XdfsConfig().rpc,
                     hello=Hello(PROTOCOL_VERSION, client_name="t", user=USER, password=PASSWORD))


async def names_on(address: str, directory: str) -> set[str]:
    rpc = direct(address)
    try:
        listing = await rpc.call(p.LIST, p.ListRequest(directory, "", 10_000))
        return {entry.path for entry in listing.entries}
    finally:
        await rpc.close()


def owner(dev: Dev, path: str) -> int:
    return int(Routing(DEFAULT, initial_map(["0", "1"])).owner_of(path) or "-1")


def test_files_land_on_the_shard_of_their_slot(dev: Dev, tmp_path: Path) -> None:
    local = []
    for i in range(12):
        src = tmp_path / f"f{i}"
        src.write_bytes(f"cli {i}\n".encode())
        local.append(str(src))
    xdfs(dev, "dfs", "-put", *local, "/tmp")
    users = [f"/user/u{i}" for i in range(8)]
    xdfs(dev, "dfs", "-mkdir", "-p", *users)
    fs = XdfsFileSystem(dev.uri, user=USER, password=PASSWORD, token="")
    for i, home in enumerate(users):
        with fs.open(f"{home}/data.txt", "wb") as out:
            out.write(f"fsspec {i}\n".encode())
    # read back through both, over both shards
    for i in range(12):
        assert xdfs(dev, "dfs", "-cat", f"/tmp/f{i}") == f"cli {i}\n"
    for i, home in enumerate(users):
        assert fs.cat(f"{home}/data.txt") == f"fsspec {i}\n".encode()
    # one namespace: top-layer listings merge both shards
    assert {f"/tmp/f{i}" for i in range(12)} <= {e["name"] for e in fs.ls("/tmp")}
    assert set(users) <= {e["name"] for e in fs.ls("/user")}
    # each shard holds exactly the partition roots its slots own
    tmp_files = {f"/tmp/f{i}" for i in range(12)}
    for shard, address in enumerate(dev.shards):
        held_tmp = asyncio.run(names_on(address, "/tmp")) & tmp_files
        held_users = asyncio.run(names_on(address, "/user")) & set(users)
        assert held_tmp == {f for f in tmp_files if owner(dev, f) == shard}
        assert held_users == {u for u in users if owner(dev, u) == shard}
    assert {owner(dev, f) for f in tmp_files} == {0, 1}  # (both shards are used)
    # each file's blocks carry its shard's id bits, on the DataNode shared by both shards
    with Client(dev.uri, user=USER, password=PASSWORD, token="", config=XdfsConfig()) as c:
        for f in sorted(tmp_files):
            blocks = c.block_locations(f).blocks
            assert blocks and all(shard_of_id(b.block.block_id) == owner(dev, f)
                                  for b in blocks)
    count = xdfs(dev, "dfs", "-count", "/tmp").split()
    assert count[1] == "12"  # files of both shards
    # a delete to the trash stays on one shard: refused (nothing changed) where the
    # user's trash is on the other shard; -skipTrash deletes
    away = next(f for f in sorted(tmp_files) if owner(dev, f) != owner(dev, f"/user/{USER}"))
    refused = run_xdfs(dev, "dfs", "-rm", away)
    assert refused.returncode != 0 and "skipTrash" in refused.stderr
    assert xdfs(dev, "dfs", "-cat", away) != ""
    xdfs(dev, "dfs", "-rm", "-skipTrash", away)
    assert run_xdfs(dev, "dfs", "-test", "-e", away).returncode != 0
    report = xdfs(dev, "admin", "-shards")
    assert "8192" in report and dev.shards[0] in report and dev.shards[1] in report


def test_a_request_to_the_wrong_shard_is_refused(dev: Dev) -> None:
    path = next(f"/tmp/w{i}" for i in range(100) if owner(dev, f"/tmp/w{i}") == 1)
    local = next(f"/tmp/w{i}" for i in range(100) if owner(dev, f"/tmp/w{i}") == 0)

    async def run() -> None:
        rpc = direct(dev.shards[0])
        try:
            with pytest.raises(WrongShard) as refused:
                await rpc.call(p.MKDIRS, p.MkdirsRequest(path, 0o755, True))
            assert (refused.value.owner, refused.value.epoch) == ("1", 1)
            with pytest.raises(TopLayerChange):
                await rpc.call(p.MKDIRS, p.MkdirsRequest("/data", 0o755, True))
            await rpc.call(p.MKDIRS, p.MkdirsRequest(local, 0o755, True))
            with pytest.raises(CrossShardRename):
                await rpc.call(p.RENAME, p.RenameRequest(local, path))
            # a client claiming a newer epoch makes the shard re-read ZooKeeper: the map
            # there is the one it has
            answer = await rpc.call(GET_SLOT_MAP, SlotMapRequest(99))
            assert (answer.shard, answer.epoch) == ("0", 1)
        finally:
            await rpc.close()

    asyncio.run(run())
    assert local in asyncio.run(names_on(dev.shards[0], "/tmp"))
    assert path not in asyncio.run(names_on(dev.shards[1], "/tmp"))  # nothing ran


def test_a_shards_webhdfs_gateway_serves_its_own_slots_only(dev: Dev) -> None:
    listing = json.loads((dev.base / "cluster.json").read_text())
    gateway = next(proc["http"] for proc in listing["processes"]
                   if proc["role"] == "namenode" and proc["address"] == dev.shards[0])
    auth = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()

    def get(path: str, method: str = "GET", op: str = "GETFILESTATUS") -> tuple[int, str]:
        request = urllib.request.Request(
            f"http://{gateway}/webhdfs/v1{path}?op={op}", method=method,
            headers={"Authorization": auth})
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as refused:
            return refused.code, refused.read().decode()

    ours = next(f"/user/u{i}" for i in range(8) if owner(dev, f"/user/u{i}") == 0)
    theirs = next(f"/user/u{i}" for i in range(8) if owner(dev, f"/user/u{i}") == 1)
    assert get(ours)[0] == 200
    status, body = get(theirs)
    assert status == 403 and "owned by 1 at epoch 1" in body
    status, body = get(theirs + "/new", "PUT", "MKDIRS")
    assert status == 403 and "owned by 1 at epoch 1" in body
    assert get("/user")[0] == 200  # the top layer: any shard


def test_a_client_with_a_stale_map_recovers(dev: Dev) -> None:
    path = next(f"/tmp/s{i}" for i in range(100) if owner(dev, f"/tmp/s{i}") == 1)
    with Client(dev.uri, user=USER, password=PASSWORD, token="", config=XdfsConfig()) as c:
        c.mkdirs(path)
        # a map of an older epoch, giving every slot to shard 0
        stale = SlotMap(0, initial_map(["0"]).ranges)
        c.async_client.rpc.known = KnownMap(Routing(DEFAULT, stale),
                                            {"0": dev.shards[0], "1": dev.shards[1]})
        assert c.stat(path).is_dir  # WrongShard from shard 0, then the owner
        known = c.async_client.rpc.known
        assert isinstance(known, KnownMap) and known.epoch == 1


def test_shards_serve_their_slots_while_zookeeper_is_down(dev: Dev) -> None:
    listing = json.loads((dev.base / "cluster.json").read_text())
    pid = next(int(proc["pid"]) for proc in listing["processes"] if proc["role"] == "zookeeper")
    os.kill(pid, signal.SIGSTOP)
    try:
        for i in range(2):  # files of both shards, read by a new client (map from a shard)
            assert xdfs(dev, "dfs", "-cat", f"/user/u{i}/data.txt") == f"fsspec {i}\n"
        assert "/tmp/f1" in xdfs(dev, "dfs", "-ls", "/tmp")
    finally:
        os.kill(pid, signal.SIGCONT)


def test_a_paused_controller_writes_nothing_when_resumed(dev: Dev) -> None:
    secret = (dev.base / "zookeeper.secret").read_text().strip()
    listing = json.loads((dev.base / "cluster.json").read_text())
    quorum = next(proc["address"] for proc in listing["processes"]
                  if proc["role"] == "zookeeper")
    zk = new_client(quorum, secret, 10.0)
    zk.start(30)
    paths = ShardPaths(ROOT)
    try:
        # (a ZooKeeper paused by another test may have expired sessions: settled first)
        asyncio.run(eventually(
            lambda: _holder(zk, paths) is not None
            and all(zk.exists(f"{paths.shards}/{k}") for k in (0, 1)),
            timeout_s=60, what="both shards registered and a controller"))
        before_map, before_version = read_map(zk, ROOT)
        controller = int(zk.get(paths.controller)[0])
        epoch = int(zk.get(paths.controller_epoch)[0])
        pid = dev.pid_of(controller)
        os.kill(pid, signal.SIGSTOP)
        try:
            # past its session: the other shard becomes the controller, a new epoch
            # (it takes the lock, then raises the epoch)
            asyncio.run(eventually(
                lambda: _holder(zk, paths) == 1 - controller
                and int(zk.get(paths.controller_epoch)[0]) > epoch,
                timeout_s=60, what="the other shard to take over"))
        finally:
            os.kill(pid, signal.SIGCONT)
        # resumed: it notices, registers again, and serves its slots with the map it has
        asyncio.run(eventually(lambda: zk.exists(f"{paths.shards}/{controller}"),
                               timeout_s=60, what="the resumed shard to register again"))
        i = next(i for i in range(8) if owner(dev, f"/user/u{i}") == controller)
        assert xdfs(dev, "dfs", "-cat", f"/user/u{i}/data.txt") == f"fsspec {i}\n"
        assert read_map(zk, ROOT) == (before_map, before_version)  # it wrote nothing
        assert _holder(zk, paths) == 1 - controller
    finally:
        zk.stop()
        zk.close()


def _holder(zk: object, paths: ShardPaths) -> int | None:
    try:
        return int(zk.get(paths.controller)[0])  # type: ignore[attr-defined]
    except Exception:
        return None
