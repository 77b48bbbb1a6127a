"""Two metadata shards as real processes: two NameNodes formatted as shard 0 and shard 1
(``-format --shard N``, one cluster id, shard 0's DataNode secret) and three DataNodes
serving both (``datanode.shards``), logged in to both with that one secret. Files written
through each NameNode land in that shard's block pool; a DataNode killed with SIGKILL and
restarted reports each pool to its shard again; a delete on shard 1 removes only shard 1's
replicas; after a DataNode's death each shard re-replicates its own blocks; shard 1's
NameNode restarted keeps allocating shard 1's ids."""

from __future__ import annotations

import asyncio
import functools
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.datapath.conftest import BLOCK_BYTES, payload
from xdfs.client.client import AsyncClient
from xdfs.common.process import ProcessGroup, ServerProcess
from xdfs.config import XdfsConfig
from xdfs.datanode import layout
from xdfs.errors import SafeModeError, XdfsError
from xdfs.namenode.security.passwords import DATANODE_SECRET_FILE
from xdfs.sharding.ids import shard_of_id
from xdfs.testing.poll import eventually

pytestmark = pytest.mark.slow

USER, PASSWORD = "root", "rootpw"
ENV = {"XDFS_USER": USER, "XDFS_PASSWORD": PASSWORD}
CLUSTER_ID = "CID-sharded"
FAST = [
    "-D", "namenode.heartbeat_interval_s=0.3",
    "-D", "namenode.replication_check_interval_s=0.3",
    "-D", "namenode.safe_mode_extension_s=1.0",
    "-D", "namenode.replication_pending_timeout_s=5.0",
    "-D", "namenode.heartbeat_misses_dead=10",  # a DataNode's quick restart is no death
]
SHARDS = (0, 1)


@dataclass
class Shards:
    group: ProcessGroup
    base: Path
    nn_addresses: dict[int, str] = field(default_factory=dict)
    datanodes: dict[str, ServerProcess] = field(default_factory=dict)

    namenodes: dict[int, ServerProcess] = field(default_factory=dict)

    def start_namenode(self, shard: int) -> None:
        """Format (the first time) and start shard ``shard``'s NameNode (again on its
        address when it ran before)."""
        name_dir = self.base / f"nn{shard}"
        if not name_dir.exists():
            # Shard k > 0 takes shard 0's DataNode secret: one secret file for every shard.
            secret = [] if shard == 0 else ["--datanode-secret-file", str(self.secret_file)]
            subprocess.run(
                [sys.executable, "-m", "xdfs", "namenode", "--name-dir", str(name_dir),
                 "-format", "--shard", str(shard), "--cluster-id", CLUSTER_ID, *secret],
                env={**os.environ, **ENV}, check=True, capture_output=True, timeout=120,
            )
        proc = self.group.start_xdfs(
            f"nn{shard}", *FAST, "namenode", "--name-dir", str(name_dir),
            "--rpc-address", self.nn_addresses.get(shard, "127.0.0.1:0"),
            ready_pattern=r"namenode serving on (\S+)", env=ENV,
        )
        assert proc.match is not None
        self.namenodes[shard] = proc
        self.nn_addresses[shard] = proc.match.group(1)

    @property
    def secret_file(self) -> Path:
        """The DataNode secret shard 0's NameNode wrote (DataNodes log in with it)."""
        return self.base / "nn0" / DATANODE_SECRET_FILE

    def start_datanode(self, name: str) -> None:
        table = ", ".join(f'{k} = "{a}"' for k, a in self.nn_addresses.items())
        self.datanodes[name] = self.group.start_xdfs(
            name, "-D", f"datanode.shards={{{table}}}",
            "-D", f"datanode.secret_file={self.secret_file}", "datanode",
            "--data-dir", str(self.base / name), "--rpc-address", "127.0.0.1:0",
            ready_pattern=r"datanode serving on (\S+)", env=ENV,
        )

    def address_of(self, name: str) -> str:
        match = self.datanodes[name].match
        assert match is not None
        return match.group(1)

    def client(self, shard: int) -> AsyncClient:
        return AsyncClient(f"xdfs://{self.nn_addresses[shard]}", user=USER, password=PASSWORD,
                           config=XdfsConfig())

    def pool(self, name: str, shard: int) -> dict[int, int]:
        """Block id -> data file bytes of the finalized replicas in a pool on disk."""
        finalized = Path(layout.pool_dir(self.base / name / "current", shard)) / "finalized"
        found: dict[int, int] = {}
        for path in finalized.rglob("blk_*"):
            block_id = layout.parse_data_name(path.name)
            if block_id is not None:
                found[block_id] = path.stat().st_size
        return found

    def pool_bytes(self, name: str, shard: int) -> int:
        """Bytes of every replica file (data and checksums) of a pool on disk."""
        current = Path(layout.pool_dir(self.base / name / "current", shard))
        return sum(path.stat().st_size for area in ("finalized", "rbw")
                   for path in (current / area).rglob("blk_*"))

    def has(self, block_id: int, shard: int, count: int, among: list[str] | None = None
            ) -> bool:
        """Whether ``count`` DataNodes (of ``among``) hold the block in the shard's pool."""
        names = self.datanodes if among is None else among
        return sum(block_id in self.pool(name, shard) for name in names) == count

    def holders(self, block_id: int, shard: int) -> list[str]:
        return sorted(name for name in self.datanodes if block_id in self.pool(name, shard))


