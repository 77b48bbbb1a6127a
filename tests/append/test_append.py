"""Append, hflush, truncate and concat on an in-process cluster, with HDFS semantics: a
partial last block is continued where it is under a new generation stamp, hflushed bytes
are visible to new readers while the writer goes on, a truncate inside a block recovers
the block to the new length, concat moves blocks."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.datapath.conftest import BLOCK_BYTES, Cluster, payload, replication_settled
from tests.integration.conftest import connect
from xdfs.errors import (
    AccessDenied,
    BlockNotFound,
    InvalidArgument,
    LeaseError,
    NotFound,
    RecoveryInProgress,
)
from xdfs.protocol.blocks import BlockRecord
from xdfs.protocol.datanode import WRITE_BLOCK, WriteBlockRequest
from xdfs.testing.poll import eventually


async def _closed(cluster: Cluster, path: str) -> bool:
    return not (await cluster.client.stat(path)).under_construction


async def test_append_continues_a_partial_block_under_a_new_genstamp(cluster: Cluster) -> None:
    client = cluster.client
    first = payload(BLOCK_BYTES + 1000, seed=1)
    await client.write_file("/a/f", first, block_size=BLOCK_BYTES)
    before = (await client.block_locations("/a/f")).blocks
    writer = await client.append("/a/f")
    more = payload(BLOCK_BYTES, seed=2)  # fills the partial block and starts a third one
    await writer.write(more)
    status = await writer.close()
    assert status.length == len(first) + len(more)
    assert await client.read_file("/a/f") == first + more
    after = (await client.block_locations("/a/f")).blocks
    assert [b.block.block_id for b in after[:2]] == [b.block.block_id for b in before]
    assert after[1].block.genstamp > before[1].block.genstamp
    assert after[1].block.num_bytes == BLOCK_BYTES
    assert len(after) == 3


async def test_append_to_full_last_block_and_to_empty_file(cluster: Cluster) -> None:
    client = cluster.client
    whole = payload(BLOCK_BYTES, seed=3)
    await client.write_file("/a/full", whole, block_size=BLOCK_BYTES)
    writer = await client.append("/a/full")
    await writer.write(b"tail")
    await writer.close()
    assert await client.read_file("/a/full") == whole + b"tail"
    assert len((await client.block_locations("/a/full")).blocks) == 2
    await client.touchz("/a/empty")
    writer = await client.append("/a/empty")
    await writer.write(b"first bytes")
    await writer.close()
    assert await client.read_file("/a/empty") == b"first bytes"


async def test_appending_many_times_keeps_every_byte(cluster: Cluster) -> None:
    client = cluster.client
    await client.write_file("/a/log", b"", block_size=BLOCK_BYTES)
    expected = b""
    for round_ in range(6):
        chunk = payload(7777 * (round_ + 1), seed=10 + round_)
        writer = await client.append("/a/log")
        await writer.write(chunk)
        await writer.close()
        expected += chunk
        assert await client.read_file("/a/log") == expected


async def test_hflush_makes_bytes_visible_to_new_readers(cluster: Cluster) -> None:
    client = cluster.client
    writer = await client.open_write("/a/h", block_size=BLOCK_BYTES)
    part1 = payload(5000, seed=4)
    await writer.write(part1)
    await writer.hflush()
    assert await client.read_file("/a/h") == part1  # a new reader sees it, file still open
    assert (await client.stat("/a/h")).under_construction
    part2 = payload(BLOCK_BYTES, seed=5)  # continues the flushed block, crosses into another
    await writer.write(part2)
    # while the block is continued, a new reader still sees what was flushed
    assert (await client.read_file("/a/h"))[: len(part1)] == part1
    await writer.hflush()
    assert await client.read_file("/a/h") == part1 + part2
    await writer.write(b"end")
    await writer.close()
    assert await client.read_file("/a/h") == part1 + part2 + b"end"


async def test_append_refuses_open_files_and_directories(cluster: Cluster) -> None:
    client = cluster.client
    writer = await client.open_write("/a/open")
    await writer.write(b"x")
    with pytest.raises(LeaseError):
        await (await client.append("/a/open")).close()
    await writer.close()
    await client.mkdirs("/a/dir")
    with pytest.raises(IsADirectoryError):
        await client.append("/a/dir")
    with pytest.raises(NotFound):
        await client.append("/a/missing")


async def test_truncate_at_a_block_boundary_is_done_at_once(cluster: Cluster) -> None:
    client = cluster.client
    data = payload(2 * BLOCK_BYTES + 10, seed=6)
    await client.write_file("/t/f", data, block_size=BLOCK_BYTES)
    assert await client.truncate("/t/f", BLOCK_BYTES) is True
    status = await client.stat("/t/f")
    assert status.length == BLOCK_BYTES and not status.under_construction
    assert await client.read_file("/t/f") == data[:BLOCK_BYTES]
    assert await client.truncate("/t/f", BLOCK_BYTES) is True  # same length: nothing to do
    assert await client.truncate("/t/f", 0) is True
    assert await client.read_file("/t/f") == b""


async def test_truncate_inside_a_block_recovers_it_then_append_continues(
    cluster: Cluster,
) -> None:
    client = cluster.client
    data = payload(BLOCK_BYTES + 5000, seed=7)
    await client.write_file("/t/p", data, block_size=BLOCK_BYTES)
    old = (await client.block_locations("/t/p")).blocks[1].block
    assert await client.truncate("/t/p", BLOCK_BYTES + 1234) is False
    assert (await client.stat("/t/p")).under_construction
    with pytest.raises(RecoveryInProgress):
        await client.append("/t/p")
    await eventually(lambda: _closed(cluster, "/t/p"), what="truncate recovery")
    assert await client.read_file("/t/p") == data[: BLOCK_BYTES + 1234]
    new = (await client.block_locations("/t/p")).blocks[1].block
    assert new.block_id == old.block_id and new.genstamp > old.genstamp
    assert new.num_bytes == 1234
    writer = await client.append("/t/p")
    await writer.write(b"after")
    await writer.close()
    assert await client.read_file("/t/p") == data[: BLOCK_BYTES + 1234] + b"after"


async def test_truncate_refuses_bad_lengths(cluster: Cluster) -> None:
    client = cluster.client
    await client.write_file("/t/s", b"12345")
    with pytest.raises(InvalidArgument):
        await client.truncate("/t/s", 6)
    with pytest.raises(InvalidArgument):
        await client.truncate("/t/s", -1)
    assert await client.read_file("/t/s") == b"12345"


async def test_concat_moves_blocks_and_deletes_sources(cluster: Cluster) -> None:
    client = cluster.client
    parts = [payload(BLOCK_BYTES + 100 * i, seed=20 + i) for i in range(3)]
    for index, data in enumerate(parts):
        await client.write_file(f"/c/p{index}", data, block_size=BLOCK_BYTES)
    await client.concat("/c/p0", ["/c/p1", "/c/p2"])
    assert await client.read_file("/c/p0") == b"".join(parts)
    assert not await client.exists("/c/p1") and not await client.exists("/c/p2")
    assert (await client.stat("/c/p0")).length == sum(map(len, parts))


async def test_concat_preconditions_change_nothing(cluster: Cluster) -> None:
    client = cluster.client
    await client.write_file("/c2/t", b"target", block_size=BLOCK_BYTES)
    await client.write_file("/c2/s", b"source", block_size=BLOCK_BYTES)
    await client.write_file("/c2/other-size", b"x", block_size=2 * BLOCK_BYTES)
    await client.write_file("/elsewhere/s", b"y", block_size=BLOCK_BYTES)
    for sources in (["/c2/s", "/c2/s"], ["/c2/t"], ["/c2/other-size"], ["/elsewhere/s"], []):
        with pytest.raises(InvalidArgument):
            await client.concat("/c2/t", sources)
    with pytest.raises(NotFound):
        await client.concat("/c2/t", ["/c2/missing"])
    assert await client.read_file("/c2/t") == b"target"
    assert await client.read_file("/c2/s") == b"source"


async def test_readers_see_the_flushed_part_while_a_block_is_continued(
    cluster: Cluster,
) -> None:
    """Between hflushes the DataNodes hold the block open (rbw, growing): a new reader
    reads the part flushed before, verified against its old checksums."""
    client = cluster.client
    writer = await client.open_write("/a/live", block_size=BLOCK_BYTES)
    flushed = payload(3000, seed=8)
    await writer.write(flushed)
    await writer.hflush()
    await writer.write(payload(2000, seed=9))  # the block is continued, not finished
    continued = writer._current
    assert continued is not None
    block_id = continued.located.block.block_id

    def appending() -> bool:
        replicas = [dn.storage.get(block_id) for dn in cluster.mc.datanodes]
        return sum(r is not None and r.appending for r in replicas) == len(continued.uploads)

    await eventually(appending, what="every replica reopened for the continued block")
    assert await client.read_file("/a/live") == flushed
    await writer.close()
    assert len(await client.read_file("/a/live")) == 5000


async def test_namenode_restart_replays_append_truncate_and_concat(cluster: Cluster) -> None:
    client = cluster.client
    await client.write_file("/r/a", payload(BLOCK_BYTES + 10, seed=30), block_size=BLOCK_BYTES)
    await client.write_file("/r/b", payload(500, seed=31), block_size=BLOCK_BYTES)
    writer = await client.append("/r/a")
    await writer.write(b"appended")
    await writer.close()
    await client.concat("/r/a", ["/r/b"])
    assert await client.truncate("/r/a", BLOCK_BYTES) is True
    await client.write_file("/r/c", payload(900, seed=32), block_size=BLOCK_BYTES)
    assert await client.truncate("/r/c", 100) is False
    await eventually(lambda: _closed(cluster, "/r/c"), what="truncate recovery")
    nn = cluster.mc.namenodes[0]
    assert nn.fs is not None
    dump = nn.fs.ns.canonical_dump()
    await client.close()
    await cluster.mc.stop_namenode(nn)
    restarted = await cluster.mc.start_namenode(format_dirs=False, config=cluster.config)
    assert restarted.fs is not None
    assert restarted.fs.ns.canonical_dump() == dump


async def test_concatenated_blocks_take_the_targets_replication(cluster: Cluster) -> None:
    client = cluster.client
    await client.write_file("/c3/t", payload(1000, seed=40), replication=3,
                            block_size=BLOCK_BYTES)
    await client.write_file("/c3/s", payload(2000, seed=41), replication=1,
                            block_size=BLOCK_BYTES)
    await client.concat("/c3/t", ["/c3/s"])
    await eventually(lambda: replication_settled(client, "/c3/t"), what="3 replicas each")
    located = (await client.block_locations("/c3/t")).blocks
    assert [len(b.locations) for b in located] == [3, 3]


async def test_truncate_into_a_middle_block_drops_the_rest(cluster: Cluster) -> None:
    client = cluster.client
    data = payload(3 * BLOCK_BYTES, seed=50)
    await client.write_file("/t/m", data, block_size=BLOCK_BYTES)
    assert await client.truncate("/t/m", BLOCK_BYTES + 7) is False
    await eventually(lambda: _closed(cluster, "/t/m"), what="truncate recovery")
    assert await client.read_file("/t/m") == data[: BLOCK_BYTES + 7]
    assert [b.block.num_bytes for b in (await client.block_locations("/t/m")).blocks] == [
        BLOCK_BYTES, 7,
    ]


async def test_append_truncate_concat_need_write_permission(cluster: Cluster) -> None:
    client = cluster.client
    await client.add_user("alice", "alice-pw")
    await client.mkdirs("/p")
    await client.set_permission("/p", 0o777)
    for name in ("f", "g"):
        await client.write_file(f"/p/{name}", b"root's", mode=0o644)
    alice = connect(cluster.mc.namenodes[0], "alice", "alice-pw")
    async with alice:
        with pytest.raises(AccessDenied):
            await alice.append("/p/f")
        with pytest.raises(AccessDenied):
            await alice.truncate("/p/f", 1)
        with pytest.raises(AccessDenied):
            await alice.concat("/p/f", ["/p/g"])
    assert await client.read_file("/p/f") == b"root's"
    assert await client.read_file("/p/g") == b"root's"
    assert not (await client.stat("/p/f")).under_construction


async def test_a_datanode_continues_only_the_replica_the_token_is_for(cluster: Cluster) -> None:
    """An append stream names the replica it continues: another block (whose token the
    writer lacks), or a replica that moved on, is refused and left as it was."""
    client = cluster.client
    await client.write_file("/a/x", b"x" * 100, replication=3)
    await client.write_file("/a/y", b"y" * 100, replication=3)
    x = (await client.block_locations("/a/x")).blocks[0]
    y = (await client.block_locations("/a/y")).blocks[0]
    address = x.locations[0]
    node = next(dn for dn in cluster.mc.datanodes if dn.address == address)
    rpc = client.datanodes.get(address)
    fs = cluster.mc.namenodes[0].fs
    assert fs is not None
    token = fs.blocks.block_token("root", x.block.block_id, "w")  # a writer's, for x only

    async def chunks() -> AsyncIterator[bytes]:
        yield b"intruder"

    for target, append_to, error in (
        (x.block, y.block, InvalidArgument),  # x's token, y's replica
        (x.block, BlockRecord(x.block.block_id, x.block.genstamp, 99), BlockNotFound),
    ):
        request = WriteBlockRequest(target, token, "t", append_to)
        with pytest.raises(error):
            await rpc.upload(WRITE_BLOCK, request, chunks())
    assert node.storage.get(y.block.block_id) is not None
    assert await client.read_file("/a/x") == b"x" * 100
    assert await client.read_file("/a/y") == b"y" * 100


async def test_lease_recovery_after_hflush_keeps_the_flushed_bytes_readable(
    cluster: Cluster,
) -> None:
    """The writer goes away while continuing an hflushed block: the NameNode may still
    believe the replicas finalized at the flushed length, but they were reopened, so only
    a block recovery may close the file (a close at once would name replicas that are no
    longer there)."""
    client = cluster.client
    writer = await client.open_write("/a/gone", block_size=BLOCK_BYTES, replication=3)
    flushed = payload(6000, seed=60)
    await writer.write(flushed)
    await writer.hflush()
    await writer.write(payload(1000, seed=61))
    await writer.abort()  # the streams break: the replicas are kept in rbw
    assert await client.recover_lease("/a/gone") is False  # a block recovery, not a close
    await eventually(lambda: client.recover_lease("/a/gone"), what="lease recovered")
    data = await client.read_file("/a/gone")
    assert data[: len(flushed)] == flushed and len(data) in (6000, 7000)
