"""End-to-end data path on an in-process cluster (a NameNode and three DataNodes): writes
and reads of every size class, replication, corrupt replicas, the scanner, setrep, target
failure mid-block, fsspec, fsck and the DataNode report."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.datapath.conftest import (
    BLOCK_BYTES,
    Cluster,
    digest,
    fast_config,
    flip_byte,
    payload,
    replica_files,
    replication_settled,
    start_cluster,
)
from xdfs.client.client import AsyncClient
from xdfs.config import MiB
from xdfs.errors import BlockNotFound, NotFound
from xdfs.protocol.namenode import FsckReport
from xdfs.testing.minicluster import MiniCluster
from xdfs.testing.poll import eventually

SIZES = [0, 1, 100, BLOCK_BYTES - 1, BLOCK_BYTES, BLOCK_BYTES + 1, 3 * BLOCK_BYTES + 12345]


@pytest.mark.parametrize("size", SIZES)
async def test_write_then_read_returns_the_same_bytes(cluster: Cluster, size: int) -> None:
    data = payload(size, seed=size)
    status = await cluster.client.write_file("/data/f", data, block_size=BLOCK_BYTES)
    assert status.length == size
    assert digest(await cluster.client.read_file("/data/f")) == digest(data)
    located = await cluster.client.block_locations("/data/f")
    assert len(located.blocks) == -(-size // BLOCK_BYTES)
    for block in located.blocks:
        assert len(set(block.locations)) == 2  # default replication 2, distinct nodes


async def test_random_access_reads_match_local_slices(cluster: Cluster) -> None:
    data = payload(5 * BLOCK_BYTES + 777, seed=7)
    await cluster.client.write_file("/ra", data, block_size=BLOCK_BYTES)
    reader = await cluster.client.open_read("/ra")
    for offset, size in [(0, 10), (BLOCK_BYTES - 5, 10), (2 * BLOCK_BYTES, BLOCK_BYTES),
                         (len(data) - 3, 100), (len(data), 5), (123, -1)]:
        end = len(data) if size < 0 else offset + size
        assert await reader.pread(offset, size) == data[offset:end]
    reader.seek(-10, 2)
    assert await reader.read() == data[-10:]


async def test_per_file_replication_and_setrep(cluster: Cluster) -> None:
    data = payload(2 * BLOCK_BYTES, seed=3)
    await cluster.client.write_file("/r1", data, block_size=BLOCK_BYTES, replication=1)
    located = await cluster.client.block_locations("/r1")
    assert all(len(b.locations) == 1 for b in located.blocks)
    await cluster.client.set_replication("/r1", 3)
    await eventually(lambda: replication_settled(cluster.client, "/r1"), what="replication 3")
    ids = [b.block.block_id for b in located.blocks]
    assert all(len(cluster.holders(i)) == 3 for i in ids)
    await cluster.client.set_replication("/r1", 1)
    await eventually(lambda: replication_settled(cluster.client, "/r1"), what="replication 1")

    async def excess_deleted() -> bool:
        return all(len(cluster.holders(i)) == 1 for i in ids)

    await eventually(excess_deleted, what="excess replicas deleted from disk")
    assert await cluster.client.read_file("/r1") == data


async def test_corrupt_replica_is_skipped_reported_and_replaced(cluster: Cluster) -> None:
    data = payload(BLOCK_BYTES + 10, seed=11)
    await cluster.client.write_file("/c", data, block_size=BLOCK_BYTES)
    block = (await cluster.client.block_locations("/c")).blocks[0].block
    victims = cluster.holders(block.block_id)
    assert len(victims) == 2
    flip_byte(replica_files(cluster.data_dir(victims[0]), block.block_id)[0], 100)

    def corrupt_one_gone() -> bool:
        files = replica_files(cluster.data_dir(victims[0]), block.block_id)
        return not files or files[0].read_bytes() == data[:BLOCK_BYTES]

    async def corruption_noticed() -> bool:
        # Whichever replica a read picks, the bytes are right (the bad one is skipped). A
        # read picks one of the two at random: read until one has met the corrupt replica
        # (the NameNode then lists it, or has already replaced and deleted it).
        assert await cluster.client.read_file("/c") == data
        report = await cluster.client.fsck("/c", files=True, blocks=True)
        listed = any(b.corrupt_locations for entry in report.listed for b in entry.blocks)
        return listed or corrupt_one_gone()

    await eventually(corruption_noticed, what="corrupt replica reported by a read")
    await eventually(lambda: replication_settled(cluster.client, "/c"), what="replica replaced")
    await eventually(corrupt_one_gone, what="corrupt replica deleted")
    assert len(cluster.holders(block.block_id)) == 2


async def test_scanner_finds_corruption_nobody_read(minicluster: MiniCluster) -> None:
    config = fast_config(scan_period_s=0.5, scan_bytes_per_s=64 * MiB)
    cluster = await start_cluster(minicluster, config)
    try:
        data = payload(3000, seed=5)
        await cluster.client.write_file("/s", data, block_size=BLOCK_BYTES)
        block = (await cluster.client.block_locations("/s")).blocks[0].block
        victim = cluster.holders(block.block_id)[0]
        flip_byte(replica_files(cluster.data_dir(victim), block.block_id)[0], 5)

        async def repaired() -> bool:
            files = replica_files(cluster.data_dir(victim), block.block_id)
            healthy_elsewhere = len(cluster.holders(block.block_id)) >= 2
            return healthy_elsewhere and (not files or files[0].read_bytes() == data)

        await eventually(repaired, what="scanner-found corruption repaired")
        await eventually(lambda: replication_settled(cluster.client, "/s"), what="settled")
    finally:
        await cluster.client.close()


async def test_every_replica_corrupt_fails_the_read_and_fsck_says_corrupt(
    cluster: Cluster,
) -> None:
    data = payload(500, seed=9)
    await cluster.client.write_file("/bad", data, block_size=BLOCK_BYTES)
    block = (await cluster.client.block_locations("/bad")).blocks[0].block
    for holder in cluster.holders(block.block_id):
        flip_byte(replica_files(cluster.data_dir(holder), block.block_id)[0], 0)
    with pytest.raises(BlockNotFound):
        await cluster.client.read_file("/bad")  # never the wrong bytes
    report = await eventually(
        lambda: _unhealthy(cluster.client, "/bad"), what="fsck to see the corrupt block"
    )
    assert report.corrupt_blocks == 1 or report.missing_blocks == 1


async def _unhealthy(client: AsyncClient, path: str) -> FsckReport | None:
    report = await client.fsck(path)
    return None if report.healthy else report


async def test_write_survives_a_target_stopping_mid_block(cluster: Cluster) -> None:
    data = payload(3 * BLOCK_BYTES, seed=21)
    writer = await cluster.client.open_write("/mid", block_size=2 * BLOCK_BYTES)
    await writer.write(data[:BLOCK_BYTES])  # half of the first block
    current = writer._current
    assert current is not None
    victim_address = current.located.locations[0]
    victim = next(dn for dn in cluster.mc.datanodes if dn.address == victim_address)
    await cluster.mc.stop_datanode(victim)
    await writer.write(data[BLOCK_BYTES:])
    status = await writer.close()
    assert status.length == len(data)
    assert await cluster.client.read_file("/mid") == data
    # The failed target was replaced: each block is back to two live replicas.
    await eventually(lambda: replication_settled(cluster.client, "/mid"), what="2 replicas")


async def test_deleting_a_file_deletes_its_replicas(cluster: Cluster) -> None:
    await cluster.client.write_file("/gone", payload(1000), block_size=BLOCK_BYTES)
    block_id = (await cluster.client.block_locations("/gone")).blocks[0].block.block_id
    assert len(cluster.holders(block_id)) == 2
    await cluster.client.delete("/gone", skip_trash=True)

    async def removed() -> bool:
        return not cluster.holders(block_id)

    await eventually(removed, what="replicas of a deleted file removed")


async def test_put_get_and_copy_through_the_transfer_helpers(
    cluster: Cluster, tmp_path: Path
) -> None:
    local = tmp_path / "in.bin"
    data = payload(2 * BLOCK_BYTES + 99, seed=4)
    local.write_bytes(data)
    await cluster.client.mkdirs("/up")
    written = await cluster.client.put(str(local), "/up", block_size=BLOCK_BYTES)
    assert written == ["/up/in.bin"]
    assert not await cluster.client.exists("/up/in.bin._COPYING_")
    assert await cluster.client.copy("/up/in.bin", "/up/copy.bin") == "/up/copy.bin"
    out = tmp_path / "out.bin"
    await cluster.client.get("/up/copy.bin", str(out))
    assert digest(out.read_bytes()) == digest(data)
    with pytest.raises(FileExistsError):
        await cluster.client.put(str(local), "/up/in.bin")


async def test_reading_a_missing_file_is_not_found(cluster: Cluster) -> None:
    with pytest.raises(NotFound):
        await cluster.client.read_file("/nope")


async def test_datanode_report_and_fsck_numbers(cluster: Cluster) -> None:
    await cluster.client.write_file("/d/a", payload(BLOCK_BYTES * 2), block_size=BLOCK_BYTES)
    await cluster.client.write_file("/d/b", payload(10), block_size=BLOCK_BYTES)
    report = await cluster.client.datanode_report()
    assert sorted(n.state for n in report.nodes) == ["live"] * 3
    assert sum(n.blocks for n in report.nodes) == 3 * 2  # 3 blocks x replication 2
    assert report.missing_blocks == 0 and report.capacity_bytes > 0
    fsck = await cluster.client.fsck("/d", files=True, blocks=True, locations=True)
    assert fsck.healthy and fsck.files == 2 and fsck.total_blocks == 3
    assert fsck.total_bytes == 2 * BLOCK_BYTES + 10
    assert all(len(b.locations) == 2 for f in fsck.listed for b in f.blocks)