@pytest.fixture
async def shards(processes: ProcessGroup, tmp_path: Path) -> AsyncIterator[Shards]:
    cluster = Shards(processes, tmp_path)
    for shard in SHARDS:
        await asyncio.to_thread(cluster.start_namenode, shard)
    for index in range(3):
        await asyncio.to_thread(cluster.start_datanode, f"dn{index}")
    yield cluster


async def _block_ids(client: AsyncClient, path: str) -> list[int]:
    located = await client.block_locations(path)
    return [block.block.block_id for block in located.blocks]


async def _node_blocks(client: AsyncClient, address: str) -> tuple[int, int] | None:
    """(replicas, used bytes) the NameNode knows of the live DataNode at ``address``."""
    report = await client.datanode_report()
    for node in report.nodes:
        if node.address == address and node.state == "live":
            return node.blocks, node.used_bytes
    return None


async def _live(client: AsyncClient) -> int:
    report = await client.datanode_report()
    return sum(node.state == "live" for node in report.nodes)


async def test_two_shards_share_datanodes_with_a_block_pool_each(shards: Shards) -> None:
    data = {0: payload(3 * BLOCK_BYTES + 11, seed=1), 1: payload(2 * BLOCK_BYTES + 5, seed=2)}
    paths = {0: "/user/a", 1: "/user/b"}
    clients = {k: shards.client(k) for k in SHARDS}
    try:
        for k in SHARDS:
            await eventually(functools.partial(_live_at_least, clients[k], 3), timeout_s=60,
                             what=f"3 live DataNodes on shard {k}")
            await clients[k].write_file(paths[k], data[k], block_size=BLOCK_BYTES)
        ids = {k: await _block_ids(clients[k], paths[k]) for k in SHARDS}
        # Each shard's blocks carry its number and sit in its pool only, twice each.
        for k in SHARDS:
            other = 1 - k
            assert {shard_of_id(b) for b in ids[k]} == {k}
            for block_id in ids[k]:
                await eventually(functools.partial(shards.has, block_id, k, 2),
                                 what=f"2 replicas of {block_id} in pool {k}")
                assert shards.holders(block_id, other) == []
            assert await clients[k].read_file(paths[k]) == data[k]

        # SIGKILL a DataNode holding replicas of both shards, restart it: each shard gets
        # its pool reported again (replica count and bytes used of that pool only).
        victim = next(n for n in shards.datanodes
                      if shards.pool(n, 0) and shards.pool(n, 1))
        shards.datanodes[victim].kill()
        await asyncio.to_thread(shards.start_datanode, victim)
        for k in SHARDS:
            # (a restart slow enough to be declared dead may see excess copies deleted:
            # what the shard knows is compared with what the pool holds now)
            await eventually(functools.partial(_knows_pool, shards, clients[k], victim, k),
                             timeout_s=60, what=f"{victim}'s pool {k} reported to shard {k}")
        assert await clients[1].read_file(paths[1]) == data[1]

        # A delete on shard 1 removes only shard 1's replicas.
        pool_0 = {n: shards.pool(n, 0) for n in shards.datanodes}
        await clients[1].delete(paths[1], skip_trash=True)
        await eventually(lambda: not any(shards.pool(n, 1) for n in shards.datanodes),
                         timeout_s=60, what="shard 1's replicas deleted")
        assert {n: shards.pool(n, 0) for n in shards.datanodes} == pool_0
        assert await clients[0].read_file(paths[0]) == data[0]

        # Replication after a DataNode's death, per shard.
        await clients[1].write_file("/user/c", data[1], block_size=BLOCK_BYTES)
        ids[1] = await _block_ids(clients[1], "/user/c")
        for block_id in ids[1]:
            await eventually(functools.partial(shards.has, block_id, 1, 2))
        dead = next(n for n in shards.datanodes
                    if set(shards.pool(n, 0)) & set(ids[0])
                    and set(shards.pool(n, 1)) & set(ids[1]))
        shards.datanodes[dead].kill()
        survivors = [n for n in shards.datanodes if n != dead]
        for k in SHARDS:
            for block_id in ids[k]:
                await eventually(
                    functools.partial(shards.has, block_id, k, 2, survivors),
                    timeout_s=90, what=f"block {block_id} copied again by shard {k}")
                assert all(block_id not in shards.pool(n, 1 - k) for n in survivors)
        assert await clients[0].read_file(paths[0]) == data[0]
        assert await clients[1].read_file("/user/c") == data[1]

        # Shard 1's NameNode killed and restarted from its image and edits: its ids stay
        # shard 1's, and the DataNodes report its pool to it again.
        shards.namenodes[1].kill()
        await clients[1].close()
        await asyncio.to_thread(shards.start_namenode, 1)
        clients[1] = shards.client(1)
        await eventually(functools.partial(_live_at_least, clients[1], 2), timeout_s=60,
                         what="2 live DataNodes on the restarted shard 1")
        assert await eventually(functools.partial(_read, clients[1], "/user/c"),
                                timeout_s=60) == data[1]
        await eventually(functools.partial(_write, clients[1], "/user/d", data[1]),
                         what="a write once safe mode is over")
        assert {shard_of_id(b) for b in await _block_ids(clients[1], "/user/d")} == {1}
    finally:
        for client in clients.values():
            await client.close()


async def _live_at_least(client: AsyncClient, count: int) -> bool:
    return await _live(client) >= count


async def _knows_pool(shards: Shards, client: AsyncClient, name: str, shard: int) -> bool:
    """The shard's NameNode knows as many replicas on DataNode ``name`` as its pool holds,
    and the pool's bytes as used (not the other pools')."""
    counts = await _node_blocks(client, shards.address_of(name))
    return counts == (len(shards.pool(name, shard)), shards.pool_bytes(name, shard))


async def _read(client: AsyncClient, path: str) -> bytes | None:
    try:
        return await client.read_file(path)
    except XdfsError:
        return None  # (safe mode, or no replica reported yet: asked again)


async def _write(client: AsyncClient, path: str, data: bytes) -> bool:
    try:
        await client.write_file(path, data, block_size=BLOCK_BYTES)
    except SafeModeError:
        return False  # (a restarted NameNode: asked again)
    return True
