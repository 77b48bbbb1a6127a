"""The DataNode's data path over real sockets, against a stub NameNode: block writes and
reads, block tokens, failed and cut uploads, corruption found by reads and by the scanner."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

import crc32c
import pytest

from tests.integration.dn_helpers import (
    GUARD_S,
    StubNameNode,
    dn_client,
    dn_config,
    flip_byte,
    make_token,
    new_key,
    read_block,
    replica_files,
    start_registered,
    start_stub,
    write_block,
)
from tests.rpc.wire import raw_peer
from xdfs.datanode.server import DataNode
from xdfs.errors import (
    AccessDenied,
    AlreadyExists,
    AuthenticationFailed,
    BlockNotFound,
    ChecksumError,
    ConnectionLost,
    CorruptReplica,
    InvalidArgument,
    TokenExpired,
    Unavailable,
    WrongCluster,
    XdfsError,
)
from xdfs.protocol.blocks import BlockRecord
from xdfs.protocol.datanode import (
    DATANODE_INFO,
    READ_BLOCK,
    WRITE_BLOCK,
    HeartbeatResponse,
    ReadBlockRequest,
    WriteBlockRequest,
)
from xdfs.rpc.client import RpcClient
from xdfs.rpc.messages import Chunk, Empty, Kind, Tail
from xdfs.testing.minicluster import MiniCluster
from xdfs.testing.poll import eventually

KiB = 1024
MiB = 1024 * KiB
CHUNK = 4 * KiB


@pytest.fixture
async def stub(minicluster: MiniCluster) -> StubNameNode:
    return await start_stub(minicluster)


@pytest.fixture
async def dn(minicluster: MiniCluster, stub: StubNameNode) -> DataNode:
    return await start_registered(minicluster, stub, config=dn_config(checksum_chunk_bytes=CHUNK))


@pytest.fixture
def client(minicluster: MiniCluster, dn: DataNode) -> RpcClient:
    return dn_client(minicluster, dn)


async def put(
    client: RpcClient, stub: StubNameNode, block_id: int, data: bytes, genstamp: int = 1
) -> BlockRecord:
    response = await write_block(
        client, BlockRecord(block_id, genstamp, 0), data, stub.token(block_id)
    )
    return response.block


@pytest.mark.parametrize(
    "size", [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * MiB + 17], ids=lambda s: f"{s}B"
)
async def test_write_then_read_round_trip_with_ranges(
    client: RpcClient, stub: StubNameNode, dn: DataNode, size: int
) -> None:
    data = os.urandom(size)
    record = await put(client, stub, 100 + size, data)
    assert record == BlockRecord(100 + size, 1, size)
    # The NameNode heard of the replica before the writer got its answer.
    assert record in stub.received(dn.storage.node_id)
    token = stub.token(record.block_id, "r")
    head, got = await read_block(client, record, token)
    assert (head.block, head.offset, head.length) == (record, 0, size)
    assert got == data
    ranges = {(0, 0), (0, size), (size, 0), (size // 2, -1), (size // 3, size // 3),
              (max(0, size - 1), -1), (min(size, CHUNK - 3), min(size - min(size, CHUNK - 3), 7))}
    for offset, length in sorted(ranges):
        head, got = await read_block(client, record, token, offset, length)
        expected = data[offset:] if length == -1 else data[offset : offset + length]
        assert (head.offset, head.length, got) == (offset, len(expected), expected)


async def test_stream_pieces_need_not_align_with_checksum_chunks(
    client: RpcClient, stub: StubNameNode
) -> None:
    data = os.urandom(5 * CHUNK + 99)
    response = await write_block(client, BlockRecord(7, 3, 0), data, stub.token(7), 1000)
    assert response.block.num_bytes == len(data)
    assert (await read_block(client, response.block, stub.token(7)))[1] == data


async def test_bad_ranges_and_unknown_blocks(client: RpcClient, stub: StubNameNode) -> None:
    record = await put(client, stub, 8, b"x" * 100)
    token = stub.token(8, "r")
    for offset, length in [(101, -1), (0, 101), (50, 51), (-1, 1), (0, -2)]:
        with pytest.raises(InvalidArgument):
            await read_block(client, record, token, offset, length)
    with pytest.raises(BlockNotFound):
        await read_block(client, BlockRecord(8, 2, 100), token)  # other genstamp
    with pytest.raises(BlockNotFound):
        await read_block(client, BlockRecord(9, 1, 100), stub.token(9, "r"))


async def test_repeated_write_of_a_finalized_block_is_idempotent(
    client: RpcClient, stub: StubNameNode, dn: DataNode
) -> None:
    record = await put(client, stub, 10, b"first copy")
    again = await put(client, stub, 10, b"other bytes, ignored")
    assert again == record
    assert (await read_block(client, record, stub.token(10)))[1] == b"first copy"
    newer = await put(client, stub, 10, b"generation two", genstamp=2)
    assert newer == BlockRecord(10, 2, 14)
    with pytest.raises(InvalidArgument, match="older"):
        await put(client, stub, 10, b"stale", genstamp=1)
    assert (await read_block(client, newer, stub.token(10)))[1] == b"generation two"
    assert replica_files(dn.data_dir)["finalized"] == [
        "subdir0/subdir0/blk_10", "subdir0/subdir0/blk_10_2.meta"
    ]


async def test_block_tokens_are_required_and_checked(
    client: RpcClient, stub: StubNameNode
) -> None:
    block = BlockRecord(20, 1, 0)
    cases: list[tuple[str, type[XdfsError]]] = [
        ("", AccessDenied),
        (make_token(new_key(), 20), AuthenticationFailed),  # forged: an unknown key
        (make_token(new_key(key_id=stub.key.key_id), 20), AuthenticationFailed),  # wrong secret
        ("not.a-token", AuthenticationFailed),
        (stub.token(20, lifetime_s=-1), TokenExpired),
        (stub.token(21), AccessDenied),  # another block
        (stub.token(20, "r"), AccessDenied),  # read-only token cannot write
    ]
    for token, error in cases:
        with pytest.raises(error):
            await write_block(client, block, b"data", token)
    record = await put(client, stub, 20, b"data")
    for token, error in cases[:-1]:
        with pytest.raises(error):
            await read_block(client, record, token)
    assert (await read_block(client, record, stub.token(20, "r")))[1] == b"data"
    assert (await read_block(client, record, stub.token(20, "w")))[1] == b"data"


async def test_writes_are_refused_before_registration(minicluster: MiniCluster) -> None:
    stub = await start_stub(minicluster)
    stub.failures["register_datanode"] = [Unavailable("not yet")] * 1000
    node = await minicluster.start_datanode("dn0", stub.address)
    client = dn_client(minicluster, node)
    with pytest.raises(Unavailable, match="no block keys"):
        await write_block(client, BlockRecord(1, 1, 0), b"x", stub.token(1))
    info = await client.call(DATANODE_INFO, Empty())
    assert (info.registered, info.cluster_id, info.blocks) == (False, "", 0)


async def test_datanode_info(client: RpcClient, stub: StubNameNode, dn: DataNode) -> None:
    await put(client, stub, 30, b"abc")
    info = await client.call(DATANODE_INFO, Empty())
    assert info.node_id == dn.storage.node_id
    assert (info.cluster_id, info.address, info.blocks, info.registered) == (
        "CID-stub", dn.address, 1, True
    )
    assert info.storage.used_bytes == 3 + 16 + 4
    assert info.storage.capacity_bytes >= info.storage.free_bytes > 0


async def test_client_of_another_cluster_is_refused(
    minicluster: MiniCluster, dn: DataNode
) -> None:
    with pytest.raises(WrongCluster):
        await dn_client(minicluster, dn, cluster_id="CID-other").call(DATANODE_INFO, Empty())
    info = await dn_client(minicluster, dn, cluster_id="CID-stub").call(DATANODE_INFO, Empty())
    assert info.cluster_id == "CID-stub"


async def test_concurrent_write_of_one_block_is_refused(
    client: RpcClient, stub: StubNameNode, dn: DataNode
) -> None:
    release = asyncio.Event()

    async def slow() -> AsyncIterator[bytes]:
        yield b"a" * 1000
        await release.wait()
        yield b"b" * 1000

    first = asyncio.ensure_future(
        client.upload(WRITE_BLOCK, WriteBlockRequest(BlockRecord(40, 1, 0), stub.token(40)),
                      slow())
    )
    await eventually(lambda: dn.storage.is_busy(40))
    with pytest.raises(AlreadyExists):
        await put(client, stub, 40, b"second")
    release.set()
    assert (await first).block == BlockRecord(40, 1, 2000)


def _chunk(seq: int, data: bytes, crc: int | None = None) -> Chunk:
    return Chunk(seq, crc32c.crc32c(data) if crc is None else crc, memoryview(data))


def rbw_size(node: DataNode, block_id: int) -> int:
    path = node.data_dir / "current" / "rbw" / f"blk_{block_id}"
    return path.stat().st_size if path.exists() else 0


async def _kept_in_rbw(stub: StubNameNode, dn: DataNode, block_id: int, num_bytes: int) -> None:
    """The write of ``block_id`` broke: its bytes stay in state rbw (never finalized),
    checksummed, readable as they are, and reported to the NameNode as rbw."""
    await eventually(lambda: not dn.storage.is_busy(block_id))
    kept = dn.storage.get(block_id)
    assert kept is not None and not kept.finalized and kept.num_bytes == num_bytes
    assert replica_files(dn.data_dir)["finalized"] == []
    assert kept.record not in dn.storage.report_records()
    assert dn.storage.rbw_records() == [kept.record]
    await eventually(lambda: kept.record in stub.rbw(dn.storage.node_id))
    assert dn.transfers.count == 0


async def test_chunk_with_a_bad_crc_keeps_only_the_good_bytes_in_rbw(
    stub: StubNameNode, dn: DataNode
) -> None:
    async with raw_peer(dn.address) as peer:
        await peer.hello(client_name="raw")
        peer.send(Kind.HEAD, 1, WRITE_BLOCK.name, WriteBlockRequest(BlockRecord(50, 1, 0),
                                                                    stub.token(50)))
        peer.send(Kind.CHUNK, 1, "", _chunk(0, b"a" * 5000))
        await peer.writer.drain()
        await eventually(lambda: rbw_size(dn, 50) == 5000)
        peer.send(Kind.CHUNK, 1, "", _chunk(1, b"b" * 5000, crc=1234))
        peer.send(Kind.TAIL, 1, "", Tail(2, 10000))
        call_id, error = await peer.recv_error()
    assert call_id == 1 and isinstance(error, ChecksumError)
    await _kept_in_rbw(stub, dn, 50, 5000)


async def test_upload_cut_mid_stream_keeps_its_bytes_in_rbw(
    client: RpcClient, stub: StubNameNode, dn: DataNode
) -> None:
    async with raw_peer(dn.address) as peer:
        await peer.hello(client_name="raw")
        peer.send(Kind.HEAD, 1, WRITE_BLOCK.name, WriteBlockRequest(BlockRecord(51, 1, 0),
                                                                    stub.token(51)))
        for seq in range(3):
            peer.send(Kind.CHUNK, 1, "", _chunk(seq, os.urandom(100_000)))
        await peer.writer.drain()
        await eventually(lambda: dn.storage.is_busy(51))
        await eventually(lambda: any(dn.data_dir.joinpath("current", "rbw").iterdir()))
        await eventually(lambda: rbw_size(dn, 51) == 300_000)
    # The connection closed without a tail: what arrived is kept, never finalized.
    await _kept_in_rbw(stub, dn, 51, 300_000)
    # a new write of the block replaces the partial replica
    assert (await put(client, stub, 51, b"whole")).num_bytes == 5
    again = dn.storage.get(51)
    assert again is not None and again.finalized and dn.storage.rbw_records() == []
    assert replica_files(dn.data_dir)["rbw"] == []


async def test_client_cancelling_its_upload_keeps_what_it_sent(
    client: RpcClient, stub: StubNameNode, dn: DataNode
) -> None:
    async def source() -> AsyncIterator[bytes]:
        yield os.urandom(100_000)
        await asyncio.sleep(GUARD_S * 10)  # cancelled long before

    upload = asyncio.ensure_future(
        client.upload(WRITE_BLOCK, WriteBlockRequest(BlockRecord(52, 1, 0), stub.token(52)),
                      source())
    )
    await eventually(lambda: dn.storage.is_busy(52))
    await eventually(lambda: rbw_size(dn, 52) == 100_000)
    upload.cancel()
    with pytest.raises(asyncio.CancelledError):
        await upload
    await _kept_in_rbw(stub, dn, 52, 100_000)
    # The connection still serves.
    assert (await put(client, stub, 53, b"ok")).num_bytes == 2


async def test_flipped_byte_fails_the_read_and_is_reported(
    client: RpcClient, stub: StubNameNode, dn: DataNode
) -> None:
    data = os.urandom(10 * CHUNK)
    record = await put(client, stub, 60, data)
    replica = dn.storage.get(60)
    assert replica is not None
    flip_byte(replica.data_path, 7 * CHUNK + 1)
    token = stub.token(60, "r")
    # A range before the damage still reads; one over it fails.
    assert (await read_block(client, record, token, 0, 2 * CHUNK))[1] == data[: 2 * CHUNK]
    with pytest.raises(CorruptReplica):
        await read_block(client, record, token)
    await eventually(lambda: stub.bad)
    assert [(b.block_id, b.address) for b in stub.bad] == [(60, dn.address)]
    # Excluded from reads from now on, and reported only once.
    with pytest.raises(BlockNotFound):
        await read_block(client, record, token)
    assert len(stub.bad) == 1
    assert record not in dn.storage.report_records()


async def test_corrupt_checksum_file_is_detected_too(
    client: RpcClient, stub: StubNameNode, dn: DataNode
) -> None:
    record = await put(client, stub, 61, os.urandom(3 * CHUNK))
    replica = dn.storage.get(61)
    assert replica is not None
    flip_byte(replica.meta_path, 16 + 4)  # the second chunk's CRC
    with pytest.raises(CorruptReplica):
        await read_block(client, record, stub.token(61, "r"))
    await eventually(lambda: stub.bad)


async def test_scanner_finds_corruption_nobody_read(
    client: RpcClient, stub: StubNameNode, dn: DataNode
) -> None:
    records = [await put(client, stub, 70 + i, os.urandom(2 * CHUNK + i)) for i in range(3)]
    clean = await dn.scanner.scan_once()
    assert (clean.replicas, clean.corrupt) == (3, [])
    assert clean.bytes == sum(r.num_bytes for r in records)
    replica = dn.storage.get(71)
    assert replica is not None
    flip_byte(replica.data_path, replica.num_bytes - 1)  # the last, partial chunk
    result = await dn.scanner.scan_once()
    assert result.corrupt == [71]
    await eventually(lambda: stub.bad)
    assert [(b.block_id, b.address) for b in stub.bad] == [(71, dn.address)]
    # A known-bad replica is skipped by later passes and not reported again.
    assert (await dn.scanner.scan_once()).replicas == 2
    assert len(stub.bad) == 1
    with pytest.raises(BlockNotFound):
        await read_block(client, records[1], stub.token(71, "r"))


async def test_paced_scan_reads_everything(
    minicluster: MiniCluster, stub: StubNameNode
) -> None:
    node = await start_registered(
        minicluster, stub, config=dn_config(scan_bytes_per_s=4 * MiB, checksum_chunk_bytes=CHUNK)
    )
    client = dn_client(minicluster, node)
    await put(client, stub, 80, os.urandom(MiB))
    result = await node.scanner.scan_once(paced=True)
    assert (result.replicas, result.bytes, result.corrupt) == (1, MiB, [])


async def test_reader_survives_the_replica_being_deleted(
    client: RpcClient, stub: StubNameNode, dn: DataNode
) -> None:
    data = os.urandom(2 * MiB)
    record = await put(client, stub, 90, data)
    stream = await client.download(READ_BLOCK, ReadBlockRequest(record, stub.token(90, "r")))
    first = bytes(await stream.__anext__())
    stub.commands[dn.storage.node_id] = [HeartbeatResponse(delete=[90])]
    await eventually(lambda: 90 in stub.deleted(dn.storage.node_id))
    rest = await stream.read_all()
    assert first + rest == data
    assert dn.transfers.count == 0


async def test_server_stop_keeps_writes_in_progress_in_rbw(
    minicluster: MiniCluster, stub: StubNameNode
) -> None:
    node = await start_registered(minicluster, stub, "dn-stop")
    client = dn_client(minicluster, node)

    async def endless() -> AsyncIterator[bytes]:
        while True:
            yield b"z" * 65536

    upload = asyncio.ensure_future(
        client.upload(WRITE_BLOCK, WriteBlockRequest(BlockRecord(95, 1, 0), stub.token(95)),
                      endless())
    )
    await eventually(lambda: node.storage.is_busy(95))
    await eventually(lambda: rbw_size(node, 95) > 0)
    await minicluster.stop_datanode(node)
    with pytest.raises((ConnectionLost, Unavailable, XdfsError)):
        await upload
    assert replica_files(node.data_dir)["finalized"] == []
    # what it had written is whole (checksummed and synced): the restart keeps it in rbw
    # and reports it as such
    before = len(stub.reports)
    again = await minicluster.start_datanode("dn-stop", stub.address)
    kept = again.storage.get(95)
    assert kept is not None and not kept.finalized and kept.num_bytes % 65536 == 0
    await eventually(lambda: [b for r in stub.reports[before:] for b in r.rbw] == [kept.record])



async def test_a_corrupt_replica_is_replaced_by_a_new_copy(
    client: RpcClient, stub: StubNameNode, dn: DataNode
) -> None:
    data = os.urandom(3 * CHUNK)
    record = await put(client, stub, 62, data)
    first = dn.storage.get(62)
    assert first is not None
    flip_byte(first.data_path, 5)
    assert (await dn.scanner.scan_once()).corrupt == [62]
    # The NameNode re-replicates onto this node: the copy replaces the bad replica.
    assert await put(client, stub, 62, data) == record
    assert (await read_block(client, record, stub.token(62, "r")))[1] == data
    assert record in dn.storage.report_records()
    second = dn.storage.get(62)
    assert second is not None and second is not first
    flip_byte(second.data_path, 6)  # and its own corruption is reported in turn
    assert (await dn.scanner.scan_once()).corrupt == [62]
    await eventually(lambda: len(stub.bad) == 2)
