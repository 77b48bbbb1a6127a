"""The client against a misbehaving server (a fake one, speaking raw frames): every failure
must surface as a typed error on the affected call, never as a hang or a crash."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import crc32c
import pytest

from tests.rpc.wire import RawPeer
from xdfs.errors import (
    ChecksumError,
    ConnectionLost,
    NotActive,
    ProtocolError,
    StreamError,
    Unavailable,
)
from xdfs.protocol.system import (
    ECHO,
    PING,
    SINK,
    SOURCE,
    EchoRequest,
    SinkResult,
    SourceHead,
    SourceRequest,
)
from xdfs.rpc.client_connection import ClientConnection
from xdfs.rpc.messages import (
    PROTOCOL_VERSION,
    Chunk,
    Credit,
    Empty,
    ErrorInfo,
    Hello,
    InEnvelope,
    Kind,
    Tail,
    Welcome,
)
from xdfs.testing.minicluster import MiniCluster

Behaviour = Callable[[RawPeer], Awaitable[None]]


class FakeServer:
    """Accepts connections and runs ``behaviour`` on each, as a raw peer."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.address = ""
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        peer = RawPeer(reader, writer)
        try:
            await self.behaviour(peer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.transport.abort()

    async def __aenter__(self) -> FakeServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.address = f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()


@contextlib.asynccontextmanager
async def fake_connection(
    minicluster: MiniCluster, behaviour: Behaviour, **overrides: Any
) -> AsyncIterator[ClientConnection]:
    async with FakeServer(behaviour) as fake:
        client = minicluster.client(fake.address, tries_per_address=1, **overrides)
        conn = await client.connection(fake.address)
        try:
            yield conn
        finally:
            await client.close()


async def welcome(peer: RawPeer) -> None:
    hello = await peer.recv()
    assert hello.kind == Kind.HELLO
    peer.send(Kind.WELCOME, 0, "", Welcome(PROTOCOL_VERSION, "", "fake", "anonymous"))


async def download_frames(peer: RawPeer, frames: Sequence[tuple[int, Any]]) -> None:
    """Answer one download request with HEAD and then ``frames``; keep the connection."""
    await welcome(peer)
    request = await peer.recv()
    assert request.kind == Kind.REQUEST
    peer.send(Kind.HEAD, request.id, "", SourceHead(0))
    for kind, body in frames:
        peer.send(kind, request.id, "", body)
    await asyncio.Event().wait()  # hold the connection open until the test ends


def chunk(seq: int, data: bytes, crc: int | None = None) -> Chunk:
    return Chunk(seq, crc32c.crc32c(data) if crc is None else crc, memoryview(data))


@pytest.mark.parametrize(
    ("frames", "error_type"),
    [
        ([(Kind.CHUNK, chunk(0, b"abc", crc=1))], ChecksumError),
        ([(Kind.CHUNK, chunk(1, b"abc"))], StreamError),
        ([(Kind.CHUNK, chunk(0, b"abc")), (Kind.TAIL, Tail(2, 3))], StreamError),
        ([(Kind.CHUNK, chunk(0, b"abc")), (Kind.TAIL, Tail(1, 4))], StreamError),
        ([(Kind.ERROR, ErrorInfo(NotActive.code, "went standby"))], NotActive),
    ],
    ids=["bad-crc", "out-of-order", "tail-count", "tail-bytes", "error-mid-stream"],
)
async def test_bad_download_stream_fails_the_reader(
    minicluster: MiniCluster, frames: list[tuple[int, Any]], error_type: type[Exception]
) -> None:
    async def behaviour(peer: RawPeer) -> None:
        await download_frames(peer, frames)

    async with fake_connection(minicluster, behaviour) as conn:
        stream = await conn.download(SOURCE, SourceRequest(3), 10)
        with pytest.raises(error_type):
            await stream.read_all()


async def test_good_download_from_the_fake_server(minicluster: MiniCluster) -> None:
    # The fake speaks the protocol correctly here: the failures above are the frames' fault.
    async def behaviour(peer: RawPeer) -> None:
        await download_frames(
            peer, [(Kind.CHUNK, chunk(0, b"abc")), (Kind.CHUNK, chunk(1, b"de")),
                   (Kind.TAIL, Tail(2, 5))],
        )

    async with fake_connection(minicluster, behaviour) as conn:
        stream = await conn.download(SOURCE, SourceRequest(5), 10)
        assert await stream.read_all() == b"abcde"


async def test_server_exceeding_the_download_window_loses_the_connection(
    minicluster: MiniCluster,
) -> None:
    window = 2
    frames = [(Kind.CHUNK, chunk(i, b"x")) for i in range(window + 1)]

    async def behaviour(peer: RawPeer) -> None:
        await download_frames(peer, frames)

    async with fake_connection(minicluster, behaviour, stream_window_chunks=window) as conn:
        stream = await conn.download(SOURCE, SourceRequest(3), 10)
        await conn.wait_closed()  # the client hung up on the server
        with pytest.raises(ConnectionLost):
            await stream.read_all()


async def test_response_of_the_wrong_type_fails_only_that_call(minicluster: MiniCluster) -> None:
    async def behaviour(peer: RawPeer) -> None:
        await welcome(peer)
        first = await peer.recv()
        peer.send(Kind.RESPONSE, first.id, "", "not an EchoResponse")
        second = await peer.recv()
        peer.send(Kind.RESPONSE, second.id, "", EchoRequest(b"ok"))  # same layout as reply
        await asyncio.Event().wait()

    async with fake_connection(minicluster, behaviour) as conn:
        with pytest.raises(ProtocolError, match="bad response"):
            await conn.call(ECHO, EchoRequest(b"1"), 10)
        assert (await conn.call(ECHO, EchoRequest(b"2"), 10)).payload == b"ok"


async def test_answers_to_unknown_calls_are_ignored(minicluster: MiniCluster) -> None:
    async def behaviour(peer: RawPeer) -> None:
        await welcome(peer)
        request = await peer.recv()
        peer.send(Kind.RESPONSE, 999, "", Empty())
        peer.send(Kind.ERROR, 998, "", ErrorInfo(101, "stray"))
        peer.send(Kind.CHUNK, 997, "", chunk(0, b"stray"))
        peer.send(Kind.RESPONSE, request.id, "", Empty())
        await asyncio.Event().wait()

    async with fake_connection(minicluster, behaviour) as conn:
        assert await conn.call(PING, Empty(), 10) == Empty()
        assert not conn.is_closing


async def test_connection_level_error_fails_every_pending_call(minicluster: MiniCluster) -> None:
    async def behaviour(peer: RawPeer) -> None:
        await welcome(peer)
        await peer.recv()
        await peer.recv()
        peer.send(Kind.ERROR, 0, "", ErrorInfo(NotActive.code, "demoted"))
        await asyncio.Event().wait()

    async with fake_connection(minicluster, behaviour) as conn:
        calls = [asyncio.create_task(conn.call(PING, Empty(), 10)) for _ in range(2)]
        for call in calls:
            with pytest.raises(NotActive, match="demoted"):
                await call


@pytest.mark.parametrize(
    "garbage",
    [b"\xff\xff\xff\xff", b"\x00\x00\x00\x02\xc1\xc1", b"\x00\x00\x00\x01\x01"],
    ids=["huge-frame", "not-msgpack", "not-an-envelope"],
)
async def test_garbage_from_the_server_fails_pending_calls(
    minicluster: MiniCluster, garbage: bytes
) -> None:
    async def behaviour(peer: RawPeer) -> None:
        await welcome(peer)
        await peer.recv()
        peer.send_raw(garbage)
        await asyncio.Event().wait()

    async with fake_connection(minicluster, behaviour) as conn:
        with pytest.raises(ConnectionLost):
            await conn.call(PING, Empty(), 10)
        assert conn.is_closing


async def test_unexpected_frame_kind_from_the_server(minicluster: MiniCluster) -> None:
    async def behaviour(peer: RawPeer) -> None:
        await welcome(peer)
        await peer.recv()
        peer.send(Kind.REQUEST, 1, PING.name, Empty())  # servers do not call clients
        await asyncio.Event().wait()

    async with fake_connection(minicluster, behaviour) as conn:
        with pytest.raises(ConnectionLost):
            await conn.call(PING, Empty(), 10)


async def test_server_that_never_welcomes_times_out(minicluster: MiniCluster) -> None:
    async def behaviour(peer: RawPeer) -> None:
        await peer.recv()  # the HELLO, never answered
        await asyncio.Event().wait()

    async with FakeServer(behaviour) as fake:
        client = minicluster.client(fake.address, tries_per_address=2, connect_timeout_s=0.2)
        with pytest.raises(Unavailable, match="timed out"):
            await client.call(PING, Empty())


@pytest.mark.parametrize(
    "answer",
    [
        lambda peer: peer.send(Kind.WELCOME, 0, "", "not a Welcome"),
        lambda peer: peer.send(Kind.RESPONSE, 1, "", Empty()),
        lambda peer: peer.send_raw(b"\x00\x00\x00\x01\xc1"),
    ],
    ids=["bad-welcome", "response-before-welcome", "garbage"],
)
async def test_bad_handshake_answer_is_unavailable(
    minicluster: MiniCluster, answer: Callable[[RawPeer], None]
) -> None:
    async def behaviour(peer: RawPeer) -> None:
        await peer.recv()
        answer(peer)
        await asyncio.Event().wait()

    async with FakeServer(behaviour) as fake:
        # (A stray RESPONSE is ignored, so that case ends by the connect deadline.)
        client = minicluster.client(fake.address, tries_per_address=1, connect_timeout_s=0.5)
        with pytest.raises((Unavailable, ProtocolError)):
            await client.call(PING, Empty())


async def test_the_client_sends_a_well_formed_hello(minicluster: MiniCluster) -> None:
    seen: list[Hello] = []

    async def behaviour(peer: RawPeer) -> None:
        import msgspec

        envelope = await peer.recv()
        assert (envelope.kind, envelope.id, envelope.method) == (Kind.HELLO, 0, "")
        seen.append(msgspec.msgpack.decode(envelope.body, type=Hello))
        peer.send(Kind.WELCOME, 0, "", Welcome(PROTOCOL_VERSION, "c", "fake", "alice"))
        await asyncio.Event().wait()

    async with FakeServer(behaviour) as fake:
        client = minicluster.client(
            fake.address, hello=Hello(PROTOCOL_VERSION, cluster_id="c", user="alice")
        )
        conn = await client.connection(fake.address)
        assert conn.welcome == Welcome(PROTOCOL_VERSION, "c", "fake", "alice")
    # the client adds its id (random, one per RpcClient: the retry-cache key's first half)
    assert len(client.hello.client_id) == 16
    assert seen == [
        Hello(PROTOCOL_VERSION, cluster_id="c", user="alice", client_id=client.hello.client_id)
    ]


async def test_an_uploads_first_chunk_leaves_with_its_head(minicluster: MiniCluster) -> None:
    # Before any window grant: the head, the first chunk and (for a one-chunk upload) the
    # tail; a second chunk waits for the grant, which counts the first.
    seen: list[InEnvelope] = []

    async def behaviour(peer: RawPeer) -> None:
        await welcome(peer)
        for _ in range(3):  # HEAD, CHUNK, TAIL of the one-chunk upload
            seen.append(await peer.recv())
        peer.send(Kind.RESPONSE, seen[0].id, "", SinkResult(0, 0, 0))
        head = await peer.recv()  # the two-chunk upload: HEAD, its first CHUNK
        first = await peer.recv()
        seen.extend([head, first])
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await peer.recv()  # nothing more before the grant
        peer.send(Kind.CREDIT, head.id, "", Credit(2))  # a window of 2, one used
        seen.append(await peer.recv())
        seen.append(await peer.recv())
        peer.send(Kind.RESPONSE, head.id, "", SinkResult(0, 0, 0))
        await asyncio.Event().wait()

    async with fake_connection(minicluster, behaviour) as conn:
        assert await conn.upload(SINK, Empty(), [b"one"], 10) == SinkResult(0, 0, 0)
        assert await conn.upload(SINK, Empty(), [b"a", b"b"], 10) == SinkResult(0, 0, 0)
    kinds = [frame.kind for frame in seen]
    assert kinds == [Kind.HEAD, Kind.CHUNK, Kind.TAIL, Kind.HEAD, Kind.CHUNK, Kind.CHUNK,
                     Kind.TAIL]
