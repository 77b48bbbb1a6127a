"""Frames sent while handling what one read brought leave in one socket write, in order;
a frame sent at any other time is written at once (a client's requests made in one loop
turn while others are in flight: together at the end of that turn, or in parts of
``rpc.request_batch_bytes``). A stream consumer can
take every chunk that arrived together in one batch, and learns with it whether the stream
ended."""

from __future__ import annotations

import asyncio
from typing import Any

import crc32c

from xdfs.config import RpcConfig
from xdfs.protocol.system import PING
from xdfs.rpc.client_connection import ClientConnection
from xdfs.rpc.connection import RpcProtocol, encode_frame
from xdfs.rpc.messages import Chunk, Empty, InEnvelope, Kind, Tail
from xdfs.rpc.streams import StreamReceiver


class RecordingTransport:
    """What the protocol hands the socket: the bytes of each write or writelines call."""

    def __init__(self) -> None:
        self.calls: list[bytes] = []

    def write(self, data: Any) -> None:
        self.calls.append(bytes(data))

    def writelines(self, frames: Any) -> None:
        self.calls.append(b"".join(bytes(frame) for frame in frames))

    def is_closing(self) -> bool:
        return False

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        pass

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 1)


class Echoing(RpcProtocol):
    """Answers every frame at once with a RESPONSE carrying its id."""

    def on_envelope(self, envelope: InEnvelope) -> None:
        self.send(Kind.RESPONSE, envelope.id, "", None)


def receive(proto: RpcProtocol, data: bytes) -> None:
    """``data`` arriving in one read."""
    buffer = proto.get_buffer(len(data))
    buffer[: len(data)] = data
    proto.buffer_updated(len(data))


async def test_replies_to_one_read_leave_in_one_write_in_order() -> None:
    proto = Echoing(RpcConfig())
    transport = RecordingTransport()
    proto.connection_made(transport)  # type: ignore[arg-type]
    requests = b"".join(bytes(encode_frame(Kind.REQUEST, i, "m", None)) for i in range(1, 6))
    receive(proto, requests)
    assert transport.calls == [
        b"".join(bytes(encode_frame(Kind.RESPONSE, i, "", None)) for i in range(1, 6))
    ]
    proto.send(Kind.RESPONSE, 9, "", None)  # not while receiving: written at once
    assert transport.calls[-1] == bytes(encode_frame(Kind.RESPONSE, 9, "", None))


class Silent(RpcProtocol):
    def on_envelope(self, envelope: InEnvelope) -> None:
        pass


def chunk(seq: int, data: bytes) -> Chunk:
    return Chunk(seq, crc32c.crc32c(data), memoryview(data))


async def test_next_batch_takes_what_arrived_and_says_when_the_stream_ended() -> None:
    proto = Silent(RpcConfig())
    proto.connection_made(RecordingTransport())  # type: ignore[arg-type]
    receiver = StreamReceiver(proto, 1, window_chunks=8)
    receiver.on_chunk(chunk(0, b"a"))
    receiver.on_chunk(chunk(1, b"bc"))
    assert await receiver.next_batch() == ([memoryview(b"a"), memoryview(b"bc")], False)
    receiver.on_chunk(chunk(2, b"d"))
    receiver.on_tail(Tail(3, 4))
    batch, ended = await receiver.next_batch()
    assert (batch, ended) == ([memoryview(b"d")], True)
    assert receiver.exhausted  # the handler may return: the stream was read to its end
    assert await receiver.next_batch() == ([], True)


async def test_requests_made_in_one_loop_turn_leave_in_one_write_a_lone_one_at_once() -> None:
    conn = ClientConnection(RpcConfig())
    transport = RecordingTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    lone = asyncio.ensure_future(conn.call(PING, Empty(), 30.0, logical_call=1))
    await asyncio.sleep(0)
    assert transport.calls == [bytes(encode_frame(Kind.REQUEST, 1, PING.name, Empty(), 1))]
    # Five callers woken together (as by one batch of answers), the lone call still out.
    calls = [asyncio.ensure_future(conn.call(PING, Empty(), 30.0, logical_call=n))
             for n in range(2, 7)]
    await asyncio.sleep(0)  # they send
    await asyncio.sleep(0)  # the loop turn after: the queued requests are written
    assert transport.calls[1:] == [
        b"".join(bytes(encode_frame(Kind.REQUEST, n, PING.name, Empty(), n)) for n in range(2, 7)),
    ]
    receive(conn, b"".join(bytes(encode_frame(Kind.RESPONSE, n, "", Empty()))
                           for n in range(1, 7)))
    assert await asyncio.gather(lone, *calls) == [Empty()] * 6


