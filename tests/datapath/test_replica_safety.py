"""Issue 17 items 4-6 on an in-process cluster (a NameNode and two DataNodes, replication
2): replica files that vanish, corrupt replicas repaired in place when no other node can
take a copy, and the block recovery that closes files abandoned mid-block (its primary
dying half-way, the NameNode restarting in between, another writer's create)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

from tests.datapath.conftest import (
    Cluster,
    digest,
    fast_config,
    flip_byte,
    payload,
    replica_files,
    replication_settled,
    start_cluster,
)
from tests.integration.conftest import ROOT, ROOT_PW, connect
from xdfs.client.client import AsyncClient
from xdfs.common.faults import FAULTS
from xdfs.config import KiB, MiB, XdfsConfig
from xdfs.datanode.replica import Replica
from xdfs.datanode.server import DataNode
from xdfs.errors import AlreadyExists, Unavailable
from xdfs.namenode.blocks.manager import BlockManager
from xdfs.namenode.server import NameNode
from xdfs.protocol import namenode as p
from xdfs.testing.minicluster import MiniCluster
from xdfs.testing.poll import eventually

BLOCK = 4 * MiB


def _config(**namenode: Any) -> XdfsConfig:
    base = fast_config(scan_period_s=3600.0)
    return replace(base, namenode=replace(base.namenode, **namenode))


async def _two_datanodes(minicluster: MiniCluster, config: XdfsConfig) -> Cluster:
    """A NameNode and two DataNodes that can take writes (registered, block keys in)."""
    return await start_cluster(minicluster, config, datanodes=2)


@pytest.fixture
async def pair(minicluster: MiniCluster) -> AsyncIterator[Cluster]:
    made = await _two_datanodes(minicluster, _config())
    try:
        yield made
    finally:
        await made.client.close()


def _node(cluster: Cluster, node_id: str) -> DataNode:
    return next(dn for dn in cluster.mc.datanodes if dn.storage.node_id == node_id)


def _blocks(cluster: Cluster) -> BlockManager:
    fs = cluster.mc.namenodes[0].fs
    assert fs is not None
    return fs.blocks


async def _block_id(cluster: Cluster, path: str) -> int:
    return (await cluster.client.block_locations(path)).blocks[0].block.block_id


async def _written(
    cluster: Cluster, path: str, size: int, victim: int
) -> tuple[bytes, int, DataNode, Replica]:
    """A one-block file written: its data, block id, and one DataNode with its replica."""
    data = payload(size, seed=size)
    await cluster.client.write_file(path, data)
    block_id = await _block_id(cluster, path)
    node = cluster.mc.datanodes[victim]
    replica = node.storage.get(block_id)
    assert replica is not None
    return data, block_id, node, replica


# --- item 4: vanished replica files ---------------------------------------------------


@pytest.mark.parametrize("lost", ["data", "meta"])
async def test_a_read_reports_a_vanished_replica_at_once(pair: Cluster, lost: str) -> None:
    client = pair.client
    data, block_id, victim, replica = await _written(pair, "/v", 300 * KiB, victim=0)
    (replica.data_path if lost == "data" else replica.meta_path).unlink()
    # a reader that tries the victim first moves on to the other replica
    reader = await client.open_read("/v")
    reader.blocks[0].locations.sort(key=lambda address: address != victim.address)
    assert reader.blocks[0].locations[0] == victim.address
    assert digest(await reader.read()) == digest(data)
    # reported deleted at once (the directory scanner runs every 6 hours here): the
    # NameNode copies the block back to the only node without it, the victim
    await eventually(lambda: _replaced(victim, block_id, replica),
                     what="copied back to the victim")
    await eventually(lambda: replication_settled(client, "/v"), what="2 replicas")
    # the other node dies: the copy made back on the victim serves the file
    other = pair.mc.datanodes[1]
    await pair.mc.stop_datanode(other)
    assert digest(await client.read_file("/v")) == digest(data)


async def test_the_directory_scanner_drops_vanished_and_adds_unknown_replicas(
    pair: Cluster,
) -> None:
    client = pair.client
    await client.write_file("/gone", payload(1000, seed=1))
    await client.write_file("/found", payload(2000, seed=2), replication=1)
    gone_id, found_id = await _block_id(pair, "/gone"), await _block_id(pair, "/found")
    first, second = pair.mc.datanodes
    holder, other = (first, second) if first.storage.get(found_id) else (second, first)
    # a replica the other node's map does not know appears on its disk (copied by hand)
    found = holder.storage.get(found_id)
    assert found is not None
    home = other.storage.finalized / found.data_path.parent.relative_to(holder.storage.finalized)
    home.mkdir(parents=True, exist_ok=True)
    for path in (found.data_path, found.meta_path):
        (home / path.name).write_bytes(path.read_bytes())
    gone = other.storage.get(gone_id)
    assert gone is not None
    gone.meta_path.unlink()
    result = await other.directory_scanner.scan_once()
    assert result.missing == [gone_id] and result.added == [found_id]
    assert other.storage.get(gone_id) is None and not gone.data_path.exists()
    assert other.storage.get(found_id) is not None
    blocks = _blocks(pair)
    # the NameNode hears of both at once: the found replica is an excess one (replication
    # 1) and one of the two goes; the vanished one is copied back
    await eventually(lambda: len(blocks.map.replicas(found_id)) == 1
                     and not any(n.deletions for n in blocks.datanodes),
                     what="the excess replica of /found deleted")
    await eventually(lambda: replication_settled(client, "/"), what="both files healthy")
    assert (await other.directory_scanner.scan_once()).missing == []


# --- item 5: corrupt replicas repaired in place ---------------------------------------


async def test_a_corrupt_replica_on_the_only_other_node_is_repaired_in_place(
    pair: Cluster,
) -> None:
    client = pair.client
    data, block_id, victim, bad = await _written(pair, "/c", 200 * KiB, victim=1)
    flip_byte(bad.data_path, 1000)
    assert (await victim.scanner.scan_once()).corrupt == [block_id]
    # two live nodes, both hold the block: the corrupt copy is deleted, then a good one
    # is copied back to the same node
    await eventually(lambda: _replaced(victim, block_id, bad), what="repaired in place")
    await eventually(lambda: replication_settled(client, "/c"), what="2 good replicas")
    await pair.mc.stop_datanode(pair.mc.datanodes[0])
    assert digest(await client.read_file("/c")) == digest(data)


async def test_every_replica_corrupt_keeps_them_all(pair: Cluster) -> None:
    client = pair.client
    await client.write_file("/all-bad", payload(100 * KiB, seed=6))
    block_id = await _block_id(pair, "/all-bad")
    for dn in pair.mc.datanodes:
        replica = dn.storage.get(block_id)
        assert replica is not None
        flip_byte(replica.data_path, 10)
        assert (await dn.scanner.scan_once()).corrupt == [block_id]

    async def reported_corrupt() -> bool:
        report = await client.fsck("/all-bad", files=True, blocks=True)
        return report.corrupt_blocks == 1 and not report.healthy

    await eventually(reported_corrupt, what="fsck says corrupt")
    blocks = _blocks(pair)
    for _ in range(5):  # the monitor keeps deciding; nothing is ever queued for deletion
        blocks.replication_tick()
        assert not any(n.deletions or n.deleting for n in blocks.datanodes)
    assert all(replica_files(dn.data_dir, block_id) for dn in pair.mc.datanodes)
    report = await client.fsck("/all-bad", files=True, blocks=True)
    assert [b.status for f in report.listed for b in f.blocks] == ["corrupt"]


def _replaced(dn: DataNode, block_id: int, old: object) -> bool:
    replica = dn.storage.get(block_id)
    return replica is not None and replica is not old and not replica.corrupt


# --- item 6: block recovery ------------------------------------------------------------


async def _abandon_mid_block(cluster: Cluster, path: str, data: bytes) -> int:
    """Write ``data`` into a new file's first (unfinished) block on both DataNodes, then
    drop the writer as a crashed client would; returns the block id."""
    writer = await cluster.client.open_write(path, block_size=BLOCK)
    await writer.write(data)
    current = writer._current
    assert current is not None
    block_id = current.located.block.block_id

    def stored() -> bool:
        files = [dn.data_dir / "current" / "rbw" / f"blk_{block_id}"
                 for dn in cluster.mc.datanodes]
        return all(f.exists() and f.stat().st_size == len(data) for f in files)

    await eventually(stored, what="the bytes on both DataNodes")
    await writer.abort()
    return block_id


async def test_recovery_closes_the_file_with_what_the_replicas_agree_on(pair: Cluster) -> None:
    data = payload(MiB + 5000, seed=7)
    block_id = await _abandon_mid_block(pair, "/r", data)
    assert not await pair.client.recover_lease("/r")  # started: a block recovery
    await eventually(lambda: pair.client.recover_lease("/r"), what="closed")
    status = await pair.client.stat("/r")
    assert not status.under_construction and status.length == len(data)
    assert digest(await pair.client.read_file("/r")) == digest(data)
    (located,) = (await pair.client.block_locations("/r")).blocks
    assert located.block.block_id == block_id and len(located.locations) == 2
    for dn in pair.mc.datanodes:  # finalized with the new genstamp, nothing left in rbw
        replica = dn.storage.get(block_id)
        assert replica is not None and replica.finalized
        assert replica.record == located.block
        assert replica_files(dn.data_dir, block_id) and not dn.storage.rbw_records()
    # durable: a restarted NameNode has the file closed with the recovered block
    await pair.mc.stop_namenode(pair.mc.namenodes[0])
    again = await pair.mc.start_namenode(format_dirs=False, config=pair.config)
    assert again.fs is not None and again.fs.ns.get_blocks("/r") == (located.block,)
    assert not again.fs.ns.stat("/r").under_construction
    assert again.fs.ns.next_genstamp > located.block.genstamp


async def test_a_primary_dying_mid_recovery_is_replaced(pair: Cluster) -> None:
    data = payload(700 * KiB, seed=8)
    block_id = await _abandon_mid_block(pair, "/p", data)
    fired = asyncio.Event()

    def die(_name: str) -> None:
        fired.set()
        raise Unavailable("the primary died before it committed")

    with FAULTS.armed("datanode.recovery_before_commit", die, times=1):
        assert not await pair.client.recover_lease("/p")
        await asyncio.wait_for(fired.wait(), 30)
    first = _blocks(pair).recoveries.current(block_id)
    assert first is not None
    primary = _node(pair, first.primary)
    await pair.mc.stop_datanode(primary)  # it had finalized the replicas, not committed
    await eventually(lambda: pair.client.recover_lease("/p"), timeout_s=60,
                     what="recovered by the other DataNode")
    (located,) = (await pair.client.block_locations("/p")).blocks
    assert located.block.genstamp > first.genstamp  # a new attempt, a new genstamp
    assert located.block.num_bytes == len(data)
    assert digest(await pair.client.read_file("/p")) == digest(data)
    # the dead primary comes back with the first attempt's replica: stale, deleted, copied
    namenode = pair.mc.namenodes[0].address
    await pair.mc.start_datanode(primary.data_dir.name, namenode, config=pair.config)
    await eventually(lambda: replication_settled(pair.client, "/p"), timeout_s=60,
                     what="2 replicas with the new genstamp")
    for dn in pair.mc.datanodes:
        replica = dn.storage.get(block_id)
        assert replica is not None and replica.record == located.block


async def test_rbw_replicas_survive_a_namenode_restart(minicluster: MiniCluster) -> None:
    config = _config()
    cluster = await _two_datanodes(minicluster, config)
    try:
        data = payload(MiB, seed=9)
        block_id = await _abandon_mid_block(cluster, "/n", data)
        nn = cluster.mc.namenodes[0]
        host, port = nn.address.rsplit(":", 1)
        await minicluster.stop_namenode(nn)
        # a new NameNode on the same address: it never saw the block's targets, only the
        # rbw replicas the DataNodes report to it
        again = NameNode(config, [d.root for d in nn.dirs])
        await again.start(host, int(port))
        minicluster.namenodes.append(again)
        assert again.fs is not None
        block_map = again.fs.blocks.map
        await eventually(lambda: len(block_map.rbw_replicas(block_id)) == 2,
                         what="both rbw replicas reported", timeout_s=60)
        async with connect(again, ROOT, ROOT_PW) as client:
            await eventually(lambda: _out_of_safe_mode(client), what="out of safe mode")
            await eventually(lambda: client.recover_lease("/n"), timeout_s=60, what="closed")
            assert digest(await client.read_file("/n")) == digest(data)
    finally:
        await cluster.client.close()


async def _out_of_safe_mode(client: AsyncClient) -> bool:
    return not (await client.safe_mode("get")).on


async def test_create_after_the_soft_limit_starts_recovery(minicluster: MiniCluster) -> None:
    config = _config(lease_soft_limit_s=0.5)
    cluster = await _two_datanodes(minicluster, config)
    try:
        data = payload(300 * KiB, seed=10)
        await _abandon_mid_block(cluster, "/s", data)
        async with connect(cluster.mc.namenodes[0], ROOT, ROOT_PW) as other:

            async def refused_with_recovery() -> bool:
                try:
                    await other.create("/s")
                except AlreadyExists as exc:
                    return "recovery started" in exc.message
                except Exception:  # LeaseError until the soft limit passes
                    return False
                raise AssertionError("create of an existing file succeeded")

            await eventually(refused_with_recovery, what="create past the soft limit")
            await eventually(lambda: _closed(other, "/s"), what="recovered")
            assert digest(await other.read_file("/s")) == digest(data)
    finally:
        await cluster.client.close()


async def _closed(client: AsyncClient, path: str) -> bool:
    return not (await client.stat(path)).under_construction


async def test_a_last_block_that_never_got_a_byte_is_dropped(pair: Cluster) -> None:
    client = pair.client
    await client.create("/no-bytes")
    request = p.AddBlockRequest("/no-bytes", client.client_name)
    located = await client.rpc.call(p.ADD_BLOCK, request)
    assert len(located.locations) == 2  # sent there, but the writer died before a byte
    assert not await client.recover_lease("/no-bytes")  # its targets are asked
    await eventually(lambda: client.recover_lease("/no-bytes"), what="closed")
    status = await client.stat("/no-bytes")
    assert status.length == 0 and not status.under_construction
    assert (await client.block_locations("/no-bytes")).blocks == []
