"""Edit record framing (pure: bytes in, records or a typed problem out; no I/O).

One record, big-endian::

    u32 length | u8 opcode | u64 txid | payload | u32 crc32c
               \\____________ length bytes ____/

``length`` counts opcode, txid and payload (so it is at least 9); ``payload`` is opaque here
(the NameNode's ops as msgpack: :mod:`xdfs.namenode.editlog.codec`); ``crc32c`` covers
opcode, txid and payload. A record therefore occupies ``length + 8`` bytes.

Segment header (start of every segment file)::

    b"XDFSEDIT" | u32 layout_version | u64 first_txid        (20 bytes)

The layout version is the writer's (its owner passes it in); a reader says which version it
expects, or None to accept any and look at :attr:`SegmentHeader.layout_version` itself.

:func:`parse_frame` looks at one record position and answers with a :class:`Frame`, or a
:class:`FrameProblem` saying why not: ``SHORT`` (the bytes end inside the record: a torn
write when at the end of a file), ``BAD_LENGTH`` (length below 9 or above
:data:`RECORD_BYTES_MAX`) or ``BAD_CRC``. Deciding whether a problem is a torn tail (allowed
in the last in-progress segment only) or corruption is the reader's business.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Final

import crc32c

SEGMENT_MAGIC = b"XDFSEDIT"
SEGMENT_HEADER = struct.Struct(">8sIQ")
SEGMENT_HEADER_BYTES = SEGMENT_HEADER.size  # 20

RECORD_HEAD: Final = struct.Struct(">IBQ")  # length, opcode, txid
RECORD_HEAD_BYTES: Final = RECORD_HEAD.size  # 13
CRC: Final = struct.Struct(">I")
_LENGTH: Final = CRC  # a record's length field: the same big-endian u32 (frame_record)
_OPCODE_TXID: Final = struct.Struct(">BQ")
CRC_BYTES: Final = 4
#: length counts opcode + txid + payload, so it is never below this.
LENGTH_MIN: Final = 9
#: Upper bound on one record's length field; anything larger is corruption.
RECORD_BYTES_MAX: Final = 64 * 1024 * 1024

_crc: Final = crc32c.crc32c

Buffer = bytes | bytearray | memoryview


def encode_segment_header(first_txid: int, layout_version: int) -> bytes:
    return SEGMENT_HEADER.pack(SEGMENT_MAGIC, layout_version, first_txid)


@dataclass(frozen=True)
class SegmentHeader:
    layout_version: int
    first_txid: int


def decode_segment_header(data: Buffer, layout_version: int | None) -> SegmentHeader | str:
    """The header, or a string saying what is wrong with it; ``layout_version``: the one
    the caller reads (another is then wrong), None to accept any."""
    if len(data) < SEGMENT_HEADER_BYTES:
        return f"short segment header ({len(data)} of {SEGMENT_HEADER_BYTES} bytes)"
    magic, version, first_txid = SEGMENT_HEADER.unpack_from(data, 0)
    if magic != SEGMENT_MAGIC:
        return f"bad segment magic {bytes(magic)!r}"
    if layout_version is not None and version != layout_version:
        return f"segment layout version {version}, this build reads {layout_version}"
    return SegmentHeader(version, first_txid)


def frame_record(opcode: int, txid: int, payload: bytes) -> bytes:
    # The crc covers opcode, txid and payload: joined first, it is one call of crc32c
    # (a C function called through an argument tuple) instead of two on its parts.
    checked = _OPCODE_TXID.pack(opcode, txid) + payload
    return b"".join((_LENGTH.pack(LENGTH_MIN + len(payload)), checked, CRC.pack(_crc(checked))))


class Problem(enum.Enum):
    SHORT = "short record"
    BAD_LENGTH = "bad record length"
    BAD_CRC = "crc32c mismatch"


@dataclass(frozen=True, slots=True)
class Frame:
    offset: int  # of the length field, relative to the buffer given
    opcode: int
    txid: int
    payload_start: int
    end: int  # one past the crc

    def payload(self, data: Buffer) -> Buffer:
        return data[self.payload_start : self.end - CRC_BYTES]


@dataclass(frozen=True, slots=True)
class FrameProblem:
    offset: int
    problem: Problem
    #: Where the record would end if its length field were right (may lie past the data).
    claimed_end: int
    detail: str


def parse_frame(data: Buffer, offset: int) -> Frame | FrameProblem:
    """Parse the record at ``offset``; ``data`` must hold everything up to the file end
    (or, when streaming, the caller retries a SHORT answer with more bytes)."""
    available = len(data) - offset
    if available < RECORD_HEAD_BYTES:
        return FrameProblem(offset, Problem.SHORT, offset + RECORD_HEAD_BYTES,
                            f"{available} bytes left, a record head needs {RECORD_HEAD_BYTES}")
    length, opcode, txid = RECORD_HEAD.unpack_from(data, offset)
    end = offset + 4 + length + CRC_BYTES
    if length < LENGTH_MIN or length > RECORD_BYTES_MAX:
        return FrameProblem(offset, Problem.BAD_LENGTH, end, f"length field {length}")
    if end > len(data):
        return FrameProblem(offset, Problem.SHORT, end,
                            f"record of {end - offset} bytes, only {available} present")
    (stored,) = CRC.unpack_from(data, end - CRC_BYTES)
    actual = _crc(data[offset + 4 : end - CRC_BYTES])
    if stored != actual:
        return FrameProblem(offset, Problem.BAD_CRC, end,
                            f"stored crc {stored:08x}, computed {actual:08x}")
    return Frame(offset, opcode, txid, offset + RECORD_HEAD_BYTES, end)


def record_bounds(data: Buffer, start: int = 0) -> list[int]:
    """Offsets of each record in ``data`` from ``start`` plus the end offset: reads the
    length fields only (the CRCs were checked when the records were framed or read)."""
    bounds = [start]
    pos = start
    end = len(data)
    head = RECORD_HEAD.unpack_from
    while pos < end:
        (length, _, _) = head(data, pos)
        pos += 4 + length + CRC_BYTES
        assert pos <= end, "record_bounds over a torn buffer"
        bounds.append(pos)
    return bounds


def is_zero_fill(data: Buffer, offset: int) -> bool:
    """True when everything from ``offset`` on is NUL bytes: a file extended by a crash
    before its data reached the disk, which counts as a torn tail too."""
    return not bytes(data[offset:]).lstrip(b"\x00")
