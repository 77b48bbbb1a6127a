"""An edits segment's flushes handed to the kernel: each one direct write that the kernel
makes durable before it completes (``O_DIRECT``, ``RWF_DSYNC``, Linux AIO: ``common/aio.py``),
its completion taken by the event loop, instead of a write in the journal's I/O thread.

Why: the I/O thread needs the interpreter lock to start a flush and again to finish it,
each time from an event loop busy with requests. Measured on a NameNode taking creates
from 64 calls in flight (docs/benchmarks.md): a flush's write and sync took ~70 us in the
kernel, but a median ~270 us (p90 1.4 ms) passed between the hand-over and the thread's
start, and ~250 us more before it was done; a flush took 1.2 ms from swap to durable, and
half the calls in flight waited for it while the NameNode ran out of work.

The completion calls back the journal from the loop's reaping of it (:meth:`start_append`),
no task in between: the flush's waiters are answered in that same loop turn.

How: direct I/O writes whole aligned blocks, so a flush writes from the last ``ALIGN``
boundary before the segment's end: the bytes already there (the tail, kept here), the new
records, then zeros up to the next boundary, over the zeros the segment was preallocated
with. Rewriting the tail block is what the page cache does on every fdatasync of an append
too. Used only where it is sound: a segment preallocated past the write's last block (the
NameNode's; a JournalNode's plain appends never) on a file system that makes a direct write
given ``RWF_DSYNC`` durable by its completion (``common.files.DSYNC_FILE_SYSTEMS``, the
rule of a DataNode's small replica). Anything else (a flush that needs more zeros first,
tmpfs refusing ``O_DIRECT``, a kernel without AIO) goes through the I/O thread as before.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import logging
import mmap
import os
from collections.abc import Callable
from pathlib import Path

from xdfs.common.aio import (
    ALIGN,
    O_DIRECT,
    KernelSyncs,
    open_kernel_syncs,
    round_up,
    write_request,
)
from xdfs.errors import StorageError

log = logging.getLogger("xdfs.editlog")

#: How a direct append ended: True durable, False refused by the kernel (nothing written),
#: or the error of a failed write.
Appended = bool | StorageError


class DirectAppends:
    """The direct writes of one journal's open segment (see the module). Its owner calls
    :meth:`segment_started` and :meth:`advanced` for what it writes itself, so the tail
    is always the segment's own bytes; one append at a time (the journal's driver flushes
    one batch at a time)."""

    def __init__(self, enabled: bool) -> None:
        #: False where direct appends are not sound or the kernel refused one.
        self.enabled = enabled and bool(O_DIRECT)
        self._kernel: KernelSyncs | None = None
        self._fd: int | None = None  # the open segment's O_DIRECT descriptor
        self._tail = bytearray()  # the segment from its last ALIGN boundary to its end
        self._buffer: mmap.mmap | None = None
        #: The write in flight: a later one waits for it (they overlap on the tail block),
        #: and the buffer stays pinned for the kernel until it is done.
        self._pending: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pinned: ctypes.c_char | None = None

    def segment_started(self, header: bytes | bytearray) -> None:
        """A new segment holds ``header`` and nothing else."""
        self.segment_closed()
        assert len(header) < ALIGN
        self._tail = bytearray(header)

    def advanced(self, data: bytes | bytearray | memoryview, end: int) -> None:
        """``data`` was appended to the segment, which now ends at byte ``end``."""
        keep = end % ALIGN
        if keep == 0:
            self._tail = bytearray()
        elif keep <= len(data):
            self._tail = bytearray(memoryview(data)[len(data) - keep:])
        else:
            self._tail += data
        assert len(self._tail) == keep

    def fits(self, end: int, count: int, allocated: int) -> bool:
        """Whether ``count`` bytes appended at ``end`` may go direct: every block the write
        covers lies inside the segment's preallocated zeros (``allocated`` bytes)."""
        return self.enabled and round_up(end + count) <= allocated

    def busy(self) -> bool:
        """Whether a write is still in flight (the next waits for :meth:`settled`)."""
        return self._pending is not None

    async def settled(self) -> None:
        """Wait until no write is in flight (one whose waiter was cancelled may be)."""
        while self._pending is not None:
            await asyncio.shield(self._pending)

    def start_append(self, path: Path, end: int, data: bytes | bytearray,
                     done: Callable[[Appended], None]) -> None:
        """Write ``data`` at byte ``end`` of the segment at ``path`` (:meth:`ready` said it
        may, nothing :meth:`busy`): ``done`` is called from the loop's reaping of the
        kernel's completion, no loop turn later, with True once the data is durable (the
        tail then includes it), False when the kernel refused (nothing written: the caller
        writes it another way, and so will every later append), or the StorageError of a
        failed write. The outcome does not depend on anyone awaiting it: a write whose
        waiter went away still advances the tail when it lands."""
        assert self._kernel is not None and self._fd is not None, "append before ready()"
        assert self._pending is None and self._loop is not None, "one append at a time"
        tail = self._tail
        start, size = end - len(tail), round_up(len(tail) + len(data))
        buffer = self._buffer_of(size)
        buffer[: len(tail)] = tail
        filled = len(tail) + len(data)
        buffer[len(tail) : filled] = data
        buffer[filled:size] = bytes(size - filled)  # (the zeros already on the disk)
        self._pinned = ctypes.c_char.from_buffer(buffer)  # until the kernel is done with it
        self._pending = self._loop.create_future()

        def completed(results: list[int]) -> None:
            pending, self._pending, self._pinned = self._pending, None, None
            if pending is not None:
                pending.set_result(None)
            done(self._outcome(path, results[0], start, size, data, end))

        self._kernel.start_calling(
            [write_request(self._fd, ctypes.addressof(self._pinned), size, start, dsync=True)],
            completed)

    def _outcome(self, path: Path, result: int, start: int, size: int,
                 data: bytes | bytearray, end: int) -> Appended:
        if result == -errno.EINVAL:
            self._disable(path, "the kernel refused a direct write")
            return False
        if result != size:
            reason = os.strerror(-result) if result < 0 else f"{result} of {size} bytes written"
            return StorageError(f"write to {path} failed at byte {start}: {reason}")
        self.advanced(data, end + len(data))
        return True

    def ready(self, path: Path) -> bool:
        """Whether appends to the segment at ``path`` may go direct: the kernel's AIO and
        the segment's direct descriptor, opened the first time."""
        if not self.enabled:
            return False
        if self._kernel is None:
            self._loop = asyncio.get_running_loop()
            self._kernel = open_kernel_syncs(self._loop)
            if self._kernel is None:
                self._disable(path, "no Linux AIO")
                return False
        if self._fd is None:
            try:
                self._fd = os.open(path, os.O_WRONLY | O_DIRECT | os.O_CLOEXEC)
            except OSError as exc:
                self._disable(path, f"cannot open it for direct I/O ({exc.strerror})")
                return False
        return True

    def _buffer_of(self, size: int) -> mmap.mmap:
        """A page-aligned buffer of at least ``size`` bytes (the last one if large enough:
        a fresh mapping costs a page fault per page)."""
        if self._buffer is None or len(self._buffer) < size:
            if self._buffer is not None:
                self._buffer.close()
            self._buffer = mmap.mmap(-1, max(size, 16 * ALIGN))
        return self._buffer

    def _disable(self, path: Path, why: str) -> None:
        self.enabled = False
        log.info("edits in %s: flushes through the I/O thread from now on: %s", path.parent, why)

    def segment_closed(self) -> None:
        """The segment is finalized or abandoned: its direct descriptor goes."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    async def close(self) -> None:
        """Wait for a write still in flight, then release the kernel's context."""
        await self.settled()
        self.segment_closed()
        if self._kernel is not None:
            self._kernel.close()
            self._kernel = None
        if self._buffer is not None:
            self._buffer.close()
            self._buffer = None
