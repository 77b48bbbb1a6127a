"""Blocking file objects over the async reader and writer (for :class:`Client` and fsspec).

``Client.open(path, "rb")`` returns an ``io.BufferedReader`` (seek, read, readline, iteration)
and ``Client.open(path, "wb")`` an ``io.BufferedWriter``; both run the async data path on the
client's event-loop thread.
"""

from __future__ import annotations

import io
import os
from typing import Any

from xdfs.client.reader import FileReader
from xdfs.client.writer import FileWriter
from xdfs.protocol.namenode import FileStatus
from xdfs.rpc.sync import LoopThread

#: Read-ahead of a buffered reader: one DataNode round trip per this many bytes.
READ_BUFFER_BYTES = 1024 * 1024
#: Bytes a buffered writer collects before handing them to the block writer.
WRITE_BUFFER_BYTES = 1024 * 1024


class SyncReader:
    def __init__(self, loop: LoopThread, reader: FileReader) -> None:
        self._loop = loop
        self.reader = reader

    @property
    def size(self) -> int:
        return self.reader.length

    def pread(self, offset: int, size: int = -1) -> bytes:
        return self._loop.run(self.reader.pread(offset, size))

    def read(self, size: int = -1) -> bytes:
        """From the reader's cursor (which :meth:`FileReader.seek` moves)."""
        return self._loop.run(self.reader.read(size))

    def read_at(self, offset: int, size: int) -> bytes:
        return self._loop.run(self.reader.read_at(offset, size))

    def close(self) -> None:
        """Abandon the sequential stream without waiting: this also runs from the garbage
        collector, possibly at exit when the loop thread no longer runs."""
        self._loop.submit(self.reader.close())


class SyncWriter:
    def __init__(self, loop: LoopThread, writer: FileWriter, inline: bool = False) -> None:
        """``inline``: :meth:`write_and_close` runs in the calling thread (see
        :meth:`FileWriter.write_and_close`)."""
        self._loop = loop
        self.writer = writer
        self._inline = inline

    def write(self, data: bytes | bytearray | memoryview) -> int:
        return self._loop.run(self.writer.write(data))

    def hflush(self) -> None:
        """What was written so far becomes visible to new readers (HDFS's hflush)."""
        self._loop.run(self.writer.hflush())

    def close(self) -> FileStatus:
        return self._loop.run(self.writer.close())

    def write_and_close(self, data: bytes | bytearray | memoryview) -> FileStatus:
        """The last bytes and the close: a small file from the calling thread, with no hop
        to the loop thread (``inline``), else in one hop instead of two."""
        run = self._loop.run_inline if self._inline else self._loop.run
        return run(self.writer.write_and_close(data))

    def abort(self) -> None:
        self._loop.run(self.writer.abort())


class RawReader(io.RawIOBase):
    """The raw layer of ``Client.open(path, "rb")``: the cursor is the FileReader's."""

    def __init__(self, reader: SyncReader, name: str) -> None:
        self._reader = reader
        self.name = name

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self._reader.read(len(view))
        view[: len(data)] = data
        return len(data)

    def readall(self) -> bytes:
        # One call for the rest of the file: RawIOBase's default reads 8 KiB per call.
        return self._reader.read(-1)

    def close(self) -> None:
        if not self.closed:
            try:
                self._reader.close()
            finally:
                super().close()

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        return self._reader.reader.seek(offset, whence)

    def tell(self) -> int:
        return self._reader.reader.tell()


class RawWriter(io.RawIOBase):
    """The raw layer of ``Client.open(path, "wb")``. A first buffer of at most
    ``WRITE_BUFFER_BYTES`` is held until the next one or the close, so a file that fits
    in it leaves with its close (:meth:`SyncWriter.write_and_close`: a small file from the
    calling thread); nothing written is visible to readers before the close anyway."""

    def __init__(self, writer: SyncWriter, name: str) -> None:
        self._writer = writer
        self.name = name
        self.status: FileStatus | None = None
        self._held: bytes | None = None
        self._written = False

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        data = bytes(data)
        if not self._written and len(data) <= WRITE_BUFFER_BYTES:
            self._written = True
            self._held = data
            return len(data)
        self._written = True
        self._send_held()
        return self._writer.write(data)

    def _send_held(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            self._writer.write(held)

    def close(self) -> None:
        if not self.closed:
            try:
                held, self._held = self._held, None
                self.status = (self._writer.close() if held is None
                               else self._writer.write_and_close(held))
            finally:
                super().close()


def buffered_reader(reader: SyncReader, name: str) -> io.BufferedReader:
    return io.BufferedReader(RawReader(reader, name), READ_BUFFER_BYTES)


def buffered_writer(writer: SyncWriter, name: str) -> io.BufferedWriter:
    return io.BufferedWriter(RawWriter(writer, name), WRITE_BUFFER_BYTES)
