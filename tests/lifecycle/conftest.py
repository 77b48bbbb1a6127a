"""A real NameNode and real DataNodes (in-process, MiniCluster) on a sub-second scale for
the lifecycle tests, with hosts files and a topology file in the test's directory; the
balancer runs as a real process. Every wait is bounded by a guard, never asserted."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from xdfs.client.client import AsyncClient
from xdfs.config import XdfsConfig
from xdfs.datanode.server import DataNode
from xdfs.namenode.server import NameNode
from xdfs.protocol import namenode as p
from xdfs.testing.minicluster import MiniCluster
from xdfs.testing.net import free_port
from xdfs.testing.poll import eventually

ROOT, ROOT_PW = "root", "rootpw"
MiB = 1 << 20
BLOCK = 256 * 1024

FAST_NN: dict[str, Any] = {
    "heartbeat_interval_s": 0.2,
    "heartbeat_misses_dead": 5,
    "replication_check_interval_s": 0.2,
    "decommission_check_interval_s": 0.2,
    "lease_soft_limit_s": 3.0,  # a killed balancer's lock lapses soon
    "safe_mode_extension_s": 0.0,
}


@dataclass
class Lifecycle:
    """The cluster of one test and its files (hosts files, topology)."""

    minicluster: MiniCluster
    base: Path
    config: XdfsConfig
    nn: NameNode | None = None
    root: AsyncClient | None = None
    datanodes: list[DataNode] = field(default_factory=list)

    @property
    def exclude(self) -> Path:
        return self.base / "exclude"

    @property
    def topology(self) -> Path:
        return self.base / "topology"

    async def start_namenode(self) -> NameNode:
        self.nn = await self.minicluster.start_namenode(
            superuser=ROOT, password=ROOT_PW, config=self.config)
        self.root = AsyncClient(f"xdfs://{self.nn.address}", user=ROOT, password=ROOT_PW,
                                config=XdfsConfig())
        self.minicluster.clients.append(self.root.rpc)
        return self.nn

    async def start_datanode(self, *, capacity_bytes: int = 0, rack: str = "",
                             port: int = 0, **datanode: Any) -> DataNode:
        """A real DataNode (on ``port``, 0: any); with ``rack``, on a port chosen now and
        written to the topology file first (the NameNode reads racks when a node
        registers)."""
        if rack:
            port = free_port()
            with self.topology.open("a") as out:
                out.write(f"127.0.0.1:{port} {rack}\n")
            if self.root is not None:  # the NameNode re-reads it on refresh
                await self.client.refresh_nodes()
        config = replace(self.config, datanode=replace(
            self.config.datanode, capacity_bytes=capacity_bytes, **datanode))
        node = await self.minicluster.start_datanode(
            f"dn{len(self.datanodes)}", config=config, port=port)
        self.datanodes.append(node)
        await self.wait_registered(len(self.datanodes))
        return node

    async def wait_registered(self, count: int) -> None:
        async def reported() -> bool:
            report = await self.client.datanode_report()
            return sum(1 for n in report.nodes if n.state == "live" and n.blocks >= 0) >= count

        await eventually(reported)

    @property
    def client(self) -> AsyncClient:
        assert self.root is not None
        return self.root

    async def report(self) -> p.DataNodeReport:
        return await self.client.datanode_report()

    async def node_info(self, address: str) -> p.DataNodeInfo:
        (info,) = [n for n in (await self.report()).nodes if n.address == address]
        return info

    async def write_files(self, count: int, size: int, replication: int) -> dict[str, bytes]:
        files = {}
        for i in range(count):
            data = os.urandom(size)
            path = f"/data/f{i}"
            await self.client.write_file(path, data, replication=replication,
                                         block_size=BLOCK)
            files[path] = data
        return files

    async def holders(self, path: str) -> list[list[str]]:
        """Each block's good replica addresses."""
        located = await self.client.block_locations(path)
        return [sorted(b.locations) for b in located.blocks]


@pytest.fixture
async def lifecycle(minicluster: MiniCluster, tmp_path: Path) -> Lifecycle:
    base = XdfsConfig()
    config = replace(
        base,
        namenode=replace(
            base.namenode, **FAST_NN,
            hosts_exclude_file=str(tmp_path / "exclude"),
            topology_file=str(tmp_path / "topology"),
        ),
        datanode=replace(base.datanode, replication_concurrency_max=8),
    )
    (tmp_path / "exclude").write_text("")
    (tmp_path / "topology").write_text("")
    return Lifecycle(minicluster, tmp_path, config)
