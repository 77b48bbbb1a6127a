"""Frames sent while handling what one read brought leave in one socket write, in order;
a frame sent at any other time is written at once. A stream consumer can take every chunk
that arrived together in one batch, and learns with it whether the stream ended."""

from __future__ import annotations

from typing import Any

import crc32c

from xdfs.config import RpcConfig
from xdfs.rpc.connection import RpcProtocol, encode_frame
from xdfs.rpc.messages import Chunk, InEnvelope, Kind, Tail
from xdfs.rpc.streams import StreamReceiver


class RecordingTransport:
    """What the protocol hands the socket: one entry per write or writelines call."""

    def __init__(self) -> None:
        self.calls: list[list[bytes]] = []

    def write(self, data: Any) -> None:
        self.calls.append([bytes(data)])

    def writelines(self, frames: Any) -> None:
        self.calls.append([bytes(frame) for frame in frames])

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
        [bytes(encode_frame(Kind.RESPONSE, i, "", None)) for i in range(1, 6)]
    ]
    proto.send(Kind.RESPONSE, 9, "", None)  # not while receiving: written at once
    assert transport.calls[-1] == [bytes(encode_frame(Kind.RESPONSE, 9, "", None))]


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
