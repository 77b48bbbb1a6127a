"""Bulk-data streams: ``head, N chunks, tail`` with CRC32C per chunk and credit-based flow
control, used in both directions (client upload, server download).

The receiver opens the stream by granting the sender its window (``stream_window_chunks``
of the *receiver's* configuration, as a first CREDIT frame) and returns credit only as its
consumer takes chunks, so a slow consumer holds at most one window of
data in memory, and many streams share one connection without blocking each other. A
sender that exceeds its credit has broken the protocol and loses the connection.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from typing import Any, Protocol

import crc32c

from xdfs.errors import ChecksumError, ProtocolError, StreamError, XdfsError
from xdfs.rpc.messages import K_CHUNK, K_CREDIT, K_TAIL, Chunk, Credit, Tail


class FrameSink(Protocol):
    """What a stream needs of its connection (``connection.RpcProtocol`` is one; this
    module never imports it)."""

    def send(self, kind: int, call_id: int, method: str, body: Any,
             logical_call: int = ...) -> None: ...
    async def drain(self) -> None: ...



class SealedChunk:
    """A chunk whose CRC32C its source computed already (at most a chunk's size): a block
    sent to several DataNodes has each chunk's CRC computed once, not once per target."""

    __slots__ = ("crc32c", "data")

    def __init__(self, data: bytes | memoryview, crc: int) -> None:
        self.data = data
        self.crc32c = crc

    @classmethod
    def of(cls, data: bytes | memoryview) -> SealedChunk:
        return cls(data, crc32c.crc32c(data))


ChunkData = bytes | memoryview | SealedChunk
ChunkSource = Iterable[ChunkData] | AsyncIterable[ChunkData]

#: Chunks an upload's sender may send right after its head, before the window grant: a
#: server makes the stream's receiver when it reads the head, before any frame after it,
#: and every receiver's window is at least one chunk (``rpc.stream_window_chunks``). So a
#: block of one chunk goes out at once, with no round trip for the grant.
UPLOAD_CHUNKS_AHEAD = 1


class StreamSender:
    """Sends one stream's chunks as credit allows."""

    def __init__(
        self, proto: FrameSink, stream_id: int, credit_timeout_s: float, lent: int = 0
    ) -> None:
        """``lent``: chunks sent before the receiver's window grant (its first CREDIT),
        which counts them: an upload's first chunk leaves with its head (see
        :data:`UPLOAD_CHUNKS_AHEAD`)."""
        self._proto = proto
        self._id = stream_id
        # Beyond ``lent``, nothing may be sent before the receiver grants its window, so
        # the two ends never have to agree on a window size in advance.
        self._credit = lent
        self._lent = lent
        self._credit_timeout_s = credit_timeout_s
        self._wake = asyncio.Event()
        self._error: XdfsError | None = None
        self.seq = 0
        self.total_bytes = 0

    def on_credit(self, count: int) -> None:
        # The window grant covers the chunks sent ahead of it.
        self._credit += count - self._lent
        self._lent = 0
        self._wake.set()

    def fail(self, error: XdfsError) -> None:
        """Stop the sender (peer error, cancel or connection loss)."""
        if self._error is None:
            self._error = error
        self._wake.set()

    async def send(self, data: bytes | memoryview, crc: int | None = None) -> None:
        """``crc``: the CRC32C of ``data`` when the caller has it."""
        if self._credit <= 0 and self._error is None:
            await self._wait_for_credit()
        if self._error is not None:
            raise self._error
        self._credit -= 1
        chunk = Chunk(self.seq, crc32c.crc32c(data) if crc is None else crc, memoryview(data))
        self._proto.send(K_CHUNK, self._id, "", chunk)
        self.seq += 1
        self.total_bytes += len(data)
        await self._proto.drain()

    async def _wait_for_credit(self) -> None:
        try:
            async with asyncio.timeout(self._credit_timeout_s):
                while self._credit <= 0 and self._error is None:
                    self._wake.clear()
                    await self._wake.wait()
        except TimeoutError:
            raise StreamError(
                f"stream {self._id}: receiver granted no credit for {self._credit_timeout_s} s"
            ) from None

    async def send_all(self, chunks: ChunkSource, chunk_bytes_max: int) -> Tail:
        """Send every chunk of ``chunks`` (split to ``chunk_bytes_max``), then the tail.

        A chunk sent is let go before the next is asked for: a source's pieces may view a
        buffer it pools again only once nothing views it any more (a replica reader's
        aligned buffer, given back when the stream ends: held here, it was unmapped
        instead, and the next reader page-faulted a fresh one in)."""
        if isinstance(chunks, AsyncIterable):
            async for data in chunks:
                await self._send_split(data, chunk_bytes_max)
                del data
        else:
            for data in chunks:
                await self._send_split(data, chunk_bytes_max)
                del data
        if self._error is not None:
            raise self._error
        tail = Tail(self.seq, self.total_bytes)
        self._proto.send(K_TAIL, self._id, "", tail)
        return tail

    async def _send_split(self, data: ChunkData, chunk_bytes_max: int) -> None:
        if isinstance(data, SealedChunk):
            if len(data.data) <= chunk_bytes_max:
                if data.data:
                    await self.send(data.data, data.crc32c)
                return
            data = data.data  # (sealed for larger chunks than this sender's: split anew)
        if len(data) <= chunk_bytes_max:
            if data:
                await self.send(data)
            return
        view = memoryview(data)
        for offset in range(0, len(view), chunk_bytes_max):
            await self.send(view[offset : offset + chunk_bytes_max])


class StreamReceiver:
    """Receives one stream: verifies order and CRC32C, buffers at most one window."""

    def __init__(self, proto: FrameSink, stream_id: int, window_chunks: int) -> None:
        self._proto = proto
        self._id = stream_id
        self._window = window_chunks
        self._queue: deque[memoryview | bytes] = deque()
        self._wake = asyncio.Event()
        self._error: XdfsError | None = None
        self._done = False
        self._exhausted = False  # the consumer was told the stream ended
        self._next_seq = 0
        self._received_bytes = 0
        self._consumed_since_credit = 0
        # Grant credit back once half a window was consumed: fewer frames, no stall.
        self._credit_batch = max(1, window_chunks // 2)

    def grant_window(self) -> None:
        """Tell the sender how many chunks it may send before waiting (the first CREDIT)."""
        self._proto.send(K_CREDIT, self._id, "", Credit(self._window))

    @property
    def tail_received(self) -> bool:
        """True once every chunk and a matching tail arrived (nothing more will come)."""
        return self._done

    @property
    def finished(self) -> bool:
        return self._done or self._error is not None

    @property
    def exhausted(self) -> bool:
        """True once the consumer has taken every chunk and seen the end of the stream."""
        return self._exhausted

    def on_chunk(self, chunk: Chunk) -> None:
        """Accept a chunk; raises ProtocolError if the sender ignored its credit."""
        if self.finished:
            return
        if len(self._queue) >= self._window:
            raise ProtocolError(f"stream {self._id}: sender exceeded its credit")
        if chunk.seq != self._next_seq:
            self.fail(StreamError(f"chunk {chunk.seq} arrived, expected {self._next_seq}"))
            return
        if crc32c.crc32c(chunk.data) != chunk.crc32c:
            self.fail(ChecksumError(f"stream {self._id}: chunk {chunk.seq} failed CRC32C"))
            return
        self._next_seq += 1
        self._received_bytes += len(chunk.data)
        self._queue.append(chunk.data)
        self._wake.set()

    def on_tail(self, tail: Tail) -> None:
        if self.finished:
            return
        if tail.chunks != self._next_seq or tail.total_bytes != self._received_bytes:
            self.fail(
                StreamError(
                    f"stream {self._id} ended after {self._next_seq} chunks / "
                    f"{self._received_bytes} bytes; sender says {tail.chunks} / "
                    f"{tail.total_bytes}"
                )
            )
            return
        self._done = True
        self._wake.set()

    def fail(self, error: XdfsError) -> None:
        if self._error is None and not self._done:
            self._error = error
            self._queue.clear()
        self._wake.set()

    def __aiter__(self) -> AsyncIterator[memoryview | bytes]:
        return self

    async def __anext__(self) -> memoryview | bytes:
        while not self._queue:
            if self._error is not None:
                raise self._error
            if self._done:
                self._exhausted = True
                raise StopAsyncIteration
            self._wake.clear()
            await self._wake.wait()
        return self._take()

    def _take(self) -> memoryview | bytes:
        data = self._queue.popleft()
        self._consumed_since_credit += 1
        if self._consumed_since_credit >= self._credit_batch and not self.finished:
            self._proto.send(K_CREDIT, self._id, "", Credit(self._consumed_since_credit))
            self._consumed_since_credit = 0
        return data

    async def next_batch(self) -> tuple[list[memoryview | bytes], bool]:
        """Every chunk received by now (waiting for one when there is none), and whether
        the stream ended with them: a consumer that hands chunks to a worker thread then
        makes one hop per batch, and can finish its work in the same hop as the last
        chunk. Errors are raised as by iteration; ``([], True)`` at the end."""
        try:
            batch = [await self.__anext__()]
        except StopAsyncIteration:
            return [], True
        while self._queue:
            batch.append(self._take())
        if self._done and self._error is None:
            self._exhausted = True
            return batch, True
        return batch, False

    async def ready(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for :meth:`next_batch` to have something to return
        without waiting (a chunk, the end, an error); returns whether it has (a consumer
        that does something else while the sender pauses)."""
        if self._queue or self.finished:
            return True
        self._wake.clear()
        try:
            async with asyncio.timeout(timeout_s):
                await self._wake.wait()
        except TimeoutError:
            return False
        return True

    async def read_all(self) -> bytes:
        return b"".join([bytes(part) async for part in self])
