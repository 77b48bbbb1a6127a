"""The log's message format (seed 002) (pure: bytes in, records out); the ``Record`` and
``Lsn`` structs themselves are wire types, in :mod:`xdfs.protocol.log`.

An LSN is ``(ledger id, entry id, batch index)``, ordered lexicographically: ledger ids are
handed out increasing (one ZooKeeper sequence for every log), entry ids count up inside a
ledger, and one entry holds a batch of records (``append_batch``), each with its index.

One record, big-endian::

    u8 magic | u8 attributes | i32 key length | key | u32 payload length | payload
    | u16 header count | (u16 name length | name (UTF-8) | u32 value length | value)*

``key length`` -1 means no key. ``magic`` is the format version (:data:`MAGIC`); the version
rule: a reader refuses a magic it does not know and a record with attribute bits it does not
know (:data:`ATTRIBUTES_KNOWN`), so a new field always comes with a new magic or a new
attribute bit, never silently. An entry (what a ledger stores, CRC32C-framed by the storage
node) is ``u32 record count`` followed by the records.
"""

from __future__ import annotations

import struct

from xdfs.errors import BadRecord
from xdfs.protocol.log import Record

MAGIC = 1
#: No attribute bit is defined yet: every one must be 0.
ATTRIBUTES_KNOWN = 0x00
_HEAD = struct.Struct(">BBi")
_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
#: Upper bound of a key, a header name or value (a log record is not a blob store).
FIELD_BYTES_MAX = 64 * 1024 * 1024
HEADERS_MAX = 65_535


def encode_record(record: Record, out: bytearray) -> None:
    if record.attributes & ~ATTRIBUTES_KNOWN & 0xFF or not 0 <= record.attributes <= 0xFF:
        raise BadRecord(f"record attributes {record.attributes:#x}: no such bits defined")
    if len(record.headers) > HEADERS_MAX:
        raise BadRecord(f"{len(record.headers)} headers, at most {HEADERS_MAX}")
    key = record.key
    out += _HEAD.pack(MAGIC, record.attributes, -1 if key is None else len(key))
    if key is not None:
        out += key
    out += _U32.pack(len(record.payload))
    out += record.payload
    out += _U16.pack(len(record.headers))
    for name, value in record.headers:
        raw = name.encode()
        if len(raw) > 0xFFFF:
            raise BadRecord(f"header name of {len(raw)} bytes, at most 65535")
        out += _U16.pack(len(raw))
        out += raw
        out += _U32.pack(len(value))
        out += value


def encode_entry(records: list[Record]) -> bytes:
    if not records:
        raise BadRecord("an append needs at least one record")
    out = bytearray(_U32.pack(len(records)))
    for record in records:
        encode_record(record, out)
    return bytes(out)


class _Cursor:
    def __init__(self, data: bytes | memoryview) -> None:
        self.data = memoryview(data)
        self.pos = 0

    def take(self, size: int, what: str) -> bytes:
        if size < 0 or size > FIELD_BYTES_MAX or self.pos + size > len(self.data):
            raise BadRecord(f"{what}: {size} bytes at offset {self.pos}, "
                            f"{len(self.data) - self.pos} left")
        chunk = bytes(self.data[self.pos : self.pos + size])
        self.pos += size
        return chunk

    def unpack(self, fmt: struct.Struct, what: str) -> tuple[int, ...]:
        return fmt.unpack(self.take(fmt.size, what))


def decode_entry(data: bytes | memoryview) -> list[Record]:
    cursor = _Cursor(data)
    (count,) = cursor.unpack(_U32, "record count")
    records = [_decode_record(cursor) for _ in range(count)]
    if cursor.pos != len(cursor.data):
        raise BadRecord(f"{len(cursor.data) - cursor.pos} bytes after the last record")
    return records


def _decode_record(cursor: _Cursor) -> Record:
    magic, attributes, key_len = cursor.unpack(_HEAD, "record head")
    if magic != MAGIC:
        raise BadRecord(f"record magic {magic}: this build reads format {MAGIC}")
    if attributes & ~ATTRIBUTES_KNOWN:
        raise BadRecord(f"record attributes {attributes:#x}: unknown bits")
    key = None if key_len == -1 else cursor.take(key_len, "key")
    (size,) = cursor.unpack(_U32, "payload length")
    payload = cursor.take(size, "payload")
    (count,) = cursor.unpack(_U16, "header count")
    headers = []
    for _ in range(count):
        (name_len,) = cursor.unpack(_U16, "header name length")
        try:
            name = cursor.take(name_len, "header name").decode()
        except UnicodeDecodeError as exc:
            raise BadRecord(f"header name is not UTF-8: {exc}") from None
        (value_len,) = cursor.unpack(_U32, "header value length")
        headers.append((name, cursor.take(value_len, "header value")))
    return Record(payload, key, tuple(headers), attributes)
