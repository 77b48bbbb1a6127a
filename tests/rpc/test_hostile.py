"""Bad input over real sockets: every case checks the server's answer (an error frame and a
closed connection, or a failed call on a connection that stays open) AND that the server
still serves a normal client afterwards."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import tracemalloc
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from tests.rpc.services import (
    BUMP,
    FAIL,
    SLOW,
    TEST_SERVICE,
    FailRequest,
    SlowRequest,
    TestHandlers,
)
from tests.rpc.wire import RawPeer, assert_serves, raw_peer
from xdfs.errors import (
    BadRequest,
    FrameTooLarge,
    InvalidArgument,
    NotAuthenticated,
    Overloaded,
    ProtocolError,
    Unavailable,
    UnknownMethod,
    VersionMismatch,
    WrongCluster,
)
from xdfs.protocol.system import ECHO, PING, SINK, EchoRequest
from xdfs.rpc.connection import encode_frame
from xdfs.rpc.messages import LENGTH_PREFIX, PROTOCOL_VERSION, Empty, Hello, Kind
from xdfs.rpc.server import RpcServer
from xdfs.testing.minicluster import MiniCluster
from xdfs.testing.poll import eventually


@pytest.fixture
async def fresh(minicluster: MiniCluster, server: RpcServer) -> AsyncIterator[RpcServer]:
    """The server; after the test, a normal client must still be served."""
    yield server
    await assert_serves(minicluster.client(server.address))


async def wait_no_connections(server: RpcServer) -> None:
    await eventually(lambda: not server.connections)


# -- framing-level garbage: connection-level error, then close -----------------------------


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x00\x00\x00\x05hello",  # a frame that is not msgpack of an envelope
        b"\x00\x00\x00\x00",  # an empty frame
        b"\x00\x00\x00\x03\x93\x01\x02",  # an array of the wrong length
        b"\x00\x00\x00\x05\x94\xa1x\x00\xa0\xc0",  # kind is a string
    ],
    ids=["not-msgpack", "empty", "short-array", "kind-not-int"],
)
async def test_undecodable_frame_before_handshake(fresh: RpcServer, garbage: bytes) -> None:
    async with raw_peer(fresh.address) as peer:
        peer.send_raw(garbage)
        await peer.expect_connection_error(ProtocolError)
    await wait_no_connections(fresh)


async def test_http_request_gets_frame_too_large(fresh: RpcServer) -> None:
    async with raw_peer(fresh.address) as peer:
        peer.send_raw(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # "GET " is a 1.2 GB length
        await peer.expect_connection_error(FrameTooLarge)


async def test_garbage_after_handshake_closes(fresh: RpcServer) -> None:
    async with raw_peer(fresh.address) as peer:
        await peer.hello()
        peer.send_raw(b"\x00\x00\x00\x04\xde\xad\xbe\xef")
        await peer.expect_connection_error(ProtocolError)


async def test_4_gib_length_prefix_is_refused_without_allocating(fresh: RpcServer) -> None:
    tracemalloc.start()
    try:
        async with raw_peer(fresh.address) as peer:
            await peer.hello()
            peer.send_raw(b"\xff\xff\xff\xff")
            error = await peer.expect_connection_error(FrameTooLarge)
            assert error.code == 102
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20  # nowhere near 4 GiB


async def test_frame_just_above_the_limit_is_refused(minicluster: MiniCluster) -> None:
    limit = 64 * 1024
    server = await minicluster.start_server("small-frames", [], frame_bytes_max=limit)
    async with raw_peer(server.address) as peer:
        await peer.hello()
        peer.send_raw(LENGTH_PREFIX.pack(limit + 1) + b"\x94" + bytes(100))
        await peer.expect_connection_error(FrameTooLarge)
    await assert_serves(minicluster.client(server.address))


async def test_frame_exactly_at_the_limit_is_accepted(minicluster: MiniCluster) -> None:
    limit = 64 * 1024
    server = await minicluster.start_server("small-frames", [], frame_bytes_max=limit)
    encoder = msgspec.msgpack.Encoder()
    # Find the payload size whose REQUEST frame is exactly `limit` bytes long.
    size = limit - 100
    while True:
        body = [Kind.REQUEST, 1, ECHO.name, EchoRequest(bytes(size))]
        length = len(encoder.encode(body))
        if length == limit:
            break
        size += limit - length
    async with raw_peer(server.address) as peer:
        await peer.hello()
        peer.send_raw(LENGTH_PREFIX.pack(limit) + encoder.encode(body))
        reply = await peer.recv()
        assert (reply.kind, reply.id) == (Kind.RESPONSE, 1)
        assert msgspec.msgpack.decode(reply.body) == [bytes(size)]


async def test_frame_split_into_single_bytes_is_reassembled(fresh: RpcServer) -> None:
    async with raw_peer(fresh.address) as peer:
        await peer.hello()
        frame = bytes(encode_frame(Kind.REQUEST, 1, ECHO.name, EchoRequest(b"slow drip")))
        for i in range(len(frame)):
            peer.send_raw(frame[i : i + 1])
            await peer.writer.drain()
            await asyncio.sleep(0)
        reply = await peer.recv()
        assert reply.kind == Kind.RESPONSE
        assert msgspec.msgpack.decode(reply.body) == [b"slow drip"]


async def test_frames_before_the_handshake_are_limited_to_a_small_size(fresh: RpcServer) -> None:
    # Otherwise 4 bytes from an unauthenticated peer would allocate rpc.frame_bytes_max.
    async with raw_peer(fresh.address) as peer:
        peer.send_raw(LENGTH_PREFIX.pack(1 << 20) + b"\x94")
        await peer.expect_connection_error(FrameTooLarge)
    async with raw_peer(fresh.address) as peer:  # after it, large frames are fine
        await peer.hello()
        peer.send(Kind.REQUEST, 1, ECHO.name, EchoRequest(bytes(1 << 20)))
        reply = await peer.recv()
        assert (reply.kind, reply.id) == (Kind.RESPONSE, 1)


# -- call-level errors: the call fails, the connection stays open --------------------------


async def test_body_of_the_wrong_type_is_bad_request(fresh: RpcServer) -> None:
    async with raw_peer(fresh.address) as peer:
        await peer.hello()
        peer.send(Kind.REQUEST, 1, ECHO.name, "not an EchoRequest")
        call_id, error = await peer.recv_error()
        assert (call_id, type(error)) == (1, BadRequest)
        peer.send(Kind.REQUEST, 2, ECHO.name, [b"x", "not a float"])
        call_id, error = await peer.recv_error()
        assert (call_id, type(error)) == (2, BadRequest)
        # Same connection, a correct call now.
        peer.send(Kind.REQUEST, 3, ECHO.name, EchoRequest(b"fine"))
        reply = await peer.recv()
        assert (reply.kind, reply.id) == (Kind.RESPONSE, 3)
        assert msgspec.msgpack.decode(reply.body) == [b"fine"]


async def test_unknown_method(fresh: RpcServer) -> None:
    async with raw_peer(fresh.address) as peer:
        await peer.hello()
        peer.send(Kind.REQUEST, 1, "no_such_method", Empty())
        call_id, error = await peer.recv_error()
        assert (call_id, type(error)) == (1, UnknownMethod)
        assert "no_such_method" in str(error)
        peer.send(Kind.REQUEST, 2, PING.name, Empty())
        reply = await peer.recv()
        assert (reply.kind, reply.id) == (Kind.RESPONSE, 2)


async def test_wrong_call_kind_is_bad_request(fresh: RpcServer) -> None:
    async with raw_peer(fresh.address) as peer:
        await peer.hello()
        peer.send(Kind.REQUEST, 1, SINK.name, Empty())  # an upload sent as a unary call
        call_id, error = await peer.recv_error()
        assert (call_id, type(error)) == (1, BadRequest)
        peer.send(Kind.HEAD, 2, PING.name, Empty())  # a unary call sent as an upload
        call_id, error = await peer.recv_error()
        assert (call_id, type(error)) == (2, BadRequest)
        peer.send(Kind.REQUEST, 3, PING.name, Empty())
        reply = await peer.recv()
        assert (reply.kind, reply.id) == (Kind.RESPONSE, 3)


async def test_stray_stream_frames_and_cancels_are_ignored(fresh: RpcServer) -> None:
    async with raw_peer(fresh.address) as peer:
        await peer.hello()
        peer.send(Kind.CHUNK, 77, "", [0, 0, b""])  # no such stream
        peer.send(Kind.TAIL, 77, "", [0, 0])
        peer.send(Kind.CREDIT, 77, "", [5])
        peer.send(Kind.CANCEL, 78)
        peer.send(Kind.REQUEST, 1, PING.name, Empty())
        reply = await peer.recv()
        assert (reply.kind, reply.id) == (Kind.RESPONSE, 1)


# -- handshake ---------------------------------------------------------------------------------


async def test_request_before_hello_is_not_authenticated(fresh: RpcServer) -> None:
    async with raw_peer(fresh.address) as peer:
        peer.send(Kind.REQUEST, 1, PING.name, Empty())
        await peer.expect_connection_error(NotAuthenticated)


async def test_hello_with_a_bad_body_closes(fresh: RpcServer) -> None:
    async with raw_peer(fresh.address) as peer:
        peer.send(Kind.HELLO, 0, "", {"protocol_version": "one"})
        await peer.expect_connection_error(ProtocolError)


async def test_second_frame_before_welcome_closes(fresh: RpcServer) -> None:
    async with raw_peer(fresh.address) as peer:
        peer.send(Kind.HELLO, 0, "", Hello(PROTOCOL_VERSION))
        peer.send(Kind.REQUEST, 1, PING.name, Empty())
        frames = await peer.expect_closed()
        kinds = [f.kind for f in frames]
        assert Kind.RESPONSE not in kinds
        assert kinds[-1] == Kind.ERROR


@pytest.mark.parametrize("version", [0, 1, 3, 1 << 40])
async def test_hello_with_the_wrong_protocol_version(fresh: RpcServer, version: int) -> None:
    async with raw_peer(fresh.address) as peer:
        peer.send(Kind.HELLO, 0, "", Hello(version))
        await peer.expect_connection_error(VersionMismatch)


async def test_client_with_the_wrong_protocol_version_gets_version_mismatch(
    minicluster: MiniCluster, fresh: RpcServer
) -> None:
    client = minicluster.client(fresh.address, hello=Hello(99))
    with pytest.raises(VersionMismatch):
        await client.call(PING, Empty())


async def test_wrong_cluster_id(minicluster: MiniCluster) -> None:
    server = await minicluster.start_server("c", [], cluster_id="cluster-a")
    async with raw_peer(server.address) as peer:
        peer.send(Kind.HELLO, 0, "", Hello(PROTOCOL_VERSION, cluster_id="cluster-b"))
        await peer.expect_connection_error(WrongCluster)
    async with raw_peer(server.address) as peer:
        welcome = await peer.hello(cluster_id="cluster-a")
        assert welcome.cluster_id == "cluster-a"
    async with raw_peer(server.address) as peer:  # a client that names no cluster is let in
        welcome = await peer.hello()
        assert welcome.cluster_id == "cluster-a"
    wrong = minicluster.client(
        server.address, hello=Hello(PROTOCOL_VERSION, cluster_id="cluster-b"))
    with pytest.raises(WrongCluster):
        await wrong.call(PING, Empty())
    await assert_serves(minicluster.client(
        server.address, hello=Hello(PROTOCOL_VERSION, cluster_id="cluster-a")))


@pytest.mark.parametrize("sent", [b"", b"\x00\x00"], ids=["nothing", "half-a-prefix"])
async def test_no_hello_within_the_handshake_timeout(
    minicluster: MiniCluster, sent: bytes
) -> None:
    server = await minicluster.start_server("hs", [], handshake_timeout_s=0.2)
    async with raw_peer(server.address) as peer:
        peer.send_raw(sent)
        await peer.expect_connection_error(NotAuthenticated)
    await wait_no_connections(server)
    await assert_serves(minicluster.client(server.address))


async def test_unexpected_frame_kind_from_a_client_closes(fresh: RpcServer) -> None:
    for kind in (Kind.WELCOME, Kind.RESPONSE, 99):
        async with raw_peer(fresh.address) as peer:
            await peer.hello()
            peer.send(kind, 1, "", Empty())
            await peer.expect_connection_error(ProtocolError)


# -- call ids ----------------------------------------------------------------------------------


async def test_duplicate_call_id_in_flight_closes(
    minicluster: MiniCluster, handlers: TestHandlers
) -> None:
    server = await minicluster.start_server("dup", [(TEST_SERVICE, handlers)])
    async with raw_peer(server.address) as peer:
        await peer.hello()
        peer.send(Kind.REQUEST, 7, SLOW.name, SlowRequest(30))
        peer.send(Kind.REQUEST, 7, SLOW.name, SlowRequest(30))
        frames = await peer.expect_closed()
        assert [(f.kind, f.id) for f in frames][-1] == (Kind.ERROR, 0)
    await wait_no_connections(server)
    # The running call was cancelled with its connection.
    await assert_serves(minicluster.client(server.address))


@pytest.mark.parametrize("call_id", [0, -1])
async def test_call_id_must_be_positive(
    minicluster: MiniCluster, handlers: TestHandlers, call_id: int
) -> None:
    server = await minicluster.start_server("ids", [(TEST_SERVICE, handlers)])
    async with raw_peer(server.address) as peer:
        await peer.hello()
        peer.send(Kind.REQUEST, call_id, SLOW.name, SlowRequest(0))
        await peer.expect_connection_error(ProtocolError)
    assert "test_slow" not in handlers.calls
    await assert_serves(minicluster.client(server.address))


async def test_call_ids_may_be_reused_after_the_answer(fresh: RpcServer) -> None:
    async with raw_peer(fresh.address) as peer:
        await peer.hello()
        for payload in (b"a", b"b", b"c"):
            peer.send(Kind.REQUEST, 5, ECHO.name, EchoRequest(payload))
            reply = await peer.recv()
            assert (reply.kind, reply.id) == (Kind.RESPONSE, 5)
            assert msgspec.msgpack.decode(reply.body) == [payload]


# -- plain def handlers: answered inline, checked as every call ---------------------------------


async def test_plain_def_call_with_a_bad_body_is_bad_request(fresh: RpcServer) -> None:
    async with raw_peer(fresh.address) as peer:
        await peer.hello()
        peer.send(Kind.REQUEST, 1, PING.name, "not an Empty")
        call_id, error = await peer.recv_error()
        assert (call_id, type(error)) == (1, BadRequest)
        peer.send(Kind.REQUEST, 2, PING.name, Empty())
        reply = await peer.recv()
        assert (reply.kind, reply.id) == (Kind.RESPONSE, 2)


@pytest.mark.parametrize("call_id", [0, -1])
async def test_plain_def_call_id_must_be_positive(
    minicluster: MiniCluster, handlers: TestHandlers, call_id: int
) -> None:
    server = await minicluster.start_server("ids", [(TEST_SERVICE, handlers)])
    async with raw_peer(server.address) as peer:
        await peer.hello()
        peer.send(Kind.REQUEST, call_id, BUMP.name, Empty())
        await peer.expect_connection_error(ProtocolError)
    assert "test_bump" not in handlers.calls
    await assert_serves(minicluster.client(server.address))


async def test_plain_def_call_with_the_id_of_a_running_call_closes(
    minicluster: MiniCluster, handlers: TestHandlers
) -> None:
    server = await minicluster.start_server("dup", [(TEST_SERVICE, handlers)])
    async with raw_peer(server.address) as peer:
        await peer.hello()
        peer.send(Kind.REQUEST, 7, SLOW.name, SlowRequest(30))
        peer.send(Kind.REQUEST, 7, BUMP.name, Empty())
        frames = await peer.expect_closed()
        assert [(f.kind, f.id) for f in frames][-1] == (Kind.ERROR, 0)
    assert "test_bump" not in handlers.calls
    await wait_no_connections(server)
    await assert_serves(minicluster.client(server.address))


@pytest.mark.parametrize("method", [BUMP.name, SLOW.name])
async def test_negative_call_number_closes(
    minicluster: MiniCluster, handlers: TestHandlers, method: str
) -> None:
    server = await minicluster.start_server("numbers", [(TEST_SERVICE, handlers)])
    body = Empty() if method == BUMP.name else SlowRequest(0)
    async with raw_peer(server.address) as peer:
        await peer.hello()
        peer.send_raw(bytes(encode_frame(Kind.REQUEST, 1, method, body, logical_call=-5)))
        await peer.expect_connection_error(ProtocolError)
    assert method not in handlers.calls
    await assert_serves(minicluster.client(server.address))


# -- resource limits ---------------------------------------------------------------------------


def _small_receive_socket() -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    return sock


async def _track_max_calls(server: RpcServer, stop: asyncio.Event, seen: list[int]) -> None:
    """Record the most calls any one connection ran at once, every loop iteration."""
    while not stop.is_set():
        for conn in list(server.connections):
            seen.append(len(conn._calls))
        await asyncio.sleep(0)


async def test_inflight_calls_per_connection_are_bounded(
    minicluster: MiniCluster, handlers: TestHandlers
) -> None:
    limit = 8
    server = await minicluster.start_server(
        "inflight", [(TEST_SERVICE, handlers)], inflight_per_connection_max=limit
    )
    seen: list[int] = []
    stop = asyncio.Event()
    tracker = asyncio.create_task(_track_max_calls(server, stop, seen))
    try:
        async with raw_peer(server.address) as peer:
            await peer.hello()
            # 200 requests in one write: they arrive in very few recv()s.
            peer.send_raw(b"".join(
                bytes(encode_frame(Kind.REQUEST, i, ECHO.name, EchoRequest(b"%d" % i, 0.02)))
                for i in range(1, 201)
            ))
            answered: set[int] = set()
            while len(answered) < 200:
                reply = await peer.recv()
                assert reply.kind == Kind.RESPONSE
                answered.add(reply.id)
            assert answered == set(range(1, 201))
    finally:
        stop.set()
        await tracker
    assert max(seen) <= limit
    assert max(seen) == limit  # the limit was reached, so it was really tested


async def test_peer_that_never_reads_is_paused_then_dropped(
    minicluster: MiniCluster, handlers: TestHandlers
) -> None:
    settings: dict[str, Any] = {
        "write_buffer_high_bytes": 64 * 1024,
        "stalled_peer_timeout_s": 0.5,
        "inflight_per_connection_max": 4,
    }
    server = await minicluster.start_server("stall", [(TEST_SERVICE, handlers)], **settings)
    other = minicluster.client(server.address)
    await other.call(PING, Empty())
    seen: list[int] = []
    stop = asyncio.Event()
    tracker = asyncio.create_task(_track_max_calls(server, stop, seen))
    try:
        before = set(server.connections)
        sock = _small_receive_socket()
        await asyncio.get_running_loop().sock_connect(sock, (server.host, server.port))
        reader, writer = await asyncio.open_connection(sock=sock)
        peer = RawPeer(reader, writer)
        try:
            await peer.hello()
            (stalled,) = set(server.connections) - before
            # 400 x 32 KiB of replies that are never read, requests written without waiting.
            payload = bytes(32 * 1024)
            for i in range(1, 401):
                peer.send(Kind.REQUEST, i, ECHO.name, EchoRequest(payload))
            # Meanwhile the server's other clients are served.
            for _ in range(20):
                await assert_serves(other)
            async with asyncio.timeout(15):
                while stalled in server.connections:
                    assert stalled.transport is not None
                    assert stalled.transport.get_write_buffer_size() < 4 << 20
                    await asyncio.sleep(0.01)
        finally:
            writer.transport.abort()
            await peer.close()
    finally:
        stop.set()
        await tracker
    assert max(seen) <= settings["inflight_per_connection_max"]
    await assert_serves(other)


async def test_connections_max(minicluster: MiniCluster) -> None:
    server = await minicluster.start_server("full", [], connections_max=2)
    async with contextlib.AsyncExitStack() as stack:
        first = await stack.enter_async_context(raw_peer(server.address))
        await first.hello()
        second = await stack.enter_async_context(raw_peer(server.address))
        await second.hello()
        async with raw_peer(server.address) as third:
            call_id, error = await third.recv_error()
            assert call_id == 0
            assert isinstance(error, Overloaded)
            await third.expect_closed()
        client = minicluster.client(server.address, tries_per_address=1)
        with pytest.raises(Unavailable, match="too many connections"):
            await client.call(PING, Empty())
        # The two admitted connections still work.
        for i, peer in enumerate((first, second)):
            peer.send(Kind.REQUEST, 1, PING.name, Empty())
            reply = await peer.recv()
            assert (reply.kind, reply.id) == (Kind.RESPONSE, 1), i
    await wait_no_connections(server)
    await assert_serves(minicluster.client(server.address))


async def test_server_close_does_not_wait_forever_for_a_peer_that_never_reads(
    minicluster: MiniCluster,
) -> None:
    # Replies stay buffered below the high-water mark (so the stall timer never starts);
    # closing the server must still finish.
    server = await minicluster.start_server("closing", [], write_buffer_high_bytes=256 << 20)
    sock = _small_receive_socket()
    await asyncio.get_running_loop().sock_connect(sock, (server.host, server.port))
    reader, writer = await asyncio.open_connection(sock=sock)
    peer = RawPeer(reader, writer)
    try:
        await peer.hello()
        (conn,) = server.connections
        for i in range(1, 201):
            peer.send(Kind.REQUEST, i, ECHO.name, EchoRequest(bytes(64 * 1024)))
        assert conn.transport is not None
        transport = conn.transport
        await eventually(lambda: transport.get_write_buffer_size() > 1 << 20)
        async with asyncio.timeout(10):
            await server.close()
        assert not server.connections
    finally:
        writer.transport.abort()
        await peer.close()


# -- invalid UTF-8 (issue 17 item 9): typed InvalidArgument, no traceback -----------------


def _with_invalid_utf8(frame: bytearray, placeholder: bytes) -> bytes:
    """``frame`` with the msgpack string ``placeholder`` (3 bytes) made invalid UTF-8."""
    assert len(placeholder) == 3
    encoded = b"\xa3" + placeholder
    assert bytes(frame).count(encoded) == 1
    return bytes(frame).replace(encoded, b"\xa3\xff\xfe\xfd")


async def test_invalid_utf8_is_a_typed_invalid_argument_without_traceback(
    fresh: RpcServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with raw_peer(fresh.address) as peer:
        peer.send_raw(_with_invalid_utf8(
            encode_frame(Kind.HELLO, 0, "", Hello(PROTOCOL_VERSION, user="\x01\x02\x03")),
            b"\x01\x02\x03",
        ))
        error = await peer.expect_connection_error(InvalidArgument)
        assert "UTF-8" in error.message
    async with raw_peer(fresh.address) as peer:
        await peer.hello()
        # in a request body: that call fails, the connection stays open
        peer.send_raw(_with_invalid_utf8(
            encode_frame(Kind.REQUEST, 1, FAIL.name, FailRequest(0, "\x01\x02\x03")),
            b"\x01\x02\x03",
        ))
        call_id, error = await peer.recv_error()
        assert (call_id, type(error)) == (1, InvalidArgument)
        assert "UTF-8" in error.message
        peer.send(Kind.REQUEST, 2, PING.name, Empty())
        reply = await peer.recv()
        assert (reply.kind, reply.id) == (Kind.RESPONSE, 2)
        # in the envelope itself (the method name): the frame is unusable, the connection ends
        peer.send_raw(_with_invalid_utf8(
            encode_frame(Kind.REQUEST, 3, "\x01\x02\x03", Empty()), b"\x01\x02\x03"
        ))
        await peer.expect_connection_error(InvalidArgument)
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
