"""Quotas end to end: ``xdfs admin -setQuota/-setSpaceQuota/-clrQuota/-clrSpaceQuota`` and
``xdfs dfs -count -q`` as child processes against a real NameNode; every operation that adds
names or bytes refused with a typed error that changes nothing (create, mkdirs, add_block,
rename into a quota'd tree, replication changes); quotas and usage identical after a restart
from the edits log and after one from an image."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.datapath.test_processes import ProcessCluster
from tests.integration.conftest import (
    ROOT,
    ROOT_PW,
    add_stored_block,
    connect,
    nn_config,
    run_xdfs_batch,
)
from tests.integration.fake_datanodes import FakeDataNodes
from xdfs.client.client import AsyncClient
from xdfs.common.process import ProcessGroup
from xdfs.errors import AccessDenied, DSQuotaExceeded, InvalidArgument, NSQuotaExceeded
from xdfs.namenode.server import NameNode
from xdfs.protocol.blocks import BlockRecord
from xdfs.testing.minicluster import MiniCluster

BLOCK = 4096  # the smallest block size a file may ask for
ROOT_ENV = {"XDFS_USER": ROOT, "XDFS_PASSWORD": ROOT_PW}


async def _write(client: AsyncClient, path: str, sizes: list[int], replication: int) -> None:
    await client.create(path, replication=replication, block_size=BLOCK)
    blocks: list[BlockRecord] = []
    for size in sizes:
        blocks.append(await add_stored_block(client, path, size, blocks[-1] if blocks else None))
    await client.complete(path, blocks)


def _usage(nn: NameNode, path: str) -> tuple[int, int, int, int]:
    assert nn.fs is not None
    found = nn.fs.ns.quota_of(path)
    assert found is not None
    return found.ns_quota, found.ds_quota, found.names, found.space


async def test_quota_commands_and_count(nn: NameNode) -> None:
    uri = f"xdfs://{nn.address}"
    async with connect(nn, ROOT, ROOT_PW) as root:
        await root.mkdirs("/q/sub")
        await _write(root, "/q/sub/f", [1000], replication=2)
        await root.add_user("alice", "alicepw", [])

    def admin(*words: str) -> list[str]:
        return ["admin", "-fs", uri, *words]

    def dfs(*words: str) -> list[str]:
        return ["dfs", "-fs", uri, *words]

    results = await run_xdfs_batch([
        admin("-setQuota", "10", "/q"),
        admin("-setSpaceQuota", "1m", "/q"),
        dfs("-count", "-q", "-v", "/q"),
        dfs("-count", "-q", "-h", "/q"),
        admin("-setQuota", "0", "/q"),
        admin("-setSpaceQuota", "lots", "/q"),
        admin("-setQuota", "5", "/q/sub/f", "/nope", "/q/sub"),
        admin("-clrQuota", "/q"),
        dfs("-count", "-q", "/q"),
        admin("-clrSpaceQuota", "/q"),
        dfs("-count", "-q", "/q"),
    ], ROOT_ENV)
    codes = [code for code, _out, _err in results]
    assert codes == [0, 0, 0, 0, 2, 2, 1, 0, 0, 0, 0], results
    head, row = results[2][1].splitlines()
    assert head.split() == ["QUOTA", "REM_QUOTA", "SPACE_QUOTA", "REM_SPACE_QUOTA",
                            "DIR_COUNT", "FILE_COUNT", "CONTENT_SIZE", "PATHNAME"]
    # 2 directories and 1 file: 7 names left; 2000 bytes consumed of 1 MiB
    assert row.split() == ["10", "7", "1048576", str(1048576 - 2000), "2", "1", "1000", "/q"]
    assert results[3][1].split()[2:4] == ["1.0", "M"]
    assert "setQuota" in results[4][2] and "not a valid value" in results[4][2]
    assert "setSpaceQuota" in results[5][2]
    errors = results[6][2].splitlines()
    assert len(errors) == 2, errors  # the file and the missing path; /q/sub got its quota
    assert errors[0].startswith("setQuota: Cannot set quota on a file: /q/sub/f")
    assert results[8][1].split()[:4] == ["none", "inf", "1048576", str(1048576 - 2000)]
    assert results[10][1].split()[:4] == ["none", "inf", "none", "inf"]
    assert _usage(nn, "/q/sub") == (5, -1, 2, 2000)

    # only a superuser sets quotas
    async with connect(nn, "alice", "alicepw") as alice:
        with pytest.raises(AccessDenied):
            await alice.set_quota("/q", 3)


async def test_every_adding_operation_is_checked(nn: NameNode) -> None:
    async with connect(nn, ROOT, ROOT_PW) as root:
        for path in ("/q", "/free/sub"):
            await root.mkdirs(path)
        await _write(root, "/free/sub/a", [100], replication=1)
        await _write(root, "/free/sub/b", [100], replication=1)
        await root.set_quota("/q", 3, 3 * BLOCK)

        await root.mkdirs("/q/d")
        await root.create("/q/d/f", replication=1, block_size=BLOCK)
        with pytest.raises(NSQuotaExceeded, match="quota=3 file count=4"):
            await root.mkdirs("/q/e")
        with pytest.raises(NSQuotaExceeded):
            await root.create("/q/g")
        # several names at once: all or none (nothing logged before the refusal)
        await root.set_quota("/q", 5, 3 * BLOCK)
        with pytest.raises(NSQuotaExceeded):
            await root.mkdirs("/q/x/y/z")
        with pytest.raises(NSQuotaExceeded):
            await root.create("/q/x/y/f")
        assert not await root.exists("/q/x")
        await root.set_quota("/q", 3, 3 * BLOCK)
        with pytest.raises(NSQuotaExceeded):  # 3 names into a tree with none left
            await root.rename("/free/sub", "/q/sub")
        assert await root.exists("/free/sub/a") and not await root.exists("/q/sub")

        # add_block charges a whole block times replication before any byte is sent
        first = await add_stored_block(root, "/q/d/f", BLOCK)
        second = await add_stored_block(root, "/q/d/f", BLOCK, first)
        third = await add_stored_block(root, "/q/d/f", BLOCK, second)
        assert nn.fs is not None
        next_block_id = nn.fs.ns.next_block_id
        with pytest.raises(DSQuotaExceeded, match="The DiskSpace quota of /q is exceeded"):
            await add_stored_block(root, "/q/d/f", 10, third)
        assert nn.fs.ns.next_block_id == next_block_id  # refused before allocating
        await root.complete("/q/d/f", [first, second, third])
        assert _usage(nn, "/q") == (3, 3 * BLOCK, 3, 3 * BLOCK)

        # a replication change that takes the tree over its space quota
        await root.set_quota("/q", -1, 5 * BLOCK)
        with pytest.raises(DSQuotaExceeded):
            await root.set_replication("/q/d/f", 2)
        assert (await root.stat("/q/d/f")).replication == 1
        await root.set_quota("/q", -1, 6 * BLOCK)
        await root.set_replication("/q/d/f", 2)
        assert _usage(nn, "/q") == (-1, 6 * BLOCK, 3, 6 * BLOCK)

        # rename into the tree counts the moved subtree's names and bytes
        await root.set_quota("/q", 6, 6 * BLOCK + 150)
        with pytest.raises(DSQuotaExceeded):
            await root.rename("/free/sub", "/q/sub")
        await root.delete("/free/sub/b", recursive=False, skip_trash=True)
        assert await root.rename("/free/sub", "/q/sub") == "/q/sub"
        assert _usage(nn, "/q") == (6, 6 * BLOCK + 150, 5, 6 * BLOCK + 100)
        with pytest.raises(InvalidArgument, match="Cannot set quota on a file"):
            await root.set_quota("/q/d/f", 1)


async def _populated(minicluster: MiniCluster) -> NameNode:
    nn = await minicluster.start_namenode(superuser=ROOT, password=ROOT_PW)
    datanodes = await FakeDataNodes.start(nn)
    async with connect(nn, ROOT, ROOT_PW) as root:
        await root.mkdirs("/a/b/c")
        await _write(root, "/a/b/f", [BLOCK, 300], replication=2)
        await root.set_quota("/a", 20, 100 * BLOCK)
        await root.set_quota("/a/b", 4, None)
        await root.create("/a/b/open", replication=3, block_size=BLOCK)  # stays open
        await add_stored_block(root, "/a/b/open", 0)
        await root.set_quota("/", 1000, None)
    await datanodes.close()
    return nn


async def _restarted(minicluster: MiniCluster, nn: NameNode) -> NameNode:
    await minicluster.stop_namenode(nn)
    # no DataNode reports to the new NameNode: let it leave safe mode at once
    return await minicluster.start_namenode(
        format_dirs=False, config=nn_config(safe_mode_threshold=0.0)
    )


@pytest.mark.parametrize("from_image", [False, True], ids=["edits", "image"])
async def test_quotas_and_usage_survive_a_restart(
    minicluster: MiniCluster, from_image: bool
) -> None:
    nn = await _populated(minicluster)
    expected = {path: _usage(nn, path) for path in ("/", "/a", "/a/b")}
    # /a/b: itself, c, f and open; f is 2 x (4096 + 300), open a whole block x 3
    assert expected["/a/b"] == (4, -1, 4, 2 * (BLOCK + 300) + 3 * BLOCK)
    assert nn.fs is not None
    dump = nn.fs.ns.canonical_dump()
    if from_image:
        async with connect(nn, ROOT, ROOT_PW) as root:
            await root.save_namespace()
    nn = await _restarted(minicluster, nn)
    assert nn.fs is not None
    assert nn.fs.ns.canonical_dump() == dump  # the quota rows hold the usage
    assert {path: _usage(nn, path) for path in expected} == expected
    async with connect(nn, ROOT, ROOT_PW) as root:
        with pytest.raises(NSQuotaExceeded):
            await root.mkdirs("/a/b/d")
        await root.mkdirs("/a/d")
        assert _usage(nn, "/a")[2] == expected["/a"][2] + 1


async def test_acknowledged_quotas_survive_kill_9(processes: ProcessGroup, tmp_path: Path) -> None:
    """A real NameNode process: quotas set and usage counted before a SIGKILL are there,
    and enforced, after it."""
    cluster = ProcessCluster(processes, tmp_path)
    await asyncio.to_thread(cluster.start_namenode)
    async with cluster.client() as client:
        await client.mkdirs("/q/a")
        await client.set_quota("/q", 3, 1 << 20)
        await client.mkdirs("/q/b")
    assert cluster.nn is not None
    cluster.nn.kill()  # SIGKILL
    await asyncio.to_thread(cluster.start_namenode)
    async with cluster.client() as client:
        summary = await client.content_summary("/q")
        assert (summary.ns_quota, summary.ds_quota, summary.directory_count) == (3, 1 << 20, 3)
        with pytest.raises(NSQuotaExceeded):
            await client.mkdirs("/q/c")
        await client.set_quota("/q", -1, None)
        await client.mkdirs("/q/c")
