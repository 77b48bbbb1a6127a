"""The NameNode's ops as edit records: the op-aware half of the framing in
:mod:`xdfs.editlog.framing` (which knows records only as opcode, txid and opaque payload).

A record's payload is the op as msgpack (:data:`xdfs.namenode.namespace.ops.OP_ENCODER`), its opcode
the op's ``OPCODE``.
"""

from __future__ import annotations

from typing import Final

from xdfs.editlog.framing import Buffer, Frame, frame_record
from xdfs.namenode.namespace.ops import OP_ENCODER, Op, decode_op

#: (Final: a C static of the compiled module; every mutation encodes its ops here.)
_OP_ENCODER: Final = OP_ENCODER


def encode_record(txid: int, op: Op) -> bytes:
    return frame_record(op.OPCODE, txid, _OP_ENCODER.encode(op))


def decode_payload(opcode: int, payload: Buffer) -> Op:
    """Decode an op; raises ValueError naming the problem (unknown opcode, bad payload) --
    with a good crc that means a format bug or corruption, never a torn write."""
    try:
        return decode_op(opcode, bytes(payload) if isinstance(payload, bytearray) else payload)
    except KeyError:
        raise ValueError(f"unknown opcode {opcode}") from None
    except Exception as exc:  # msgspec.DecodeError / ValidationError
        raise ValueError(f"opcode {opcode}: bad payload: {exc}") from None


def decode_frame(data: Buffer, frame: Frame) -> Op:
    return decode_payload(frame.opcode, frame.payload(data))
