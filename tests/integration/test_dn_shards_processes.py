"""Two metadata shards as real processes: two NameNodes formatted as shard 0 and shard 1
(``-format --shard N``, one cluster id) and three DataNodes serving both
(``datanode.shards``). Files written through each NameNode land in that shard's block pool;
a DataNode killed with SIGKILL and restarted reports each pool to its shard again; a delete
on shard 1 removes only shard 1's replicas; after a DataNode's death each shard
re-replicates its own blocks."""

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
]
SHARDS = (0, 1)


@dataclass
class Shards:
    group: ProcessGroup
    base: Path
    nn_addresses: dict[int, str] = field(default_factory=dict)
    datanodes: dict[str, ServerProcess] = field(default_factory=dict)

    def start_namenode(self, shard: int) -> None:
        name_dir = self.base / f"nn{shard}"
        subprocess.run(
            [sys.executable, "-m", "xdfs", "namenode", "--name-dir", str(name_dir), "-format",
             "--shard", str(shard), "--cluster-id", CLUSTER_ID],
            env={**os.environ, **ENV}, check=True, capture_output=True, timeout=120,
        )
        proc = self.group.start_xdfs(
            f"nn{shard}", *FAST, "namenode", "--name-dir", str(name_dir),
            "--rpc-address", "127.0.0.1:0", ready_pattern=r"namenode serving on (\S+)", env=ENV,
        )
        assert proc.match is not None
        self.nn_addresses[shard] = proc.match.group(1)

    def start_datanode(self, name: str) -> None:
        table = ", ".join(f'{k} = "{a}"' for k, a in self.nn_addresses.items())
        self.datanodes[name] = self.group.start_xdfs(
            name, "-D", f"datanode.shards={{{table}}}", "datanode",
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
        address = shards.address_of(victim)
        held = {k: len(shards.pool(victim, k)) for k in SHARDS}
        shards.datanodes[victim].kill()
        await asyncio.to_thread(shards.start_datanode, victim)
        address = shards.address_of(victim)
        for k in SHARDS:
            counts = await eventually(
                functools.partial(_reported, clients[k], address, held[k]), timeout_s=60,
                what=f"{victim}'s pool {k} reported to shard {k}")
            assert counts[0] == held[k]
            used = shards.pool_bytes(victim, k)  # the pool's bytes, not the node's
            await eventually(functools.partial(_used_is, clients[k], address, used),
                             what=f"bytes used of pool {k} told to shard {k}")
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
    finally:
        for client in clients.values():
            await client.close()


async def _live_at_least(client: AsyncClient, count: int) -> bool:
    return await _live(client) >= count


async def _reported(client: AsyncClient, address: str, replicas: int) -> tuple[int, int] | None:
    counts = await _node_blocks(client, address)
    return counts if counts is not None and counts[0] == replicas else None


async def _used_is(client: AsyncClient, address: str, used: int) -> bool:
    counts = await _node_blocks(client, address)
    return counts is not None and counts[1] == used
