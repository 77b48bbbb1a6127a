"""Decommissioning a real DataNode while clients read: no read fails, the node ends
DECOMMISSIONED, and every block it held is fully replicated on the other nodes; taking it
out of the exclude file puts it back in service."""

from __future__ import annotations

import asyncio

import pytest

from tests.integration.conftest import run_xdfs
from xdfs.client.client import AsyncClient
from xdfs.config import XdfsConfig
from xdfs.errors import AccessDenied, HostsFileError
from xdfs.testing.net import free_port
from xdfs.testing.poll import eventually

from .conftest import ROOT, ROOT_PW, Lifecycle

ROOT_ENV = {"XDFS_USER": ROOT, "XDFS_PASSWORD": ROOT_PW}


async def test_decommission_under_a_read_loop(lifecycle: Lifecycle) -> None:
    await lifecycle.start_namenode()
    for _ in range(4):
        await lifecycle.start_datanode()
    files = await lifecycle.write_files(6, 600 * 1024, replication=2)  # 3 blocks each
    leaving = lifecycle.datanodes[0].address
    held = [path for path in files if any(leaving in b for b in await lifecycle.holders(path))]
    assert held, "the node to decommission holds replicas"
    reads = 0
    stop = asyncio.Event()

    async def read_loop() -> None:
        nonlocal reads
        while not stop.is_set():
            for path, data in files.items():
                assert await lifecycle.client.read_file(path) == data, path
                reads += 1

    reader = asyncio.ensure_future(read_loop())
    lifecycle.exclude.write_text(f"{leaving}\n")
    answer = await lifecycle.client.refresh_nodes()
    assert answer.decommissioning == [leaving] or answer.decommissioned == [leaving]

    async def decommissioned() -> bool:
        info = await lifecycle.node_info(leaving)
        assert info.admin_state in ("decommissioning", "decommissioned")
        return info.admin_state == "decommissioned"

    await eventually(decommissioned, timeout_s=120, what="node decommissioned")
    stop.set()
    await reader  # re-raises a failed read
    assert reads >= len(files)
    info = await lifecycle.node_info(leaving)
    assert (info.state, info.decommission_blocks_left) == ("live", 0)
    assert lifecycle.nn is not None
    code, out, err = await run_xdfs("admin", "-fs", f"xdfs://{lifecycle.nn.address}", "-report",
                                    env=ROOT_ENV)
    assert code == 0, err
    assert f"Name: {leaving}" in out and "Decommission Status: Decommissioned" in out
    assert "Rack: /default-rack" in out
    for path in files:
        for holders in await lifecycle.holders(path):
            others = [address for address in holders if address != leaving]
            assert len(others) >= 2, (path, holders)
    fsck = await lifecycle.client.fsck("/")
    assert fsck.healthy and fsck.under_replicated_blocks == 0
    # back in service: its replicas are surplus now and the extra ones go
    lifecycle.exclude.write_text("")
    code, out, err = await run_xdfs("admin", "-fs", f"xdfs://{lifecycle.nn.address}",
                                    "-refreshNodes", env=ROOT_ENV)
    assert (code, out, err) == (0, "Refresh nodes successful\n", ""), err
    assert (await lifecycle.node_info(leaving)).admin_state == "normal"

    async def trimmed() -> bool:
        blocks = [h for path in files for h in await lifecycle.holders(path)]
        return all(len(holders) == 2 for holders in blocks)

    await eventually(trimmed, timeout_s=60)
    for path, data in files.items():
        assert await lifecycle.client.read_file(path) == data


async def test_refresh_nodes_is_for_the_superuser_and_a_bad_file_changes_nothing(
    lifecycle: Lifecycle,
) -> None:
    nn = await lifecycle.start_namenode()
    await lifecycle.start_datanode()
    await lifecycle.client.add_user("alice", "alice-pw", [])
    async with AsyncClient(f"xdfs://{nn.address}", user="alice", password="alice-pw",
                           config=XdfsConfig()) as alice:
        with pytest.raises(AccessDenied):
            await alice.refresh_nodes()
    lifecycle.exclude.unlink()
    lifecycle.exclude.mkdir()  # unreadable as a file
    with pytest.raises(HostsFileError, match="exclude"):
        await lifecycle.client.refresh_nodes()
    info = await lifecycle.node_info(lifecycle.datanodes[0].address)
    assert info.admin_state == "normal"


async def test_the_exclude_file_is_read_at_start(lifecycle: Lifecycle) -> None:
    """A NameNode (re)started with a node in its exclude file decommissions it as soon as
    it registers: no new replica goes there."""
    port = free_port()
    lifecycle.exclude.write_text(f"127.0.0.1:{port}\n")
    await lifecycle.start_namenode()
    excluded = await lifecycle.start_datanode(port=port)
    await lifecycle.start_datanode()
    files = await lifecycle.write_files(3, 300 * 1024, replication=1)
    for path in files:
        assert all(excluded.address not in h for h in await lifecycle.holders(path))

    async def decommissioned() -> bool:
        return (await lifecycle.node_info(excluded.address)).admin_state == "decommissioned"

    await eventually(decommissioned)
