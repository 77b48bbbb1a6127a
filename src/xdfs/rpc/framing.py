"""Cutting a byte stream into ``u32 length | payload`` frames: pure, no I/O.

:class:`FrameReader` is the buffer behind an ``asyncio.BufferedProtocol``: the transport
receives straight into :meth:`FrameReader.get_buffer`, and :meth:`FrameReader.feed` returns
the payloads that became complete. Small frames are cut out of one reusable receive buffer
(many per ``recv``); a frame larger than that buffer gets a buffer of its own, sized from the
length prefix, that the socket fills directly, so a 1 MiB data chunk is copied from the
kernel once. A length prefix above the limit raises before anything is allocated.

Large-frame buffers are recycled: allocating a fresh 1 MiB per chunk cost more than the
chunk's whole trip through the socket (glibc hands freed blocks of that size back to the
kernel, so every new one is page-faulted in again; bench/rpc.py measured upload at a third
of raw socket speed because of it). The reader remembers the last few buffers it handed
out and reuses one of the same size once nothing but the reader refers to it any more
(CPython reference counts are exact), so a buffer is never overwritten while a payload, a
decoded chunk or anything else still holds it. A small frame (a stream's TAIL, any reply)
drops the remembered buffers, so an idle connection keeps none.
"""

from __future__ import annotations

import sys
import sysconfig

from xdfs.errors import FrameTooLarge
from xdfs.rpc.messages import LENGTH_PREFIX

_PREFIX = LENGTH_PREFIX.size

#: Large-frame buffers remembered for reuse per reader (a stream window is 8 chunks).
_RECYCLED_MAX = 16


def _refs_when_unshared() -> int:
    """What ``sys.getrefcount(list[i])`` reports for an object only that list holds."""
    probe = [bytearray(1)]
    return sys.getrefcount(probe[0])


#: Reference counts are exact only on CPython with the GIL; elsewhere never recycle.
_RECYCLE = sys.implementation.name == "cpython" and not sysconfig.get_config_var(
    "Py_GIL_DISABLED"
)
_UNSHARED_REFS = _refs_when_unshared() if _RECYCLE else -1


class FrameReader:
    """Incremental frame parser over a fixed receive buffer (plus one per oversized frame)."""

    def __init__(self, frame_bytes_max: int, buffer_bytes: int) -> None:
        assert buffer_bytes >= 64, "receive buffer too small"
        self.frame_bytes_max = frame_bytes_max
        self._buf = bytearray(buffer_bytes)
        self._view = memoryview(self._buf)
        self._start = 0  # first byte not yet cut into a frame
        self._end = 0  # end of received data in _buf
        self._big: bytearray | None = None  # dedicated buffer of one large frame
        self._big_filled = 0
        self._recycled: list[bytearray] = []  # large-frame buffers handed out earlier
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
        """Bytes of buffers this reader holds now (receive buffer, large frame, recycled)."""
        big = len(self._big) if self._big is not None else 0
        return len(self._buf) + big + sum(len(b) for b in self._recycled)

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
            return memoryview(self._big)[self._big_filled :]
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
            if self._big_filled < len(self._big):
                return []
            frame = memoryview(self._big)
            if _RECYCLE:
                if len(self._recycled) >= _RECYCLED_MAX:
                    del self._recycled[0]
                self._recycled.append(self._big)
            self._big, self._big_filled = None, 0
            return [frame]
        self._end += nbytes
        frames: list[memoryview] = []
        while self._end - self._start >= _PREFIX:
            (length,) = LENGTH_PREFIX.unpack_from(self._buf, self._start)
            if length > self.frame_bytes_max:
                raise FrameTooLarge(
                    f"frame of {length} bytes exceeds the limit of {self.frame_bytes_max}"
                )
            body_start = self._start + _PREFIX
            available = self._end - body_start
            if available >= length:
                frames.append(self._view[body_start : body_start + length])
                self._start = body_start + length
                if self._recycled:
                    self._recycled.clear()  # a small frame: not (or no longer) streaming
                continue
            if _PREFIX + length > len(self._buf):
                self._start_big_frame(length, body_start, available)
            break
        return frames

    def _start_big_frame(self, length: int, body_start: int, available: int) -> None:
        big = self._reusable_buffer(length)
        if big is None:
            big = bytearray(length)
        big[:available] = self._view[body_start : self._end]
        self._big, self._big_filled = big, available
        self._start = self._end = 0

    def _reusable_buffer(self, length: int) -> bytearray | None:
        """A buffer handed out earlier, of ``length`` bytes, that nothing else refers to."""
        recycled = self._recycled
        for index in range(len(recycled)):
            if (
                len(recycled[index]) == length
                and sys.getrefcount(recycled[index]) <= _UNSHARED_REFS
            ):
                return recycled.pop(index)
        return None


def frame(payload: bytes) -> bytes:
    """Prefix ``payload`` with its length (for tests and tools that write raw frames)."""
    return LENGTH_PREFIX.pack(len(payload)) + payload
