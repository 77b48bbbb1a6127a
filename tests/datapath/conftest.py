"""Fixtures and helpers of the data-path tests: a cluster configuration with fast heartbeats,
deterministic test data, replica files on disk, and waiting for the NameNode to converge."""

from __future__ import annotations

import hashlib
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.integration.conftest import ROOT, ROOT_PW, connect
from xdfs.client.client import AsyncClient
from xdfs.config import KiB, XdfsConfig
from xdfs.testing.minicluster import MiniCluster
from xdfs.testing.poll import eventually

T = TypeVar("T")

#: Small blocks make multi-block files out of little data.
BLOCK_BYTES = 64 * KiB


def fast_config(**datanode: Any) -> XdfsConfig:
    """Heartbeats, liveness, replication and safe mode on a sub-second scale."""
    base = XdfsConfig()
    namenode = replace(
        base.namenode,
        heartbeat_interval_s=0.2,
        heartbeat_misses_dead=3,
        replication_check_interval_s=0.2,
        replication_pending_timeout_s=5.0,
        safe_mode_extension_s=0.5,
        complete_wait_s=10.0,
        lease_check_interval_s=0.5,
    )
    return replace(base, namenode=namenode, datanode=replace(base.datanode, **datanode))


def payload(size: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(size)


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def replica_files(data_dir: Path, block_id: int) -> list[Path]:
    """The finalized data file of ``block_id`` under a DataNode's data dir (0 or 1 entries)."""
    return sorted((data_dir / "current" / "finalized").glob(f"subdir*/subdir*/blk_{block_id}"))


def flip_byte(path: Path, offset: int = 0) -> None:
    with path.open("r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ 0xFF]))


async def replication_settled(client: AsyncClient, path: str = "/") -> bool:
    """Every block under ``path`` has exactly its expected live replicas, none pending."""
    report = await client.fsck(path, files=True, blocks=True)
    return report.healthy and all(
        block.live_replicas == block.expected_replicas and not block.corrupt_locations
        for entry in report.listed
        for block in entry.blocks
    )


@dataclass
class Cluster:
    mc: MiniCluster
    client: AsyncClient
    config: XdfsConfig

    def data_dir(self, name: str) -> Path:
        return self.mc.base_dir / name

    def holders(self, block_id: int) -> list[str]:
        return [
            dn for dn in ("dn0", "dn1", "dn2", "dn3") if replica_files(self.data_dir(dn), block_id)
        ]


async def start_cluster(mc: MiniCluster, config: XdfsConfig, datanodes: int = 3) -> Cluster:
    nn = await mc.start_namenode(config=config)
    for index in range(datanodes):
        await mc.start_datanode(f"dn{index}", nn.address, config=config)
    client = connect(nn, ROOT, ROOT_PW)
    await eventually(lambda: _live(client, datanodes), what=f"{datanodes} live DataNodes")
    return Cluster(mc, client, config)


async def _live(client: AsyncClient, count: int) -> bool:
    report = await client.datanode_report()
    return sum(node.state == "live" for node in report.nodes) >= count


@pytest.fixture
async def cluster(minicluster: MiniCluster) -> AsyncIterator[Cluster]:
    config = fast_config(scan_period_s=3600.0)
    made = await start_cluster(minicluster, config)
    try:
        yield made
    finally:
        await made.client.close()
