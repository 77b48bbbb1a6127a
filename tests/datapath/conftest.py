"""Fixtures and helpers of the data-path tests: a cluster configuration with fast heartbeats,
deterministic test data, replica files on disk, and waiting for the NameNode to converge.

The fsspec tests (fsspec's own conformance suites, pandas, pyarrow, dask) are synchronous:
they call the fsspec file system, which runs its own client loop thread. They share one
real cluster per module (``live_cluster``: a NameNode and three DataNodes in process, on a
loop thread of their own; one per test would cost more than the tests, one per session would
keep serving heartbeats while later, timing-sensitive tests run) and work under a fresh
directory each (``xdfs_dir``)."""

from __future__ import annotations

import hashlib
import random
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import fsspec
import pytest

from tests.integration.conftest import ROOT, ROOT_PW, connect
from xdfs.client.client import AsyncClient, Client
from xdfs.client.fsspec_impl import XdfsFileSystem
from xdfs.config import KiB, XdfsConfig
from xdfs.rpc.sync import LoopThread
from xdfs.testing.minicluster import MiniCluster
from xdfs.testing.poll import eventually

T = TypeVar("T")

#: Small blocks make multi-block files out of little data.
BLOCK_BYTES = 64 * KiB
#: The default block size of ``live_cluster``.
LIVE_BLOCK_BYTES = 256 * KiB


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
    # Live to the NameNode is not yet writable: a DataNode installs its block keys after
    # it made its cluster id durable, which a loaded disk can take a while to do.
    await eventually(lambda: all(dn.block_keys for dn in mc.datanodes), what="block keys")
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


@dataclass(frozen=True)
class LiveCluster:
    address: str

    @property
    def url(self) -> str:
        return f"xdfs://{self.address}"

    @property
    def storage_options(self) -> dict[str, Any]:
        """What pandas, dask and fsspec.open take to reach the cluster as root."""
        return {"user": ROOT, "password": ROOT_PW}

    def filesystem(self) -> XdfsFileSystem:
        return XdfsFileSystem(fs=self.url, **self.storage_options)

    def client(self) -> Client:
        """A synchronous client of the cluster, as root."""
        return Client(self.url, config=XdfsConfig(), **self.storage_options)


def scratch_dir(client: Client, top: str) -> Iterator[str]:
    """A fresh directory under ``top`` for one test, removed (not into the trash) when the
    fixture that yields from this ends."""
    path = f"{top}/{uuid.uuid4().hex[:10]}"
    client.mkdirs(path)
    yield path
    client.delete(path, recursive=True, skip_trash=True)


@pytest.fixture(scope="module")
def live_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCluster]:
    loop = LoopThread("xdfs-test-cluster")
    mc = MiniCluster(tmp_path_factory.mktemp("fsspec-cluster"))
    try:
        config = fast_config(scan_period_s=3600.0)
        # small blocks: the Parquet and CSV files of the tests span several
        config = replace(config, namenode=replace(
            config.namenode, default_block_size_bytes=LIVE_BLOCK_BYTES
        ))
        cluster = loop.run(start_cluster(mc, config))
        loop.run(cluster.client.close())
        yield LiveCluster(mc.namenodes[0].address)
    finally:
        _close_cached_filesystems()
        loop.run(mc.close())
        loop.close()


def _close_cached_filesystems() -> None:
    """pandas and dask make file systems through fsspec's instance cache: close their
    clients before the cluster goes."""
    for fs in list(XdfsFileSystem._cache.values()):
        fs.client.close()
    fsspec.AbstractFileSystem.clear_instance_cache()


@pytest.fixture
def no_ambient_xdfs_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("XDFS_CONF", "XDFS_FS", "XDFS_USER", "XDFS_PASSWORD"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def xdfs(live_cluster: LiveCluster) -> Iterator[XdfsFileSystem]:
    """The fsspec file system of ``live_cluster``, as root."""
    fs = live_cluster.filesystem()
    try:
        yield fs
    finally:
        fs.client.close()


@pytest.fixture
def xdfs_dir(xdfs: XdfsFileSystem) -> Iterator[str]:
    """A fresh directory for one test, removed afterwards."""
    path = f"/t/{uuid.uuid4().hex[:12]}"
    xdfs.makedirs(path)
    yield path
    xdfs.rm(path, recursive=True)