def frame_bytes(kind: int, call_id: int, method: str, body: Any, call: int = 0) -> bytes:
    return bytes(encode_frame(kind, call_id, method, body, call))


async def test_requests_of_one_loop_turn_leave_in_parts_of_request_batch_bytes() -> None:
    """A client's requests made in one loop turn leave as soon as ``request_batch_bytes``
    wait (the server starts on them while the callers still to step make the rest), in
    order; the rest at the end of the turn. 0: all of them at the end of the turn."""
    one = len(frame_bytes(Kind.REQUEST, 10, PING.name, Empty(), 10))
    conn = ClientConnection(RpcConfig(request_batch_bytes=3 * one))
    transport = RecordingTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    lone = asyncio.ensure_future(conn.call(PING, Empty(), 30.0, logical_call=1))
    await asyncio.sleep(0)
    calls = [asyncio.ensure_future(conn.call(PING, Empty(), 30.0, logical_call=n))
             for n in range(10, 17)]
    await asyncio.sleep(0)  # they send: two parts of three at once
    requests = [frame_bytes(Kind.REQUEST, n - 8, PING.name, Empty(), n) for n in range(10, 17)]
    assert transport.calls[1:] == [b"".join(requests[0:3]), b"".join(requests[3:6])]
    await asyncio.sleep(0)  # the loop turn after: the last one
    assert transport.calls[3:] == [requests[6]]
    receive(conn, b"".join(frame_bytes(Kind.RESPONSE, n, "", Empty()) for n in range(1, 9)))
    assert await asyncio.gather(lone, *calls) == [Empty()] * 8


async def test_requests_of_one_loop_turn_leave_together_with_request_batch_bytes_0() -> None:
    conn = ClientConnection(RpcConfig(request_batch_bytes=0))
    transport = RecordingTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    lone = asyncio.ensure_future(conn.call(PING, Empty(), 30.0, logical_call=1))
    await asyncio.sleep(0)
    calls = [asyncio.ensure_future(conn.call(PING, Empty(), 30.0, logical_call=n))
             for n in range(10, 60)]
    await asyncio.sleep(0)
    assert len(transport.calls) == 1
    await asyncio.sleep(0)
    assert transport.calls[1:] == [b"".join(
        frame_bytes(Kind.REQUEST, n - 8, PING.name, Empty(), n) for n in range(10, 60))]
    receive(conn, b"".join(frame_bytes(Kind.RESPONSE, n, "", Empty()) for n in range(1, 52)))
    assert await asyncio.gather(lone, *calls) == [Empty()] * 51


class AnswersAroundAChunk(RpcProtocol):
    """Answers a frame with a RESPONSE, a CHUNK whose data is sent uncopied, a RESPONSE."""

    def on_envelope(self, envelope: InEnvelope) -> None:
        self.send(Kind.RESPONSE, 1, "", None)
        self.send(Kind.CHUNK, 2, "", chunk(0, b"data"))
        self.send(Kind.RESPONSE, 3, "", None)


async def test_frames_queued_around_a_chunk_keep_their_order() -> None:
    proto = AnswersAroundAChunk(RpcConfig())
    transport = RecordingTransport()
    proto.connection_made(transport)  # type: ignore[arg-type]
    receive(proto, bytes(encode_frame(Kind.REQUEST, 1, "m", None)))
    assert transport.calls == [b"".join([
        bytes(encode_frame(Kind.RESPONSE, 1, "", None)),
        bytes(encode_frame(Kind.CHUNK, 2, "", chunk(0, b"data"))),
        bytes(encode_frame(Kind.RESPONSE, 3, "", None)),
    ])]
