"""Writer leases: the soft limit lets another writer take over, the hard limit makes the
NameNode close an abandoned file itself."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from xdfs.client.client import AsyncClient
from xdfs.errors import LeaseError
from xdfs.protocol import namenode as p
from xdfs.testing.minicluster import MiniCluster
from xdfs.testing.poll import eventually

from .conftest import ROOT, ROOT_PW, StartDataNodes, connect, nn_config


async def _renew(client: AsyncClient) -> None:
    await client.rpc.call(p.RENEW_LEASE, p.RenewLeaseRequest(client.client_name))


async def test_hard_limit_recovers_abandoned_files(
    minicluster: MiniCluster, fake_datanodes: StartDataNodes
) -> None:
    config = nn_config(lease_soft_limit_s=0.5, lease_hard_limit_s=1.5, lease_check_interval_s=0.1)
    nn = await minicluster.start_namenode(config=config)
    datanodes = await fake_datanodes(nn)
    async with (
        connect(nn, ROOT, ROOT_PW) as observer,
        connect(nn, ROOT, ROOT_PW) as silent,
        connect(nn, ROOT, ROOT_PW) as live,
    ):
        await silent.create("/abandoned")
        located = await silent.rpc.call(
            p.ADD_BLOCK, p.AddBlockRequest("/abandoned", silent.client_name)
        )
        # its targets stored 100 bytes before the writer fell silent
        await datanodes.store(located, 100)
        await live.create("/kept-open")
        assert (await observer.status()).files_under_construction == 2

        stop = asyncio.Event()

        async def keep_renewing() -> None:
            while not stop.is_set():
                await _renew(live)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.1)

        renewer = asyncio.create_task(keep_renewing())
        try:

            async def recovered() -> bool:
                return not (await observer.stat("/abandoned")).under_construction

            await eventually(recovered)
            # only the silent writer's file was closed: the live one keeps its lease
            assert (await observer.stat("/kept-open")).under_construction
            assert (await observer.status()).files_under_construction == 1
        finally:
            stop.set()
            await renewer
        # the closed file keeps the block it had, with the length its replicas have
        blocks = await observer.block_locations("/abandoned")
        assert [b.block.block_id for b in blocks.blocks] == [located.block.block_id]
        assert blocks.file_length == 100
        assert not blocks.under_construction
        # the old writer lost its lease
        with pytest.raises(LeaseError):
            await silent.complete("/abandoned", [located.block])
        # and once the live writer falls silent, its file is recovered too
        await eventually(lambda: _closed(observer, "/kept-open"))
        with pytest.raises(LeaseError):
            await live.complete("/kept-open", [])

    # the recoveries were logged: after a restart both files are closed
    await minicluster.stop_namenode(nn)
    nn = await minicluster.start_namenode(format_dirs=False, config=config)
    async with connect(nn, ROOT, ROOT_PW) as client:
        assert not (await client.stat("/abandoned")).under_construction
        assert not (await client.stat("/kept-open")).under_construction
        assert (await client.status()).files_under_construction == 0


async def _closed(client: AsyncClient, path: str) -> bool:
    return not (await client.stat(path)).under_construction


async def test_soft_limit_lets_another_writer_take_over(
    minicluster: MiniCluster, fake_datanodes: StartDataNodes
) -> None:
    config = nn_config(lease_soft_limit_s=1.0, lease_hard_limit_s=3600.0)
    nn = await minicluster.start_namenode(config=config)
    datanodes = await fake_datanodes(nn)
    async with connect(nn, ROOT, ROOT_PW) as writer, connect(nn, ROOT, ROOT_PW) as other:
        first = await writer.create("/f")
        assert first.under_construction

        # the writer is live: nobody else may create, overwrite or complete the file
        with pytest.raises(LeaseError):
            await other.create("/f", overwrite=True)
        with pytest.raises(LeaseError):
            await other.create("/f")
        with pytest.raises(LeaseError):
            await other.complete("/f", [])
        with pytest.raises(LeaseError):
            await other.rpc.call(p.ADD_BLOCK, p.AddBlockRequest("/f", other.client_name))
        assert (await other.stat("/f")).inode_id == first.inode_id

        # past the soft limit without a renewal, another client may overwrite the file
        await asyncio.sleep(1.3)
        second = await other.create("/f", overwrite=True)
        assert second.inode_id != first.inode_id and second.under_construction
        assert (await other.status()).files_under_construction == 1  # the old one is gone
        # the old writer lost the file
        with pytest.raises(LeaseError):
            await writer.complete("/f", [])
        with pytest.raises(LeaseError):
            await writer.rpc.call(p.ADD_BLOCK, p.AddBlockRequest("/f", writer.client_name))
        # a renewal just before the attempt keeps the new writer's lease
        await asyncio.sleep(1.3)
        await _renew(other)
        with pytest.raises(LeaseError):
            await writer.create("/f", overwrite=True)
        located = await other.rpc.call(p.ADD_BLOCK, p.AddBlockRequest("/f", other.client_name))
        done = await other.complete("/f", [await datanodes.store(located, 4096)])
        assert not done.under_construction and done.length == 4096
        assert (await other.status()).files_under_construction == 0

        # a closed file may be overwritten by anyone allowed to, at once
        third = await writer.create("/f", overwrite=True)
        assert third.length == 0 and third.under_construction
        await writer.complete("/f", [])
