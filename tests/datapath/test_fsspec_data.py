"""fsspec file data (``open`` rb/wb with seek, ``cat_file`` ranges, ``pipe_file``, ``put``,
``get``) and the blocking ``Client.open`` against an in-process cluster. The fsspec object
runs its own loop thread, so the checks run in a worker thread while the cluster serves."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest

from tests.datapath.conftest import BLOCK_BYTES, Cluster, payload
from tests.integration.conftest import ROOT, ROOT_PW
from xdfs.client.client import Client
from xdfs.config import XdfsConfig


@pytest.fixture(autouse=True)
def _no_ambient_xdfs_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("XDFS_CONF", "XDFS_FS", "XDFS_USER", "XDFS_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    yield
    fsspec.AbstractFileSystem.clear_instance_cache()


def _fs(address: str) -> Any:
    return fsspec.filesystem(
        "xdfs", fs=f"xdfs://{address}", user=ROOT, password=ROOT_PW, skip_instance_cache=True
    )


async def test_fsspec_file_data(cluster: Cluster, tmp_path: Path) -> None:
    address = cluster.mc.namenodes[0].address
    await asyncio.to_thread(_fsspec_checks, address, tmp_path)


def _fsspec_checks(address: str, tmp_path: Path) -> None:
    fs = _fs(address)
    data = payload(3 * BLOCK_BYTES + 5, seed=1)
    with fs.open("/fs/big.bin", "wb") as fh:
        for start in range(0, len(data), 10_000):
            fh.write(data[start : start + 10_000])
    assert fs.info("/fs/big.bin")["size"] == len(data)
    with fs.open("/fs/big.bin", "rb") as fh:
        assert fh.read(10) == data[:10]
        fh.seek(BLOCK_BYTES - 3)
        assert fh.read(6) == data[BLOCK_BYTES - 3 : BLOCK_BYTES + 3]
        fh.seek(-4, 2)
        assert fh.read() == data[-4:]
    assert fs.cat_file("/fs/big.bin") == data
    assert fs.cat_file("/fs/big.bin", start=100, end=200) == data[100:200]
    assert fs.cat_file("/fs/big.bin", start=-7) == data[-7:]
    fs.pipe_file("/fs/small", b"hello xdfs")
    assert fs.cat_file("/fs/small") == b"hello xdfs"
    fs.pipe_file("/fs/small", b"replaced")
    assert fs.cat("/fs/small") == b"replaced"
    with fs.open("/fs/empty", "wb"):
        pass
    assert fs.cat_file("/fs/empty") == b"" and fs.info("/fs/empty")["size"] == 0
    local = tmp_path / "local.bin"
    local.write_bytes(data[:5000])
    fs.put(str(local), "/fs/put.bin")
    fs.get("/fs/put.bin", str(tmp_path / "back.bin"))
    assert (tmp_path / "back.bin").read_bytes() == data[:5000]


async def test_blocking_client_open(cluster: Cluster) -> None:
    address = cluster.mc.namenodes[0].address
    await asyncio.to_thread(_client_open_checks, address)


def _client_open_checks(address: str) -> None:
    with Client(f"xdfs://{address}", user=ROOT, password=ROOT_PW, config=XdfsConfig()) as c:
        with c.open("/py/lines.txt", "wb", block_size=BLOCK_BYTES) as fh:
            for i in range(20_000):
                fh.write(f"line {i}\n".encode())
        with c.open("/py/lines.txt", "rb") as fh:
            lines = fh.readlines()
        assert len(lines) == 20_000 and lines[12345] == b"line 12345\n"
        with c.open("/py/lines.txt", "rb") as fh:
            fh.seek(7 * 7)
            assert fh.readline() == b"line 7\n"


async def test_sequential_reads_stream_each_block_once(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 17 item 19: Client.open(...).read() asked a DataNode for every 8 KiB. Reading a
    file through the cursor (Client.open, the fsspec file) now costs one request per block,
    whatever the size of each read; a seek back starts a new stream."""
    address = cluster.mc.namenodes[0].address
    await asyncio.to_thread(_sequential_checks, address, monkeypatch)


def _count_block_reads(client: Client, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts the read_block requests ``client`` sends to DataNodes."""
    counts = {"read_block": 0}
    pool = client.datanodes
    get = pool.get

    class Counted:
        def __init__(self, rpc: Any) -> None:
            self.rpc = rpc

        async def download(self, method: Any, request: Any, **options: Any) -> Any:
            counts[method.name] = counts.get(method.name, 0) + 1
            return await self.rpc.download(method, request, **options)

    monkeypatch.setattr(pool, "get", lambda address: Counted(get(address)))
    return counts


def _sequential_checks(address: str, monkeypatch: pytest.MonkeyPatch) -> None:
    data = payload(3 * BLOCK_BYTES + 1000, seed=4)  # 4 blocks
    fs = _fs(address)
    with Client(f"xdfs://{address}", user=ROOT, password=ROOT_PW, config=XdfsConfig()) as c:
        c.write_file("/seq/f", data, block_size=BLOCK_BYTES)
        counts = _count_block_reads(c, monkeypatch)
        with c.open("/seq/f") as fh:
            assert fh.read() == data
        assert counts["read_block"] == 4
        with c.open("/seq/f") as fh:
            assert b"".join(iter(lambda: fh.read(1000), b"")) == data
            assert counts["read_block"] == 8
            fh.seek(3 * BLOCK_BYTES + 10)  # back into the last block: one new stream
            assert fh.read(100) == data[3 * BLOCK_BYTES + 10 : 3 * BLOCK_BYTES + 110]
        assert counts["read_block"] == 9

    counts = _count_block_reads(fs.client, monkeypatch)
    with fs.open("/seq/f", "rb", block_size=20_000) as fh:  # read-ahead of 20 kB ranges
        assert b"".join(iter(lambda: fh.read(7_000), b"")) == data
    assert counts["read_block"] == 4
