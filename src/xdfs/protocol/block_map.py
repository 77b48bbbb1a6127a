"""The byte stream of the ``block_map`` download (:data:`xdfs.protocol.namenode.BLOCK_MAP`):
frames of a big-endian u32 length then a msgpack array of
:class:`~xdfs.protocol.namenode.BlockMapRow`. The NameNode encodes them
(:func:`encode_frame`), the client decodes them as chunks arrive (:class:`FrameDecoder`:
chunk boundaries do not follow frames)."""

from __future__ import annotations

import struct

import msgspec

from xdfs.errors import StreamError
from xdfs.protocol.namenode import BlockMapRow

FRAME_HEAD = struct.Struct(">I")

_ENCODER = msgspec.msgpack.Encoder()
_ROWS_DECODER = msgspec.msgpack.Decoder(list[BlockMapRow])


def encode_frame(rows: list[BlockMapRow]) -> bytes:
    payload = _ENCODER.encode(rows)
    return FRAME_HEAD.pack(len(payload)) + payload


class FrameDecoder:
    """Bytes as they arrive -> lists of rows (frames may span chunks)."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes | memoryview) -> list[list[BlockMapRow]]:
        self._buffer += data
        out = []
        while len(self._buffer) >= FRAME_HEAD.size:
            (length,) = FRAME_HEAD.unpack_from(self._buffer)
            end = FRAME_HEAD.size + length
            if len(self._buffer) < end:
                break
            out.append(_ROWS_DECODER.decode(bytes(self._buffer[FRAME_HEAD.size:end])))
            del self._buffer[:end]
        return out

    def finish(self) -> None:
        if self._buffer:
            raise StreamError(f"block map stream ends inside a frame ({len(self._buffer)} "
                              "bytes left)")
