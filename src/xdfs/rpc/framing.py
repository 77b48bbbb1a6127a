"""Cutting a byte stream into ``u32 length | payload`` frames: pure, no I/O.

:class:`FrameReader` is the buffer behind an ``asyncio.BufferedProtocol``: the transport
receives straight into :meth:`FrameReader.get_buffer`, and :meth:`FrameReader.feed` returns
the payloads that became complete. Small frames are cut out of one reusable receive buffer
(many per ``recv``); a large frame (one that does not fit that buffer, or of at least
:data:`OWN_BUFFER_MIN_BYTES`) gets a buffer of its own, sized from the length prefix, that
the socket fills directly, so a 1 MiB data chunk is copied from the kernel once and is
handed on without a copy. A length prefix above the limit raises before anything is
allocated.

Large-frame buffers come from :data:`~xdfs.rpc.buffer_pool.LARGE_BUFFERS`, the process's
pool of warm ones (:mod:`xdfs.rpc.buffer_pool`).
"""

from __future__ import annotations

from typing import Final

from xdfs.errors import FrameTooLarge
from xdfs.rpc.buffer_pool import LARGE_BUFFERS, buffer_bytes_for
from xdfs.rpc.messages import LENGTH_PREFIX, LENGTH_PREFIX_BYTES

# (Final: in the compiled module, a C static instead of a dict lookup per frame.)
_LENGTH_PREFIX: Final = LENGTH_PREFIX

#: Frames of at least this many bytes get a buffer of their own even when they would fit
#: the shared receive buffer: cut from it they are copied out into fresh memory by the
#: connection (the next receive overwrites it), a pooled buffer is warm and handed on.
OWN_BUFFER_MIN_BYTES: Final = 64 * 1024


class FrameReader:
    """Incremental frame parser over a fixed receive buffer (plus one per oversized frame)."""

    def __init__(self, frame_bytes_max: int, buffer_bytes: int) -> None:
        assert buffer_bytes >= 64, "receive buffer too small"
        self.frame_bytes_max = frame_bytes_max
        self._buf = bytearray(buffer_bytes)
        self._view = memoryview(self._buf)
        self._start = 0  # first byte not yet cut into a frame
        self._end = 0  # end of received data in _buf
        self._big: bytearray | None = None  # pooled buffer of one large frame
        self._big_length = 0  # the frame's length (the buffer may be longer)
        self._big_filled = 0
        self._wanted_buffer_bytes = buffer_bytes  # see grow()

    @property
    def shared_buffer(self) -> bytearray:
        """The reusable buffer; payloads viewing it die at the next :meth:`get_buffer`."""
        return self._buf

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet returned as frames (for limits and tests)."""
        return self._end - self._start + self._big_filled

    @property
    def allocated_bytes(self) -> int:
        """Bytes of buffers this reader holds now (receive buffer, large frame)."""
        big = len(self._big) if self._big is not None else 0
        return len(self._buf) + big

    def grow(self, buffer_bytes: int, frame_bytes_max: int) -> None:
        """Raise the frame limit now and use a receive buffer of ``buffer_bytes`` from the
        next :meth:`get_buffer` outside a large frame (a server starts each connection small
        and grows it once the peer has authenticated). Received bytes are kept."""
        self.frame_bytes_max = frame_bytes_max
        self._wanted_buffer_bytes = max(self._wanted_buffer_bytes, buffer_bytes)

    def _swap_buffer(self) -> None:
        pending = bytes(self._view[self._start : self._end])
        self._buf = bytearray(self._wanted_buffer_bytes)
        self._view = memoryview(self._buf)
        self._buf[: len(pending)] = pending
        self._start, self._end = 0, len(pending)

    def get_buffer(self) -> memoryview:
        """Where the next received bytes go. Payloads returned earlier become invalid."""
        if self._big is not None:
            return memoryview(self._big)[self._big_filled : self._big_length]
        if self._wanted_buffer_bytes > len(self._buf):
            self._swap_buffer()
        if self._start == self._end:
            self._start = self._end = 0
        elif self._start and len(self._buf) - self._end < len(self._buf) // 4:
            # Move the partial frame to the front so it can complete in this buffer.
            pending = self._end - self._start
            self._buf[:pending] = self._buf[self._start : self._end]
            self._start, self._end = 0, pending
        assert self._end < len(self._buf), "receive buffer full without a complete frame"
        return self._view[self._end :]

    def feed(self, nbytes: int) -> list[memoryview]:
        """Account for ``nbytes`` written into the last buffer; return completed payloads.

        Payloads are views valid until the next :meth:`get_buffer` call: decode them first.
        """
        if self._big is not None:
            self._big_filled += nbytes
            if self._big_filled < self._big_length:
                return []
            frame = memoryview(self._big)[: self._big_length]
            self._big, self._big_filled = None, 0
            return [frame]
        self._end += nbytes
        frames: list[memoryview] = []
        while self._end - self._start >= LENGTH_PREFIX_BYTES:
            (length,) = _LENGTH_PREFIX.unpack_from(self._buf, self._start)
            if length > self.frame_bytes_max:
                raise FrameTooLarge(
                    f"frame of {length} bytes exceeds the limit of {self.frame_bytes_max}"
                )
            body_start = self._start + LENGTH_PREFIX_BYTES
            available = self._end - body_start
            if length >= OWN_BUFFER_MIN_BYTES or LENGTH_PREFIX_BYTES + length > len(self._buf):
                if available >= length:  # whole already: handed on from a pooled buffer
                    frames.append(self._pooled_frame(length, body_start))
                    continue
                self._start_big_frame(length, body_start, available)
                break
            if available < length:
                break
            frames.append(self._view[body_start : body_start + length])
            self._start = body_start + length
        return frames

    def _start_big_frame(self, length: int, body_start: int, available: int) -> None:
        # (A frame below OWN_BUFFER_MIN_BYTES that does not fit is one to a server's small
        # buffer before authentication: exactly its size, never a pool's larger buffer.)
        big = (LARGE_BUFFERS.take(buffer_bytes_for(length)) if length >= OWN_BUFFER_MIN_BYTES
               else bytearray(length))
        big[:available] = self._view[body_start : self._end]
        self._big, self._big_length, self._big_filled = big, length, available
        self._start = self._end = 0

    def _pooled_frame(self, length: int, body_start: int) -> memoryview:
        """A large frame received whole into the shared buffer, copied to a pooled one
        (warm memory: cheaper than the copy into fresh memory the caller would make)."""
        big = LARGE_BUFFERS.take(buffer_bytes_for(length))
        big[:length] = self._view[body_start : body_start + length]
        self._start = body_start + length
        return memoryview(big)[:length]


def frame(payload: bytes) -> bytes:
    """Prefix ``payload`` with its length (for tests and tools that write raw frames)."""
    return LENGTH_PREFIX.pack(len(payload)) + payload
