"""Reading a file: block locations from the NameNode, bytes from DataNodes.

Each block is read from one of its replicas (the NameNode lists live ones in random order).
DataNodes verify their checksum files before sending and every stream chunk carries a
CRC32C, so bytes that reach the caller are the bytes that were written. When a replica is
corrupt (reported to the NameNode at once), dead or slow, the read resumes at the same
offset on the next replica; after a round over all of them, the locations are fetched again
(the NameNode may have re-replicated the block), up to ``client.read_rounds`` rounds, and
:data:`OPEN_FILE_EXTRA_ROUNDS` more for a file being written (its writer goes on with the
next block while the targets of a full one still finalize it: the NameNode knows that
block's length before its replicas are reported, a second or so under load).

Reads from the cursor (:meth:`FileReader.read`, behind ``Client.open(path, "rb")`` and the
fsspec file) keep one DataNode stream per block open between calls, as HDFS's
DFSInputStream keeps its block reader: sequential reads of any size cost one request per
block, not one per call. A read elsewhere (a seek) abandons the stream and opens a new one.
Positional reads (:meth:`FileReader.pread`) stay independent of the cursor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncGenerator

from xdfs.client.datanodes import DataNodePool
from xdfs.config import ClientConfig
from xdfs.errors import BlockNotFound, ChecksumError, CorruptReplica, InvalidArgument, XdfsError
from xdfs.protocol import namenode as p
from xdfs.protocol.datanode import READ_BLOCK, BadReplica, BadReplicasRequest, ReadBlockRequest
from xdfs.rpc.client import RpcClient

log = logging.getLogger(__name__)

#: Read rounds beyond ``client.read_rounds`` for a file open for writing (0.2 s more
#: backoff each: 0.6 + 0.8 + 1.0 + 1.2 s), see the module docstring.
OPEN_FILE_EXTRA_ROUNDS = 4


class FileReader:
    """Random access to one file (positional reads and a file-like cursor)."""

    def __init__(
        self,
        nn: RpcClient,
        pool: DataNodePool,
        config: ClientConfig,
        path: str,
        located: p.LocatedBlocks,
        ticket: str = "",
    ) -> None:
        self.nn = nn
        self.ticket = ticket
        self.pool = pool
        self.config = config
        self.path = path
        self.length = located.file_length
        self.blocks = list(located.blocks)
        self.under_construction = located.under_construction
        self.position = 0
        # The sequential stream: where it is in the file, and a piece it already delivered
        # that the last read did not take.
        self._stream: AsyncGenerator[bytes | memoryview, None] | None = None
        self._stream_at = 0
        self._leftover = memoryview(b"")

    # -- file-like cursor -------------------------------------------------------------------

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self.position, os.SEEK_END: self.length}[whence]
        if base + offset < 0:
            raise InvalidArgument(f"seek to a negative position ({base + offset})")
        self.position = base + offset
        return self.position

    def tell(self) -> int:
        return self.position

    async def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes from the cursor (all that is left when ``size < 0``)."""
        wanted = self.length - self.position if size < 0 else size
        parts: list[bytes | memoryview] = []
        while wanted > 0:
            piece = await self._next_piece(wanted)
            if not piece:
                break
            parts.append(piece)
            wanted -= len(piece)
            self.position += len(piece)
        return b"".join(parts)

    async def read_at(self, offset: int, size: int) -> bytes:
        """``size`` bytes at ``offset`` through the cursor: consecutive ranges (a buffered
        file's read-ahead) continue one stream."""
        self.seek(offset)
        return await self.read(size)

    async def _next_piece(self, most: int) -> memoryview:
        """At most ``most`` bytes at the cursor, from the sequential stream."""
        if self._stream_at != self.position:
            await self.close()
        if not self._leftover:
            if self.position >= self.length:
                return memoryview(b"")
            if self._stream is None:
                self._stream = self.iter_range(self.position)
                self._stream_at = self.position
            try:
                self._leftover = memoryview(await anext(self._stream))
            except StopAsyncIteration:
                self._stream = None
                return memoryview(b"")
        piece, self._leftover = self._leftover[:most], self._leftover[most:]
        self._stream_at += len(piece)
        return piece

    async def close(self) -> None:
        """Abandon the sequential stream (the DataNode stops sending); reading again opens
        a new one."""
        stream, self._stream, self._leftover = self._stream, None, memoryview(b"")
        if stream is not None:
            await stream.aclose()

    # -- positional reads -------------------------------------------------------------------

    async def pread(self, offset: int, size: int = -1) -> bytes:
        return b"".join([part async for part in self.iter_range(offset, size)])

    async def iter_range(
        self, offset: int = 0, size: int = -1
    ) -> AsyncGenerator[bytes | memoryview, None]:
        """The bytes of ``[offset, offset + size)`` (clipped to the file), as they arrive
        (each piece is the caller's to keep: nothing reuses its memory)."""
        if offset < 0:
            raise InvalidArgument("offset must be >= 0")
        end = self.length if size < 0 else min(self.length, offset + size)
        for index, located in enumerate(self.blocks):
            start = located.offset
            stop = start + located.block.num_bytes
            if stop <= offset or start >= end or start == stop:
                continue
            first = max(offset, start) - start
            # aclosing: a reader that stops early (close, seek) ends the DataNode stream now
            blocks = self._read_block(index, first, min(end, stop) - start - first)
            async with contextlib.aclosing(blocks):
                async for data in blocks:
                    yield data

    async def _read_block(
        self, index: int, offset: int, length: int
    ) -> AsyncGenerator[bytes | memoryview, None]:
        failures: list[str] = []
        rounds = self.config.read_rounds
        if self.under_construction:
            rounds += OPEN_FILE_EXTRA_ROUNDS
        for round_number in range(rounds):
            if round_number:
                await asyncio.sleep(0.2 * round_number)
                await self._refresh(index)
            located = self.blocks[index]
            for address in located.locations:
                replica = self._read_replica(address, located, offset, length)
                try:
                    async with contextlib.aclosing(replica):
                        async for data in replica:
                            offset += len(data)
                            length -= len(data)
                            yield data
                except XdfsError as exc:
                    failures.append(f"{address}: {exc.message}")
                    await self._on_replica_failure(address, located, exc)
                    continue
                return
        raise BlockNotFound(
            f"{self.path}: could not read block {self.blocks[index].block.block_id} from any "
            f"replica ({'; '.join(failures[-6:]) or 'no live replica'})"
        )

    async def _read_replica(
        self, address: str, located: p.LocatedBlock, offset: int, length: int
    ) -> AsyncGenerator[bytes | memoryview, None]:
        request = ReadBlockRequest(located.block, located.token, offset, length)
        stream = await self.pool.get(address).download(READ_BLOCK, request)
        async with stream:
            received = 0
            async for data in stream:
                received += len(data)
                yield data
            if received != length:
                raise BlockNotFound(f"replica sent {received} of {length} bytes")

    async def _on_replica_failure(
        self, address: str, located: p.LocatedBlock, exc: XdfsError
    ) -> None:
        log.warning("%s: block %d on %s failed: %s", self.path, located.block.block_id,
                    address, exc.message)
        if isinstance(exc, CorruptReplica | ChecksumError):
            bad = BadReplica(located.block.block_id, address, located.token)
            report = BadReplicasRequest([bad])
            try:
                await self.nn.call(p.REPORT_BAD_REPLICAS, report)
            except XdfsError as report_error:
                log.warning("reporting a bad replica failed: %s", report_error)
        else:
            await self.pool.forget(address)

    async def _refresh(self, index: int) -> None:
        """Fetch the block's locations again (new replicas, fresh token)."""
        located = self.blocks[index]
        request = p.BlockLocationsRequest(self.path, located.offset, 1, self.ticket)
        fresh = await self.nn.call(p.BLOCK_LOCATIONS, request)
        for candidate in fresh.blocks:
            if candidate.block.block_id == located.block.block_id:
                self.blocks[index] = candidate
                return
