"""Replica checksum files (``blk_<id>_<genstamp>.meta``): format, computation, verification.

Pure: bytes in, bytes or errors out. A meta file is a 16-byte header followed by one
big-endian CRC32C per ``bytes_per_checksum`` chunk of the block's data (the last chunk may
be partial; an empty block has no CRC)::

    b"XDFSMETA" | u16 version (1) | u16 reserved (0) | u32 bytes_per_checksum | u32 crc ...

The chunk size is stored in the header so a replica stays readable after
``datanode.checksum_chunk_bytes`` changes.
"""

from __future__ import annotations

import struct

import crc32c

from xdfs.errors import CorruptReplica

META_MAGIC = b"XDFSMETA"
META_VERSION = 1
META_HEADER = struct.Struct(">8sHHI")
CRC_BYTES = 4
#: Smallest and largest chunk a header may name (wider than the config range: old files).
_CHUNK_BYTES_MIN = 512
_CHUNK_BYTES_MAX = 16 << 20


def meta_header(bytes_per_checksum: int) -> bytes:
    assert _CHUNK_BYTES_MIN <= bytes_per_checksum <= _CHUNK_BYTES_MAX
    return META_HEADER.pack(META_MAGIC, META_VERSION, 0, bytes_per_checksum)


def parse_meta_header(data: bytes, source: str) -> int:
    """The bytes-per-checksum a meta header names; CorruptReplica when it is not a header."""
    if len(data) < META_HEADER.size:
        raise CorruptReplica(f"{source}: checksum file shorter than its header")
    magic, version, _reserved, chunk_bytes = META_HEADER.unpack_from(data)
    if magic != META_MAGIC:
        raise CorruptReplica(f"{source}: not a checksum file (magic {magic!r})")
    if version != META_VERSION:
        raise CorruptReplica(f"{source}: checksum file version {version} is not supported")
    if not _CHUNK_BYTES_MIN <= chunk_bytes <= _CHUNK_BYTES_MAX:
        raise CorruptReplica(f"{source}: implausible bytes per checksum {chunk_bytes}")
    return int(chunk_bytes)


def chunk_count(data_bytes: int, bytes_per_checksum: int) -> int:
    return -(-data_bytes // bytes_per_checksum)


def meta_file_bytes(data_bytes: int, bytes_per_checksum: int) -> int:
    """The exact size of the meta file of a replica of ``data_bytes`` bytes."""
    return META_HEADER.size + CRC_BYTES * chunk_count(data_bytes, bytes_per_checksum)


def crc_offset(chunk_index: int) -> int:
    """Where the CRC of chunk ``chunk_index`` sits in the meta file."""
    return META_HEADER.size + CRC_BYTES * chunk_index


def pack_crcs(crcs: list[int]) -> bytes:
    return struct.pack(f">{len(crcs)}I", *crcs)


def unpack_crcs(data: bytes | memoryview) -> tuple[int, ...]:
    return struct.unpack(f">{len(data) // CRC_BYTES}I", data)


class ChecksumBuilder:
    """Per-chunk CRC32C of a byte stream fed in pieces of any size (stream chunks of 1 MiB
    need not line up with checksum chunks)."""

    def __init__(self, bytes_per_checksum: int) -> None:
        self.bytes_per_checksum = bytes_per_checksum
        self._partial_crc = 0
        self._partial_bytes = 0

    def update(self, data: bytes | bytearray | memoryview) -> bytes:
        """Feed ``data``; returns the packed CRCs of the chunks it completed."""
        view = memoryview(data)
        size = len(view)
        step = self.bytes_per_checksum
        done: list[int] = []
        pos = 0
        if self._partial_bytes:
            take = min(step - self._partial_bytes, size)
            self._partial_crc = crc32c.crc32c(view[:take], self._partial_crc)
            self._partial_bytes += take
            pos = take
            if self._partial_bytes == step:
                done.append(self._partial_crc)
                self._partial_crc = self._partial_bytes = 0
        # Whole chunks: one C call each, no per-byte work in Python.
        while size - pos >= step:
            done.append(crc32c.crc32c(view[pos : pos + step]))
            pos += step
        if pos < size:
            self._partial_crc = crc32c.crc32c(view[pos:], self._partial_crc)
            self._partial_bytes += size - pos
        return pack_crcs(done)

    def finish(self) -> bytes:
        """The packed CRC of the trailing partial chunk (nothing when the data ended on a
        chunk boundary)."""
        if not self._partial_bytes:
            return b""
        tail = pack_crcs([self._partial_crc])
        self._partial_crc = self._partial_bytes = 0
        return tail


def first_bad_chunk(
    data: bytes | bytearray | memoryview, crcs: bytes | memoryview, bytes_per_checksum: int
) -> int | None:
    """Index (relative to ``data``) of the first chunk whose CRC differs, or None.

    ``data`` starts on a chunk boundary and ``crcs`` holds one CRC per chunk of it."""
    view = memoryview(data)
    expected = unpack_crcs(crcs)
    if len(expected) != chunk_count(len(view), bytes_per_checksum):
        return 0
    for index, crc in enumerate(expected):
        start = index * bytes_per_checksum
        if crc32c.crc32c(view[start : start + bytes_per_checksum]) != crc:
            return index
    return None
