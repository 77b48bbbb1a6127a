"""Bulk-data streams: uploads (SINK), downloads (SOURCE), flow control and misbehaving senders."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import crc32c
import msgspec
import pytest

from tests.rpc.services import (
    BROKEN_SOURCE,
    COUNTED,
    EARLY,
    HOLD,
    REJECT,
    STALL,
    TEST_SERVICE,
    TestHandlers,
)
from tests.rpc.wire import assert_serves, raw_peer
from xdfs.errors import (
    ChecksumError,
    CorruptReplica,
    InvalidArgument,
    Overloaded,
    ProtocolError,
    RpcTimeout,
    StreamError,
    error_from_code,
)
from xdfs.protocol.system import ECHO, PING, SINK, SOURCE, EchoRequest, SourceRequest
from xdfs.rpc.client import RpcClient
from xdfs.rpc.connection import encode_frame
from xdfs.rpc.messages import Chunk, Credit, Empty, ErrorInfo, Kind, Tail
from xdfs.rpc.server import RpcServer
from xdfs.rpc.streams import SealedChunk
from xdfs.testing.minicluster import MiniCluster
from xdfs.testing.poll import eventually

KiB = 1024
CHUNK = 64 * KiB
#: Both ends of a stream must agree on these (see the report on window negotiation).
SMALL_STREAMS: dict[str, Any] = {"stream_chunk_bytes": CHUNK, "stream_window_chunks": 4}

SIZES = [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 10 * CHUNK, 37 * CHUNK + 4321]


def chunks_for(size: int) -> int:
    return -(-size // CHUNK)


@pytest.fixture
async def small(minicluster: MiniCluster, handlers: TestHandlers) -> tuple[RpcServer, RpcClient]:
    server = await minicluster.start_server("streams", [(TEST_SERVICE, handlers)], **SMALL_STREAMS)
    return server, minicluster.client(server.address, **SMALL_STREAMS)


# -- uploads -------------------------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
async def test_upload_sizes(small: tuple[RpcServer, RpcClient], size: int) -> None:
    _, client = small
    data = random.Random(size).randbytes(size)
    result = await client.upload(SINK, Empty(), [data])
    assert result.total_bytes == size
    assert result.crc32c == crc32c.crc32c(data)
    assert result.chunks == chunks_for(size)


@pytest.mark.parametrize(
    "wrap",
    [bytes, bytearray, memoryview, lambda b: memoryview(bytearray(b))],
    ids=["bytes", "bytearray", "memoryview-bytes", "memoryview-bytearray"],
)
async def test_upload_accepts_any_bytes_like_piece(
    small: tuple[RpcServer, RpcClient], wrap: Callable[[bytes], bytes | memoryview]
) -> None:
    _, client = small
    data = random.Random(99).randbytes(3 * CHUNK + 11)
    pieces = [wrap(data[:CHUNK // 2]), wrap(data[CHUNK // 2 :])]
    result = await client.upload(SINK, Empty(), pieces)
    assert result.total_bytes == len(data)
    assert result.crc32c == crc32c.crc32c(data)


async def test_upload_from_async_iterator_of_ragged_pieces(
    small: tuple[RpcServer, RpcClient],
) -> None:
    _, client = small
    rng = random.Random(7)
    pieces = [rng.randbytes(rng.choice([0, 1, 5000, CHUNK, CHUNK + 3, 3 * CHUNK - 1]))
              for _ in range(30)]

    async def source() -> AsyncIterator[bytes]:
        for piece in pieces:
            await asyncio.sleep(0)
            yield piece

    data = b"".join(pieces)
    result = await client.upload(SINK, Empty(), source())
    assert result.total_bytes == len(data)
    assert result.crc32c == crc32c.crc32c(data)
    # Each non-empty piece is split into chunks of at most CHUNK bytes, never merged.
    assert result.chunks == sum(chunks_for(len(p)) for p in pieces)


async def test_sealed_chunks_are_sent_with_the_crc_they_carry(
    small: tuple[RpcServer, RpcClient],
) -> None:
    # A block sent to several targets has each chunk's CRC computed once (the writer's
    # BlockBuffer): the sender must use it, not compute it again. A wrong one proves it.
    _, client = small
    data = random.Random(11).randbytes(3 * CHUNK)
    sealed = [SealedChunk.of(data[i : i + CHUNK]) for i in range(0, len(data), CHUNK)]
    result = await client.upload(SINK, Empty(), sealed)
    assert (result.chunks, result.total_bytes) == (3, len(data))
    assert result.crc32c == crc32c.crc32c(data)
    sealed[1] = SealedChunk(sealed[1].data, sealed[1].crc32c ^ 1)
    with pytest.raises(ChecksumError):
        await client.upload(SINK, Empty(), sealed)
    # Sealed larger than this sender's chunks: split, and checksummed anew.
    result = await client.upload(SINK, Empty(), [SealedChunk(data, 0)])
    assert (result.chunks, result.crc32c) == (3, crc32c.crc32c(data))


async def test_upload_with_default_settings_uses_frames_larger_than_the_receive_buffer(
    client: RpcClient,
) -> None:
    # Default chunks are 1 MiB, four times the 256 KiB receive buffer.
    data = random.Random(3).randbytes(3 * (1 << 20) + 17)
    result = await client.upload(SINK, Empty(), [memoryview(data)])
    assert (result.chunks, result.total_bytes) == (4, len(data))
    assert result.crc32c == crc32c.crc32c(data)


# -- downloads -----------------------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
async def test_download_sizes(small: tuple[RpcServer, RpcClient], size: int) -> None:
    _, client = small
    stream = await client.download(SOURCE, SourceRequest(size, CHUNK))
    assert stream.head.total_bytes == size
    parts = [bytes(p) async for p in stream]
    assert len(parts) == chunks_for(size)
    assert all(0 < len(p) <= CHUNK for p in parts)
    assert b"".join(parts) == bytes(size)


async def test_download_content_and_order(
    small: tuple[RpcServer, RpcClient], handlers: TestHandlers
) -> None:
    _, client = small
    size = 50 * 1000 + 3
    stream = await client.download(COUNTED, SourceRequest(size, 1000))
    data = await stream.read_all()
    assert len(data) == size
    # Chunk i starts with i*1000 as 8 big-endian bytes: order is preserved.
    for i in range(50):
        assert int.from_bytes(data[i * 1000 : i * 1000 + 8], "big") == i * 1000


async def test_download_with_default_settings(client: RpcClient) -> None:
    stream = await client.download(SOURCE, SourceRequest(5 * (1 << 20) + 1))
    assert await stream.read_all() == bytes(5 * (1 << 20) + 1)


async def test_download_error_before_head_is_typed(client: RpcClient) -> None:
    with pytest.raises(InvalidArgument):
        await client.download(SOURCE, SourceRequest(10, chunk_bytes=0))
    assert await client.call(PING, Empty()) == Empty()


async def test_abandoned_download_is_cancelled_on_the_server(
    small: tuple[RpcServer, RpcClient], handlers: TestHandlers
) -> None:
    server, client = small
    stream = await client.download(COUNTED, SourceRequest(1000 * CHUNK, CHUNK))
    first = await stream.__anext__()
    assert len(first) == CHUNK
    await stream.aclose()
    (conn,) = server.connections
    await eventually(lambda: not conn._calls)  # the server's download task ends
    assert handlers.pulled < 1000
    with pytest.raises(StreamError):
        await stream.__anext__()
    assert await client.call(PING, Empty()) == Empty()


async def test_server_error_mid_download_reaches_the_reader(client: RpcClient) -> None:
    stream = await client.download(BROKEN_SOURCE, Empty())
    assert stream.head.total_bytes == 6
    got: list[bytes] = []
    with pytest.raises(CorruptReplica, match="mid-stream"):
        async for part in stream:
            got.append(bytes(part))
    # A failed stream drops what it buffered: the reader sees a prefix, then the error.
    assert got == [b"one", b"two"][: len(got)]
    assert await client.call(PING, Empty()) == Empty()


async def test_server_rejecting_an_upload_midway_stops_the_sender(
    small: tuple[RpcServer, RpcClient],
) -> None:
    server, client = small
    pulled = 0

    def pieces() -> Iterator[bytes]:
        nonlocal pulled
        for _ in range(1000):
            pulled += 1
            yield bytes(CHUNK)

    with pytest.raises(InvalidArgument, match="rejected"):
        await client.upload(REJECT, Empty(), pieces())
    assert pulled < 1000  # the sender stopped instead of streaming everything
    assert await client.call(PING, Empty()) == Empty()
    assert len(server.connections) == 1


async def test_streams_and_unary_calls_share_one_connection(
    small: tuple[RpcServer, RpcClient],
) -> None:
    server, client = small
    up = random.Random(11).randbytes(40 * CHUNK + 99)

    async def upload() -> None:
        result = await client.upload(SINK, Empty(), [up])
        assert result.total_bytes == len(up)
        assert result.crc32c == crc32c.crc32c(up)

    async def download() -> None:
        stream = await client.download(SOURCE, SourceRequest(45 * CHUNK + 5, CHUNK))
        assert await stream.read_all() == bytes(45 * CHUNK + 5)

    async def unary(i: int) -> None:
        payload = f"unary-{i}".encode()
        assert (await client.call(ECHO, EchoRequest(payload))).payload == payload

    await asyncio.gather(
        upload(), download(), upload(), download(), *(unary(i) for i in range(100))
    )
    assert len(server.connections) == 1
    assert len(client._connections) == 1


# -- flow control --------------------------------------------------------------------------


async def test_slow_download_consumer_bounds_the_server(
    minicluster: MiniCluster, handlers: TestHandlers
) -> None:
    window = 2
    settings: dict[str, Any] = {"stream_chunk_bytes": CHUNK, "stream_window_chunks": window}
    server = await minicluster.start_server("bp", [(TEST_SERVICE, handlers)], **settings)
    client = minicluster.client(server.address, **settings)
    total_chunks = 30
    stream = await client.download(COUNTED, SourceRequest(total_chunks * CHUNK, CHUNK))
    receiver = stream._receiver
    await eventually(lambda: len(receiver._queue) == window)  # the window gets used ...
    consumed = 0
    max_queued = 0
    while True:
        # Give the server every chance to overrun the window before we read on.
        for _ in range(20):
            await asyncio.sleep(0.002)
            max_queued = max(max_queued, len(receiver._queue))
            # Sent but not yet acknowledged: at most one window (plus the one chunk the
            # server pulled from its source and holds while it waits for credit).
            assert handlers.pulled <= consumed + window + 1
        try:
            part = await stream.__anext__()
        except StopAsyncIteration:
            break
        assert len(part) == CHUNK
        consumed += 1
    assert consumed == total_chunks
    assert max_queued == window  # ... and never exceeded


async def test_client_with_a_smaller_window_than_the_server_can_download(
    minicluster: MiniCluster,
) -> None:
    # The receiver's window governs: a server configured for 8 chunks sends only the 2 the
    # client granted, so a slow client with a small window keeps its connection.
    server = await minicluster.start_server("w", [], stream_window_chunks=8)
    client = minicluster.client(server.address, stream_window_chunks=2)
    conn = await client.connection(server.address)
    stream = await conn.download(SOURCE, SourceRequest(20 * CHUNK, CHUNK), 10)
    await eventually(lambda: conn.is_closing or len(stream._receiver._queue) >= 2)
    await asyncio.sleep(0.05)  # a slow consumer
    assert await stream.read_all() == bytes(20 * CHUNK)


async def test_upload_through_a_window_of_one_chunk(minicluster: MiniCluster) -> None:
    # The first chunk leaves before the grant; the grant counts it, so the sender never
    # has two chunks unacknowledged (the server would drop the connection).
    settings: dict[str, Any] = {"stream_chunk_bytes": CHUNK, "stream_window_chunks": 1}
    server = await minicluster.start_server("w1", [], **settings)
    client = minicluster.client(server.address, **settings)
    data = random.randbytes(10 * CHUNK)
    result = await client.upload(SINK, Empty(), [data])
    assert (result.total_bytes, result.crc32c) == (len(data), crc32c.crc32c(data))
    assert len(client._connections) == 1
    assert not next(iter(client._connections.values())).is_closing


async def test_slow_upload_consumer_blocks_the_sender(
    minicluster: MiniCluster, handlers: TestHandlers
) -> None:
    window = 3
    settings: dict[str, Any] = {"stream_chunk_bytes": CHUNK, "stream_window_chunks": window}
    server = await minicluster.start_server("bp", [(TEST_SERVICE, handlers)], **settings)
    client = minicluster.client(server.address, **settings)
    pulled = 0
    total_chunks = 20

    async def source() -> AsyncIterator[bytes]:
        nonlocal pulled
        for i in range(total_chunks):
            pulled += 1
            yield bytes([i]) * CHUNK

    upload = asyncio.create_task(client.upload(HOLD, Empty(), source()))
    await eventually(
        lambda: bool(handlers.hold_receivers)
        and len(handlers.hold_receivers[0]._queue) == window
    )
    receiver = handlers.hold_receivers[0]
    # Nothing is consumed: the client sent one window and waits with one chunk in hand.
    for _ in range(50):
        await asyncio.sleep(0.005)
        assert len(receiver._queue) == window
        assert pulled == window + 1
    assert not upload.done()
    # Other calls on the same connection are not blocked by the stalled stream.
    assert await client.call(PING, Empty()) == Empty()
    handlers.gate.set()
    result = await upload
    assert (result.chunks, result.total_bytes) == (total_chunks, total_chunks * CHUNK)
    assert pulled == total_chunks
    assert len(server.connections) == 1


async def test_upload_sender_gives_up_when_no_credit_comes(
    minicluster: MiniCluster, handlers: TestHandlers
) -> None:
    settings: dict[str, Any] = {"stream_chunk_bytes": CHUNK, "stream_window_chunks": 2}
    server = await minicluster.start_server("bp", [(TEST_SERVICE, handlers)], **settings)
    client = minicluster.client(server.address, **settings)
    conn = await client.connection(server.address)
    with pytest.raises(StreamError, match="credit"):
        await conn.upload(HOLD, Empty(), [bytes(5 * CHUNK)], timeout_s=0.3)
    assert not conn._pending  # the abandoned call is forgotten ...
    (server_conn,) = server.connections
    await eventually(lambda: not server_conn._calls)  # ... and cancelled on the server
    assert await conn.call(PING, Empty(), 5) == Empty()


# -- streams and the per-connection call limit -----------------------------------------------


async def test_streams_up_to_the_call_limit_do_not_deadlock(
    minicluster: MiniCluster, handlers: TestHandlers
) -> None:
    # Streams need frames from the peer to finish (chunks, credit): a server that stopped
    # reading because they fill its call slots would wait for them forever.
    settings: dict[str, Any] = {
        **SMALL_STREAMS, "inflight_per_connection_max": 2, "call_timeout_s": 10,
    }
    server = await minicluster.start_server("limit", [(TEST_SERVICE, handlers)], **settings)
    client = minicluster.client(server.address, **settings)
    data = random.Random(5).randbytes(30 * CHUNK + 1)

    async def upload() -> None:
        result = await client.upload(SINK, Empty(), [data])
        assert (result.total_bytes, result.crc32c) == (len(data), crc32c.crc32c(data))

    async def download() -> None:
        stream = await client.download(SOURCE, SourceRequest(30 * CHUNK + 1, CHUNK))
        assert await stream.read_all() == bytes(30 * CHUNK + 1)

    await asyncio.gather(upload(), upload())
    await asyncio.gather(upload(), download())
    await asyncio.gather(download(), download())


async def test_stream_beyond_the_call_limit_is_refused_with_overloaded(
    minicluster: MiniCluster, handlers: TestHandlers
) -> None:
    settings: dict[str, Any] = {**SMALL_STREAMS, "inflight_per_connection_max": 1}
    server = await minicluster.start_server("limit", [(TEST_SERVICE, handlers)], **settings)
    client = minicluster.client(server.address, **settings)
    conn = await client.connection(server.address)
    held = asyncio.create_task(conn.upload(HOLD, Empty(), [b"held"], 30))
    await eventually(lambda: handlers.hold_receivers)
    # The only slot is taken by a stream: new calls that need a slot are refused ...
    with pytest.raises(Overloaded):
        await conn.upload(SINK, Empty(), [b"x" * 10], 10)
    with pytest.raises(Overloaded):
        await conn.download(SOURCE, SourceRequest(10), 10)
    with pytest.raises(Overloaded):
        await conn.call(ECHO, EchoRequest(b"async handler"), 10)
    # ... cheap inline handlers still answer, and the running stream is unharmed.
    assert await conn.call(PING, Empty(), 10) == Empty()
    handlers.gate.set()
    result = await held
    assert (result.chunks, result.total_bytes) == (1, 4)
    assert (await conn.call(ECHO, EchoRequest(b"free again"), 10)).payload == b"free again"


async def test_sender_exceeding_its_credit_loses_the_connection(
    minicluster: MiniCluster, handlers: TestHandlers
) -> None:
    window = 3
    server = await minicluster.start_server(
        "bp", [(TEST_SERVICE, handlers)], stream_window_chunks=window
    )
    async with raw_peer(server.address) as peer:
        await peer.hello()
        peer.send(Kind.HEAD, 1, HOLD.name, Empty())
        for seq in range(window + 1):  # one chunk more than the window
            data = bytes([seq]) * 100
            peer.send(Kind.CHUNK, 1, "", Chunk(seq, crc32c.crc32c(data), memoryview(data)))
        await peer.expect_connection_error(ProtocolError)
    assert not handlers.gate.is_set()
    await eventually(lambda: not server.connections)
    await assert_serves(minicluster.client(server.address))


async def test_sender_within_its_credit_keeps_the_connection(
    minicluster: MiniCluster, handlers: TestHandlers
) -> None:
    window = 3
    server = await minicluster.start_server(
        "bp", [(TEST_SERVICE, handlers)], stream_window_chunks=window
    )
    async with raw_peer(server.address) as peer:
        await peer.hello()
        peer.send(Kind.HEAD, 1, HOLD.name, Empty())
        for seq in range(window):
            data = bytes([seq]) * 100
            peer.send(Kind.CHUNK, 1, "", Chunk(seq, crc32c.crc32c(data), memoryview(data)))
        peer.send(Kind.TAIL, 1, "", Tail(window, window * 100))
        handlers.gate.set()
        reply = await peer.recv()
        assert (reply.kind, reply.id) == (Kind.RESPONSE, 1)


# -- stream integrity ------------------------------------------------------------------------


async def _upload_raw(
    server: RpcServer, frames: list[tuple[int, object]]
) -> tuple[int, Exception | None]:
    """HEAD of SINK as call 1, then ``frames`` (kind, body); returns the answer to call 1.

    When the call failed, also checks that the connection survived it.
    """
    async with raw_peer(server.address) as peer:
        await peer.hello()
        peer.send(Kind.HEAD, 1, SINK.name, Empty())
        for kind, body in frames:
            peer.send(kind, 1, "", body)
        envelope = await peer.recv()
        assert envelope.id == 1
        if envelope.kind != Kind.ERROR:
            return envelope.kind, None
        info = msgspec.msgpack.decode(envelope.body, type=ErrorInfo)
        peer.send(Kind.REQUEST, 2, PING.name, Empty())
        after = await peer.recv()
        assert (after.kind, after.id) == (Kind.RESPONSE, 2)
        return envelope.kind, error_from_code(info.code, info.message)


def _chunk(seq: int, data: bytes, crc: int | None = None) -> Chunk:
    return Chunk(seq, crc32c.crc32c(data) if crc is None else crc, memoryview(data))


async def test_corrupt_chunk_fails_the_call_with_checksum_error(server: RpcServer) -> None:
    bad = _chunk(1, b"world", crc=crc32c.crc32c(b"world") ^ 1)
    kind, error = await _upload_raw(
        server, [(Kind.CHUNK, _chunk(0, b"hello")), (Kind.CHUNK, bad), (Kind.TAIL, Tail(2, 10))]
    )
    assert kind == Kind.ERROR
    assert isinstance(error, ChecksumError)


async def test_out_of_order_chunk_fails_the_call(server: RpcServer) -> None:
    kind, error = await _upload_raw(
        server, [(Kind.CHUNK, _chunk(1, b"x")), (Kind.TAIL, Tail(1, 1))]
    )
    assert kind == Kind.ERROR
    assert type(error) is StreamError


async def test_tail_with_wrong_totals_fails_the_call(server: RpcServer) -> None:
    kind, error = await _upload_raw(
        server, [(Kind.CHUNK, _chunk(0, b"abc")), (Kind.TAIL, Tail(1, 4))]
    )
    assert kind == Kind.ERROR
    assert type(error) is StreamError


async def test_correct_raw_upload_is_accepted(server: RpcServer) -> None:
    kind, error = await _upload_raw(
        server, [(Kind.CHUNK, _chunk(0, b"abc")), (Kind.TAIL, Tail(1, 3))]
    )
    assert (kind, error) == (Kind.RESPONSE, None)


async def test_upload_whose_tail_came_with_its_head_gets_no_window_grant(
    server: RpcServer,
) -> None:
    # Head, its one chunk (sent ahead of the grant) and tail in one write, so in one read:
    # the sender has sent everything and needs no credit; the answer is the first frame.
    frames = [encode_frame(Kind.HEAD, 1, SINK.name, Empty()),
              encode_frame(Kind.CHUNK, 1, "", _chunk(0, b"abc")),
              encode_frame(Kind.TAIL, 1, "", Tail(1, 3))]
    async with raw_peer(server.address) as peer:
        await peer.hello()
        peer.send_raw(b"".join(frames))
        reply = await peer.recv(credits=True)
        assert (reply.kind, reply.id) == (Kind.RESPONSE, 1)
        # Still granted to a stream whose tail is not in yet, without waiting for it.
        peer.send(Kind.HEAD, 2, SINK.name, Empty())
        grant = await peer.recv(credits=True)
        assert (grant.kind, grant.id) == (Kind.CREDIT, 2)
        assert msgspec.msgpack.decode(grant.body, type=Credit).count >= 1
        peer.send(Kind.CHUNK, 2, "", _chunk(0, b"abc"))
        peer.send(Kind.TAIL, 2, "", Tail(1, 3))
        reply = await peer.recv(credits=True)
        assert (reply.kind, reply.id) == (Kind.RESPONSE, 2)


@pytest.mark.parametrize("pieces", [[], [b"x" * 10]], ids=["empty", "one-chunk"])
async def test_upload_handler_that_ignores_its_stream_fails_the_call(
    client: RpcClient, pieces: list[bytes]
) -> None:
    # Deterministic whether or not the tail has arrived when the handler returns.
    with pytest.raises(ProtocolError, match="before the stream ended"):
        await client.upload(EARLY, Empty(), pieces)
    assert await client.call(PING, Empty()) == Empty()


async def test_stalled_download_times_out_and_is_cancelled(
    minicluster: MiniCluster, handlers: TestHandlers
) -> None:
    server = await minicluster.start_server("t", [(TEST_SERVICE, handlers)])
    client = minicluster.client(server.address)
    conn = await client.connection(server.address)
    stream = await conn.download(STALL, Empty(), timeout_s=1.0)
    assert bytes(await stream.__anext__()) == b"1"
    with pytest.raises(RpcTimeout):
        await stream.__anext__()
    # The reader's timeout cancelled the server's side of the stream.
    await eventually(lambda: "stall_cancelled" in handlers.calls)
    assert not conn.is_closing
    assert await conn.call(PING, Empty(), 5) == Empty()
