"""Direct I/O (``O_DIRECT``) of replica data files (``datanode.direct_io``).

Why: on the machines measured (docs/benchmarks.md, "The machine"), a buffered ``write`` cost
3-4 ms of kernel CPU per MiB (page allocation and the page-cache copy), 8-10 times what a
direct write of the same bytes costs including our own copy into an aligned buffer; the
DataNode's CPU, not the disk, bounded both the large-file and the small-file write. A
replica's bytes are written once and read back rarely soon after, so the page cache buys
little; reads of a replica are direct too (a read of uncached data through the page cache
was slower than a direct one, and would only fill the cache with data we do not reuse).

Direct I/O needs the buffer, the file offset and the length aligned (:data:`ALIGN`, which
covers the 512-byte and 4 KiB logical blocks of common disks). Received bytes are copied
into an aligned buffer and written in aligned pieces (a large replica's in 4 MiB writes
by writer threads while the next buffer fills: :class:`StagedWriter`); the unaligned end
of a replica is written through the page cache (``O_DIRECT`` cleared) just before the
fdatasync that makes the whole file durable, exactly as without direct I/O. A direct read
has no kernel read-ahead behind it: the DataNode reads larger pieces
(:data:`READ_PIECE_BYTES`, into pooled buffers), each in parts read at once, so the disk
has several requests queued. A file system that refuses
``O_DIRECT`` (tmpfs, some FUSE mounts) is written and read buffered, silently.

Small replicas (:data:`BUFFERED_MAX_BYTES`): one whose whole stream is in hand is staged and
written direct by the kernel's AIO (:meth:`StagedWriter.kernel_write`, ``aio.py``), and read
direct by it into a pooled buffer: a buffered write or read of data not yet cached fills
fresh page-cache pages, which cost this VM ~0.6 ms of kernel CPU per 200 KiB (measured
alone: 0.48-0.68 ms buffered against 0.04-0.14 ms direct). Without AIO a small replica stays
buffered: one whose stream ends before the first staging buffer fills is written through the
page cache, and a replica shorter than that is read through it (with threads doing the I/O,
the direct write of a 200 KiB replica saves little: 0.40-0.43 against 0.47 ms of system
time). Mixing both kinds on one file is coherent on Linux (a direct write or read first
writes back the cached pages of its range, a direct write then drops them), and every read
is verified against the checksums either way.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import mmap
import os
import sys
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path

from xdfs.common.aio import ALIGN, O_DIRECT, round_up
from xdfs.common.files import write_all
from xdfs.errors import StorageError

#: A writer's staging buffer: received bytes are written out whenever it is full.
STAGE_BYTES = 1024 * 1024
#: Replicas shorter than this (the first staging buffer) are written and read through the
#: page cache; longer ones direct (see the module's docstring).
BUFFERED_MAX_BYTES = STAGE_BYTES
#: Staging buffers kept for the next writers (a fresh mapping costs page faults).
_POOL_MAX = 32
_pool: list[mmap.mmap] = []
_pool_lock = threading.Lock()

#: ``sys.getrefcount(buffer)`` in :func:`give_back` when only its caller's variable and
#: the argument refer to the buffer.
_UNSHARED_REFS = 3
#: Whether a small replica's direct write may go to the kernel while its unaligned end is
#: written through the page cache: only where that end's page holds no byte of the direct
#: part (pages of ALIGN bytes), so the direct write never touches a cached page.
KERNEL_WRITES = bool(O_DIRECT) and mmap.PAGESIZE == ALIGN


def aligned_buffer(size: int) -> mmap.mmap:
    """A zeroed, page-aligned buffer of at least ``size`` bytes (a multiple of ALIGN)."""
    return mmap.mmap(-1, max(ALIGN, round_up(size)))


def borrow_buffer() -> mmap.mmap:
    """A staging-sized aligned buffer, from the pool when it has one (its pages are
    mapped already: a fresh mapping costs a page fault per page)."""
    with _pool_lock:
        if _pool:
            return _pool.pop()
    return aligned_buffer(STAGE_BYTES)


def give_back(buffer: mmap.mmap, held: int = 0) -> None:
    """Return a buffer of :func:`borrow_buffer` or :func:`borrow_large` to its pool,
    unless something other than the caller's ``held`` references (and the argument) still
    views it: a piece of it handed out may still be read, and the next borrower would
    overwrite it."""
    if (len(buffer) not in (STAGE_BYTES, LARGE_STAGE_BYTES)
            or sys.getrefcount(buffer) > _UNSHARED_REFS + held):
        return
    _pool_or_close(buffer)


def _pool_or_close(buffer: mmap.mmap) -> None:
    """Keep ``buffer`` for the next borrower while its pool has room, else unmap it."""
    large = len(buffer) == LARGE_STAGE_BYTES
    pool, room = (_large_pool, _LARGE_POOL_MAX) if large else (_pool, _POOL_MAX)
    with _pool_lock:
        if len(pool) < room:
            pool.append(buffer)
            return
    buffer.close()


def open_direct(path: Path | str, flags: int) -> tuple[int, bool]:
    """``path`` opened with ``O_DIRECT`` when its file system allows it; returns the fd and
    whether it is direct."""
    if O_DIRECT:
        try:
            return os.open(path, flags | O_DIRECT, 0o644), True
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise StorageError(f"cannot open {path}: {exc}") from exc
    try:
        return os.open(path, flags, 0o644), False
    except OSError as exc:
        raise StorageError(f"cannot open {path}: {exc}") from exc


def reads_direct(num_bytes: int) -> bool:
    """Whether a replica of ``num_bytes`` is read direct (when direct I/O is on)."""
    return num_bytes >= BUFFERED_MAX_BYTES


def set_direct(fd: int) -> bool:
    """Make ``fd`` direct if its file system allows it; returns whether it is."""
    if not O_DIRECT:
        return False
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | O_DIRECT)
    except OSError:
        return False
    return True


def clear_direct(fd: int) -> None:
    """Make ``fd`` buffered (for a write or read that is not aligned)."""
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    if flags & O_DIRECT:
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~O_DIRECT)


class StagedWriter:
    """The data file of a new replica, opened with ``O_DIRECT``: bytes are staged in an
    aligned buffer and written out a full buffer at a time; :meth:`finish` writes the rest
    (its unaligned end buffered; all of it when the first buffer never filled: a small
    replica stays in the page cache). Used by one thread at a time, as a ReplicaWriter
    is.

    The first buffer is a pooled one of :data:`STAGE_BYTES`; past it (a large replica) the
    buffers are of :data:`LARGE_STAGE_BYTES`, and a full one is written by a writer thread
    (:data:`WRITES_IN_FLIGHT` at once) while the next fills: the disk always has a large
    write queued while bytes arrive, where one synchronous write of each MiB left it idle
    while the caller copied and received (docs/benchmarks.md, "The DataNode's write
    path"). Writes go at explicit offsets, so they may complete in any order;
    :attr:`bytes_in_file` is the prefix known to be written."""

    def __init__(self, fd: int, path: Path | str) -> None:
        self._fd = fd
        self._path = path
        with _pool_lock:
            self._buffer: mmap.mmap | None = _pool.pop() if _pool else None
        if self._buffer is None:
            self._buffer = aligned_buffer(STAGE_BYTES)
        self._fill = 0
        self._written = 0  # bytes handed to writes (done or in flight): the next one's offset
        self._flushed = 0  # staged bytes a flush already put in the file (after _written)
        #: Writes in flight, oldest first: (their future, buffer, offset).
        self._pending: deque[tuple[Future[None], mmap.mmap, int]] = deque()
        #: Large buffers whose write is done, for the next ones to fill.
        self._free: list[mmap.mmap] = []
        #: Holds the buffer's address for the kernel's direct write (:meth:`kernel_write`).
        self._pin: ctypes.c_char | None = None

    @property
    def untouched(self) -> bool:
        """Nothing is in the file yet: every byte written so far is staged."""
        return self._written == 0 and self._flushed == 0

    @property
    def bytes_in_file(self) -> int:
        """How many bytes from the start of the file are written (the checksums of those
        may be written: ``ReplicaWriter.flush``)."""
        if self._pending:
            return self._pending[0][2]
        return self._written + self._flushed

    def kernel_write(self) -> tuple[int, int]:
        """For a replica staged whole (:attr:`untouched`) whose direct write the caller
        hands to the kernel (``aio.py``): give the file its final size now (ext4 completes
        a direct write that extends a file within ``io_submit``, blocking the caller) and
        write its unaligned end through the page cache; returns the staging buffer's
        address and the length of the aligned part, to be written direct at offset 0 from
        there. The buffer must outlive that write: :meth:`release` after it is done."""
        buffer = self._buffer
        assert buffer is not None and self.untouched and KERNEL_WRITES
        size = self._fill
        aligned = size - size % ALIGN
        try:
            os.ftruncate(self._fd, size)
        except OSError as exc:
            raise StorageError(f"cannot size {self._path}: {exc}") from exc
        if aligned < size:
            clear_direct(self._fd)
            with memoryview(buffer) as view:
                write_all(self._fd, view[aligned:size], self._path, aligned)
            set_direct(self._fd)  # (it was direct when opened)
        self._pin = ctypes.c_char.from_buffer(buffer)
        return ctypes.addressof(self._pin), aligned

    def write_aligned_buffered(self) -> None:
        """After :meth:`kernel_write`, when the file system refused its direct write: the
        aligned part through the page cache instead."""
        assert self._buffer is not None
        clear_direct(self._fd)
        with memoryview(self._buffer) as view:
            write_all(self._fd, view[: self._fill - self._fill % ALIGN], self._path, 0)

    def write(self, data: bytes | memoryview) -> None:
        buffer = self._buffer
        assert buffer is not None, "write after finish"
        view = memoryview(data).cast("B")
        while view:
            size = len(buffer)
            take = min(len(view), size - self._fill)
            buffer[self._fill : self._fill + take] = view[:take]
            self._fill += take
            view = view[take:]
            if self._fill == size:
                buffer = self._write_full()

    def flush(self, everything: bool = False) -> None:
        """Within the first buffer (or with ``everything``), put every staged byte in the
        file, the unaligned rest buffered, and keep the rest staged: the replica may end
        small (then it stays buffered); should the buffer fill, its direct write replaces
        those bytes (the kernel writes back and drops their cached pages first). Past the
        first buffer, the bytes otherwise stay staged until their buffer is full (large
        direct writes; what is lost with the process was not acknowledged) and only the
        writes done are taken note of (:attr:`bytes_in_file`)."""
        if self._written and not everything:
            while self._pending and self._pending[0][0].done():
                self._reap(len(self._pending) - 1)
            return
        if self._write_rest():
            set_direct(self._fd)
        self._flushed = self._fill

    def finish(self) -> None:
        """Write every staged byte (the unaligned end through the page cache; all of them
        when the first buffer never filled) and give the buffers back; the caller's
        fdatasync then makes the file durable."""
        if self._buffer is None:
            return
        self._write_rest()
        self._fill = 0
        self.release()

    def _write_rest(self) -> bool:
        """The aligned part of the staged bytes written out direct (past the first buffer
        only), the rest buffered at its place, still staged; returns whether it wrote
        buffered (the fd is then left buffered). Waits for the writes in flight first."""
        self._reap(0)
        start = self._flushed  # within the first buffer: what no flush wrote yet
        if self._written:
            aligned = self._fill - self._fill % ALIGN
            if aligned:
                self._write_now(aligned)
            start = 0  # past it: the unaligned rest, less than ALIGN bytes, again
        if self._fill > start:
            assert self._buffer is not None
            clear_direct(self._fd)
            with memoryview(self._buffer) as view:
                write_all(self._fd, view[start : self._fill], self._path,
                          self._written + start)
            return True
        return False

    def release(self) -> None:
        """Give the buffers back (after the writes in flight are done: they use them)."""
        self._pin = None  # (an export of the buffer: it could not be closed)
        with contextlib.suppress(StorageError):  # (a broken write: its caller was told)
            self._reap(0)
        buffers, self._free = self._free, []
        if self._buffer is not None:
            buffers.append(self._buffer)
            self._buffer = None
        for buffer in buffers:
            _pool_or_close(buffer)

    def _write_full(self) -> mmap.mmap:
        """The full staging buffer written: the first one at once (the replica turns out
        large: from now on its checksums follow its writes), a large one by a writer thread
        once fewer than :data:`WRITES_IN_FLIGHT` are in flight; returns the buffer to fill
        next."""
        buffer = self._buffer
        assert buffer is not None and self._fill == len(buffer)
        if self._written == 0:
            self._write_now(self._fill)
            _pool_or_close(buffer)
        else:
            self._reap(WRITES_IN_FLIGHT - 1)
            self._pending.append((_writers.submit(
                _write_direct, self._fd, buffer, self._fill, self._written, self._path),
                buffer, self._written))
            self._written += self._fill
            self._flushed = self._fill = 0
        self._buffer = self._free.pop() if self._free else borrow_large()
        return self._buffer

    def _reap(self, keep: int) -> None:
        """Wait for the oldest writes in flight until ``keep`` are left; a failed one
        raises once all of those waited for are done (none uses a buffer then)."""
        error: StorageError | None = None
        while len(self._pending) > keep:
            future, buffer, _ = self._pending.popleft()
            try:
                future.result()
            except StorageError as exc:
                if error is None:
                    error = exc
                keep = 0  # the writes after a failed one are of no use: wait for all
            if len(buffer) == LARGE_STAGE_BYTES:
                self._free.append(buffer)
            else:
                _pool_or_close(buffer)
        if error is not None:
            raise error

    def _write_now(self, count: int) -> None:
        """The first ``count`` staged bytes (aligned) to the file, in this thread; the rest
        moves to the front of the buffer."""
        buffer = self._buffer
        assert buffer is not None and count % ALIGN == 0
        _write_direct(self._fd, buffer, count, self._written, self._path)
        self._written += count
        self._flushed = 0
        rest = self._fill - count
        if rest:
            buffer.move(0, count, rest)
        self._fill = rest


#: A large replica's staging buffers past the first (:class:`StagedWriter`).
LARGE_STAGE_BYTES = 4 * 1024 * 1024
#: Full staging buffers a large replica's writer has being written at once.
WRITES_IN_FLIGHT = 2
#: Large staging buffers kept for the next writers (a fresh one costs 1024 page faults).
_LARGE_POOL_MAX = 8
_large_pool: list[mmap.mmap] = []
#: The threads writing full staging buffers: a few large replicas written at once.
_writers = ThreadPoolExecutor(8, "xdfs-direct-write")


def borrow_large() -> mmap.mmap:
    """A buffer of :data:`LARGE_STAGE_BYTES`, from its pool when it has one (a large
    replica's staging buffers, a large direct read's pieces: ``give_back`` it)."""
    with _pool_lock:
        if _large_pool:
            return _large_pool.pop()
    return aligned_buffer(LARGE_STAGE_BYTES)


def _write_direct(fd: int, buffer: mmap.mmap, count: int, offset: int,
                  path: Path | str) -> None:
    """``buffer[:count]`` (aligned) written at ``offset``; should the file system refuse
    the direct write though it opened the file direct, the file goes on buffered."""
    with memoryview(buffer) as view:
        try:
            write_all(fd, view[:count], path, offset)
        except StorageError as exc:
            if not _refused(exc):
                raise
            try:
                clear_direct(fd)
            except OSError as err:
                raise StorageError(f"cannot write {path} buffered: {err}") from err
            write_all(fd, view[:count], path, offset)


def _refused(exc: StorageError) -> bool:
    cause = exc.__cause__
    return isinstance(cause, OSError) and cause.errno == errno.EINVAL


#: Pieces of a direct read of a replica (``rpc.stream_chunk_bytes`` if larger): the disk
#: sees large requests, several at once (READ_PART_BYTES).
READ_PIECE_BYTES = 4 * 1024 * 1024
#: A direct read longer than this is split into parts read at once (the disk then has
#: several requests queued: a direct read has no kernel read-ahead behind it).
READ_PART_BYTES = 1024 * 1024
_readers = ThreadPoolExecutor(4, "xdfs-direct-read")


def pread_direct(fd: int, buffer: mmap.mmap, count: int, offset: int) -> int:
    """Read ``count`` bytes at an aligned ``offset`` into ``buffer`` (whose size is a
    multiple of ALIGN, at least ``round_up(count)``); returns how many arrived (at most
    ``count``). Falls back to a buffered read when the file system refuses."""
    want = min(len(buffer), round_up(count))
    with memoryview(buffer) as view:
        try:
            if want <= READ_PART_BYTES:
                got = os.preadv(fd, [view[:want]], offset)
            else:
                got = _read_parts(fd, view[:want], offset)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            clear_direct(fd)
            got = os.preadv(fd, [view[:count]], offset)
    return min(got, count)


def _read_parts(fd: int, view: memoryview, offset: int) -> int:
    """``view`` filled by parts read at once; the bytes read up to the first short part."""
    starts = range(0, len(view), READ_PART_BYTES)
    parts = [_readers.submit(os.preadv, fd, [view[at : at + READ_PART_BYTES]], offset + at)
             for at in starts[1:]]
    try:
        got = [os.preadv(fd, [view[:READ_PART_BYTES]], offset)]
    finally:
        wait(parts)  # none may go on writing into the buffer once this returns
    got += [part.result() for part in parts]
    total = 0
    for at, count in zip(starts, got, strict=True):
        total = at + count
        if count < min(READ_PART_BYTES, len(view) - at):
            break
    return total
