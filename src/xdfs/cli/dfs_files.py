"""More data commands of ``xdfs dfs``, as ``hdfs dfs`` has them: -head, -text, -checksum,
-getmerge, -moveFromLocal, -moveToLocal."""

from __future__ import annotations

import hashlib
import os
import struct
import sys
import zlib
from typing import Any, BinaryIO

import click
import crc32c

from xdfs.cli.dfs_base import Args, command, each_path, expanded, one_match
from xdfs.cli.dfs_data import local_destination_ok, upload

HEAD_BYTES = 1024
#: HDFS's checksum chunk: one CRC32C per 512 bytes of a block.
CRC_CHUNK_BYTES = 512
_GZIP_MAGIC = b"\x1f\x8b"


@command("-head", "<file>", max_args=1)
def head(client: Any, args: Args) -> int:
    """The first kilobyte of a file (as hdfs dfs -head)."""
    out = sys.stdout.buffer

    def show(path: str) -> None:
        client.copy_to(path, out.write, 0, HEAD_BYTES)
        out.flush()

    return each_path(client, "head", args.values, show)


@command("-text", "<src> ...")
def text(client: Any, args: Args) -> int:
    """Print files, gunzipped when they are gzip (by their first bytes, as hdfs does;
    concatenated gzip members too); any other file as it is."""
    out = sys.stdout.buffer

    def show(path: str) -> None:
        sink = _TextSink(out)
        client.copy_to(path, sink.write)
        sink.close()
        out.flush()

    return each_path(client, "text", args.values, show)


