"""A server hands on at most ``rpc.frames_per_turn`` frames of one read per event-loop turn:
the rest wait (reading paused, since they still view the receive buffer) for later turns,
in order, so whatever else is ready meanwhile (another connection's read, a flush's
completion) is not kept waiting behind a busy client's dozens of calls."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec

from tests.rpc.test_write_batching import RecordingTransport
from xdfs.config import RpcConfig
from xdfs.rpc.connection import encode_frame
from xdfs.rpc.handling import CallContext, Principal
from xdfs.rpc.messages import K_REQUEST, LENGTH_PREFIX, InEnvelope
from xdfs.rpc.server import RpcServer
from xdfs.rpc.server_connection import ServerConnection
from xdfs.rpc.service import Method, Service


class Note(msgspec.Struct):
    name: str


NOTE = Method("test_note", Note, Note, idempotent=True)
SERVICE = Service("test.turns", (NOTE,))


class Handlers:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def test_note(self, ctx: CallContext, request: Note) -> Note:
        self.seen.append(request.name)
        return request


class Transport(RecordingTransport):
    """What a ServerConnection does with its socket: the ids of the frames it writes, and
    reading paused or not."""

    def __init__(self) -> None:
        super().__init__()
        self.replies: list[int] = []
        self.reading = True

    def write(self, data: Any) -> None:
        view, at = memoryview(bytes(data)), 0
        while at < len(view):
            (length,) = LENGTH_PREFIX.unpack_from(view, at)
            body = view[at + LENGTH_PREFIX.size : at + LENGTH_PREFIX.size + length]
            self.replies.append(msgspec.msgpack.decode(body, type=InEnvelope).id)
            at += LENGTH_PREFIX.size + length

    def writelines(self, parts: Any) -> None:
        for part in parts:
            self.write(part)

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


def connection(server: RpcServer) -> tuple[ServerConnection, Transport]:
    conn = ServerConnection(server)
    transport = Transport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    conn.principal = Principal("alice")  # (the handshake is not what this is about)
    return conn, transport


def receive(conn: ServerConnection, data: bytes) -> None:
    """``data`` arriving in one read."""
    buffer = conn.get_buffer(len(data))
    buffer[: len(data)] = data
    conn.buffer_updated(len(data))


def requests(prefix: str, first_id: int, count: int) -> bytes:
    return b"".join(bytes(encode_frame(K_REQUEST, first_id + i, NOTE.name, Note(f"{prefix}{i}")))
                    for i in range(count))


def server(frames_per_turn: int) -> tuple[RpcServer, Handlers]:
    srv = RpcServer("turns", RpcConfig(frames_per_turn=frames_per_turn))
    handlers = Handlers()
    srv.add_service(SERVICE, handlers)
    return srv, handlers


async def turns(count: int = 5) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


async def test_a_read_of_many_calls_is_handled_a_few_frames_per_turn_in_order() -> None:
    srv, handlers = server(frames_per_turn=8)
    conn, transport = connection(srv)
    receive(conn, requests("a", 1, 20))
    assert handlers.seen == [f"a{i}" for i in range(8)]
    assert transport.replies == list(range(1, 9))  # the first turn's answers leave at once
    assert not transport.reading  # the rest still view the receive buffer
    await turns()
    assert handlers.seen == [f"a{i}" for i in range(20)]
    assert transport.replies == list(range(1, 21))
    assert transport.reading


async def test_another_connection_is_served_before_a_busy_ones_later_frames() -> None:
    srv, handlers = server(frames_per_turn=8)
    busy, _ = connection(srv)
    other, other_transport = connection(srv)
    receive(busy, requests("busy", 1, 30))
    receive(other, requests("other", 1, 1))  # ready in the same turn of the loop
    await turns()
    assert handlers.seen.index("other0") == 8  # right after the busy one's first 8
    assert len(handlers.seen) == 31 and other_transport.replies == [1]


async def test_a_frame_cut_by_the_read_completes_after_the_held_ones() -> None:
    srv, handlers = server(frames_per_turn=4)
    conn, transport = connection(srv)
    data = requests("a", 1, 10) + requests("b", 11, 1)
    cut = len(data) - 5
    receive(conn, data[:cut])  # ten whole frames and most of the eleventh
    await turns()
    assert transport.reading and handlers.seen == [f"a{i}" for i in range(10)]
    receive(conn, data[cut:])
    assert handlers.seen[-1] == "b0" and transport.replies == list(range(1, 12))


async def test_zero_hands_on_every_frame_of_a_read_at_once() -> None:
    srv, handlers = server(frames_per_turn=0)
    conn, transport = connection(srv)
    receive(conn, requests("a", 1, 50))
    assert len(handlers.seen) == 50 and transport.reading