class _TextSink:
    """Writes what it is given to ``out``, gunzipped once the first bytes say gzip."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.start = b""
        self.gunzip: Any = None  # a zlib decompressor while the data is gzip
        self.plain = False

    def write(self, data: bytes | memoryview) -> None:
        if not self.plain and self.gunzip is None:
            self.start += bytes(data)
            if len(self.start) < len(_GZIP_MAGIC):
                return
            data, self.start = self.start, b""
            if data[:2] == _GZIP_MAGIC:
                self.gunzip = zlib.decompressobj(wbits=31)
            else:
                self.plain = True
        if self.plain:
            self.out.write(data)
            return
        self._gunzip(bytes(data))

    def _gunzip(self, data: bytes) -> None:
        while data:
            try:
                self.out.write(self.gunzip.decompress(data))
            except zlib.error as exc:
                raise OSError(f"corrupt gzip data: {exc}") from None
            if not self.gunzip.eof:
                return
            data = self.gunzip.unused_data  # the next gzip member
            self.gunzip = zlib.decompressobj(wbits=31)

    def close(self) -> None:
        if self.start:  # shorter than the magic: plain
            self.out.write(self.start)


@command("-checksum", "<src> ...")
def checksum(client: Any, args: Args) -> int:
    """HDFS's file checksum, MD5-of-MD5-of-CRC32C: a CRC32C per 512 bytes of each block,
    an MD5 over each block's CRCs, an MD5 over the blocks' MD5s; printed as hdfs does (path,
    algorithm name, then bytes per CRC, CRCs per block and the MD5, in hex)."""

    def show(path: str) -> None:
        name, value = file_checksum(client, path)
        click.echo(f"{path}\t{name}\t{value.hex()}")

    return each_path(client, "checksum", args.values, show)


def file_checksum(client: Any, path: str) -> tuple[str, bytes]:
    """(algorithm name, checksum bytes) of a file. Computed here from the data (the
    DataNodes keep one CRC per ``datanode.checksum_chunk_bytes``, not per 512 bytes): the
    same value HDFS gives for the same bytes and block boundaries."""
    from xdfs.errors import IsADirectory

    if client.stat(path).is_dir:
        raise IsADirectory(f"{path} is a directory")
    located = client.block_locations(path)
    block_md5s = []
    for block in located.blocks:
        summer = _BlockCrcs()
        client.copy_to(path, summer.write, block.offset, block.block.num_bytes)
        block_md5s.append(summer.md5())
    crc_per_block = 0
    if len(located.blocks) > 1:  # as HDFS: the first block's CRC count, 0 for one block
        crc_per_block = -(-located.blocks[0].block.num_bytes // CRC_CHUNK_BYTES)
    digest = hashlib.md5(b"".join(block_md5s)).digest()
    name = f"MD5-of-{crc_per_block}MD5-of-{CRC_CHUNK_BYTES}CRC32C"
    return name, struct.pack(">iq", CRC_CHUNK_BYTES, crc_per_block) + digest


class _BlockCrcs:
    """The CRC32C of each 512-byte chunk of one block's bytes, big-endian, as HDFS's."""

    def __init__(self) -> None:
        self.pending = b""
        self.crcs = bytearray()

    def write(self, data: bytes | memoryview) -> None:
        data = self.pending + bytes(data)
        whole = len(data) - len(data) % CRC_CHUNK_BYTES
        for start in range(0, whole, CRC_CHUNK_BYTES):
            self.crcs += crc32c.crc32c(data[start : start + CRC_CHUNK_BYTES]).to_bytes(4, "big")
        self.pending = data[whole:]

    def md5(self) -> bytes:
        if self.pending:
            self.crcs += crc32c.crc32c(self.pending).to_bytes(4, "big")
            self.pending = b""
        return hashlib.md5(bytes(self.crcs)).digest()


@command("-getmerge", "[-nl] [-skip-empty-file] <src> ... <localdst>", "-nl -skip-empty-file",
         min_args=2)
def getmerge(client: Any, args: Args) -> int:
    """Concatenate files (a directory: its files, by name, not recursively) into one local
    file; -nl adds a newline after each file, -skip-empty-file skips empty ones."""
    *sources, local = args.values
    files: list[Any] = []

    def collect(path: str) -> None:
        status = client.stat(path)
        entries = client.list_dir(path) if status.is_dir else [status]
        files.extend(entry for entry in entries if not entry.is_dir)

    def merge(_local: str) -> None:
        with open(local, "wb") as out:
            for entry in files:
                if entry.length == 0 and "-skip-empty-file" in args.flags:
                    continue
                client.copy_to(entry.path, out.write)
                if "-nl" in args.flags:
                    out.write(b"\n")

    status = each_path(client, "getmerge", sources, collect)
    return each_path(client, "getmerge", [local], merge, glob=False) or status


@command("-moveFromLocal", "[-f] <localsrc> ... <dst>", "-f", min_args=2)
def move_from_local(client: Any, args: Args) -> int:
    """-put, then each local source that was uploaded is deleted."""
    *sources, pattern = args.values
    dst = one_match(client, "moveFromLocal", pattern)
    if dst is None:
        return 1

    def move(src: str) -> None:
        upload(client, src, dst, "-f" in args.flags)
        _remove_local(src)

    return each_path(client, "moveFromLocal", sources, move, glob=False)


def _remove_local(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        for root, dirs, names in os.walk(path, topdown=False):
            for name in names:
                os.unlink(os.path.join(root, name))
            for name in dirs:
                os.rmdir(os.path.join(root, name))
        os.rmdir(path)
    else:
        os.unlink(path)


@command("-moveToLocal", "<src> ... <localdst>", min_args=2)
def move_to_local(client: Any, args: Args) -> int:
    """-get, then each source that was downloaded is deleted (to the trash when it is on,
    as -rm would). hdfs answers "not implemented yet"; xdfs does it."""
    *patterns, local = args.values
    sources, failed = expanded(client, "moveToLocal", patterns)
    if not sources or not local_destination_ok("moveToLocal", local, len(sources)):
        return 1

    def move(src: str) -> None:
        client.get(src, local)
        client.delete(src, recursive=True, skip_trash=False)

    return each_path(client, "moveToLocal", sources, move, glob=False) or failed
