"""fsyncs and direct reads and writes the event loop hands to the kernel (Linux native
AIO), without a worker thread: a DataNode's small replicas (``datanode/transfer.py``) and
the NameNode's edits flushes (``editlog/direct_appends.py``).

Why: a small replica's write is three fsyncs (data, checksum file, directory) and little
else. Handed to a worker thread, every system call of that thread (each fsync, close,
rename) gave the GIL back and took it again against the busy event loop: measured ~30
context switches and ~80 futex calls per replica, a large part of the DataNode's CPU per
small file (docs/benchmarks.md); an edits flush handed to a thread waited for the GIL
longer than for the disk. Linux's AIO runs ``IOCB_CMD_FDSYNC`` / ``IOCB_CMD_FSYNC``
in a kernel worker (since 4.18) and signals completion through an eventfd the loop
watches, so the loop thread does the renames itself and no Python thread is involved.
``IOCB_CMD_PWRITE`` / ``IOCB_CMD_PREAD`` on an ``O_DIRECT`` fd are asynchronous too: a
small replica's data go to and come from the disk without the page cache, whose fresh
pages cost more kernel CPU than the rest of the write (``datanode/direct.py``).

:func:`open_kernel_syncs` returns None where this is unavailable (another OS or CPU, a
kernel or sandbox refusing ``io_setup``); :class:`KernelSyncs` turns itself off when the
kernel refuses an fsync request (``EINVAL``: an old kernel, a file system without it).
Callers then fsync in a worker thread as before. ctypes only: no compiled code.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import logging
import os
import platform
from collections.abc import Callable, Sequence
from typing import Any

from xdfs.common.files import RWF_DSYNC

log = logging.getLogger(__name__)

#: System call numbers of io_setup, io_destroy, io_getevents, io_submit.
_SYSCALLS = {"x86_64": (206, 207, 208, 209), "aarch64": (0, 1, 4, 2)}
_IOCB_CMD_PREAD = 0
_IOCB_CMD_PWRITE = 1
_IOCB_CMD_FSYNC = 2
_IOCB_CMD_FDSYNC = 3
_IOCB_FLAG_RESFD = 1
#: Alignment of direct I/O (``O_DIRECT``) buffers, file offsets and lengths: covers the
#: 512-byte and 4 KiB logical blocks of common disks.
ALIGN = 4096
O_DIRECT: int = getattr(os, "O_DIRECT", 0)
#: Requests in flight at once; past it, callers use a worker thread.
DEPTH = 256
#: Requests one :meth:`KernelSyncs.sync` submits at most.
_SUBMIT_MAX = 8


class _Iocb(ctypes.Structure):  # struct iocb (linux/aio_abi.h), little-endian layout
    _fields_ = [
        ("data", ctypes.c_uint64), ("key", ctypes.c_uint32), ("rw_flags", ctypes.c_int32),
        ("opcode", ctypes.c_uint16), ("reqprio", ctypes.c_int16), ("fildes", ctypes.c_uint32),
        ("buf", ctypes.c_uint64), ("nbytes", ctypes.c_uint64), ("offset", ctypes.c_int64),
        ("reserved2", ctypes.c_uint64), ("flags", ctypes.c_uint32), ("resfd", ctypes.c_uint32),
    ]


class _Event(ctypes.Structure):  # struct io_event
    _fields_ = [("data", ctypes.c_uint64), ("obj", ctypes.c_uint64),
                ("res", ctypes.c_int64), ("res2", ctypes.c_int64)]


class _Timespec(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]


_syscall: Any = None  # libc's syscall(2); None where no C library loads this way
with contextlib.suppress(OSError, TypeError, AttributeError):
    _syscall = ctypes.CDLL(None, use_errno=True).syscall
    _syscall.restype = ctypes.c_long
_long = ctypes.c_long  # every argument of syscall(2) is read as a long


def round_up(count: int) -> int:
    """``count`` rounded up to a whole number of :data:`ALIGN` blocks."""
    return -(-count // ALIGN) * ALIGN


#: One request: (opcode, fd, buffer address, byte count, file offset, rw_flags).
Request = tuple[int, int, int, int, int, int]


def sync_request(fd: int, *, data_only: bool) -> Request:
    """fdatasync (``data_only``) or fsync of ``fd``."""
    return (_IOCB_CMD_FDSYNC if data_only else _IOCB_CMD_FSYNC, fd, 0, 0, 0, 0)


def write_request(fd: int, address: int, count: int, offset: int, *, dsync: bool = False
                  ) -> Request:
    """A write of ``count`` bytes at ``address`` to ``fd`` at ``offset``. Asynchronous only
    for an ``O_DIRECT`` fd whose file already extends past the range (ext4 completes a
    direct write that extends a file within ``io_submit``); the memory must stay untouched
    until the request is done. Not durable by itself unless ``dsync`` (``RWF_DSYNC``: the
    kernel fdatasyncs the range once written, before the completion), which only a file
    system that honours it in asynchronous direct writes may be given
    (``common.files.DSYNC_FILE_SYSTEMS``: FUSE ignores it, and a power cut of LazyFS lost such
    replicas); otherwise an fdatasync follows once the write is done."""
    return (_IOCB_CMD_PWRITE, fd, address, count, offset, RWF_DSYNC if dsync else 0)


def read_request(fd: int, address: int, count: int, offset: int) -> Request:
    """A read of ``count`` bytes of ``fd`` at ``offset`` into the memory at ``address``
    (asynchronous for an ``O_DIRECT`` fd; the memory must stay alive until it is done)."""
    return (_IOCB_CMD_PREAD, fd, address, count, offset, 0)


class _Batch:
    """The requests of one submission: their results, handed over once every one is in
    (to ``done``, a callable or a future)."""

    def __init__(self, done: asyncio.Future[list[int]] | Callable[[list[int]], None],
                 count: int) -> None:
        self.done = done
        self.results = [0] * count
        self._left = count

    def settle(self, index: int, result: int) -> None:
        self.results[index] = result
        self._left -= 1
        if self._left:
            return
        done = self.done
        if not isinstance(done, asyncio.Future):
            try:
                done(self.results)
            except Exception:  # a bug there must not lose the other completions reaped
                log.exception("AIO completion callback failed")
        elif not done.done():
            done.set_result(self.results)


class KernelSyncs:
    """An AIO context whose completions wake the event loop ``loop`` (one per DataNode;
    :meth:`close` it when the node stops)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, numbers: tuple[int, int, int, int]
                 ) -> None:
        self._setup, self._destroy, self._getevents, self._submit_nr = numbers
        context = ctypes.c_ulong(0)
        if _syscall(_long(self._setup), _long(DEPTH), ctypes.byref(context)) < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        self._context = context
        try:
            self._eventfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        except OSError:
            _syscall(_long(self._destroy), context)
            raise
        self._loop = loop
        loop.add_reader(self._eventfd, self._reap)
        #: Request id -> (the batch it belongs to, its slot in the batch's results).
        self._waiting: dict[int, tuple[_Batch, int]] = {}
        self._next_id = 1
        self._events = (_Event * 64)()
        self._no_wait = _Timespec(0, 0)
        # io_submit copies the iocbs: one scratch array serves every submission.
        self._blocks = (_Iocb * _SUBMIT_MAX)()
        self._pointers = (ctypes.POINTER(_Iocb) * _SUBMIT_MAX)(
            *(ctypes.pointer(block) for block in self._blocks))
        for block in self._blocks:  # what every request has in common
            block.flags = _IOCB_FLAG_RESFD
            block.resfd = self._eventfd
        #: False once the kernel refused a request: callers use threads from then on.
        self.enabled = True

    def available(self, count: int) -> bool:
        """Whether ``count`` more requests may be submitted now."""
        return self.enabled and len(self._waiting) + count <= DEPTH

    async def sync(self, fds: Sequence[int], *, data_only: bool) -> None:
        """fdatasync (``data_only``) or fsync every fd at once; returns when all are done.
        OSError for the first that failed (``EINVAL``: the kernel cannot, and this object
        is disabled: the caller syncs them another way). The requests cannot be taken back
        once submitted: a caller that may be cancelled awaits this through something that
        lets it finish (``transfer.to_the_end``) before the descriptors are closed."""
        results = await self.submit([sync_request(fd, data_only=data_only) for fd in fds])
        for result in results:
            self.check_sync(result)

    def check_sync(self, result: int) -> None:
        """OSError for a failed fsync request's result (see :meth:`sync`)."""
        if result < 0:
            if result == -errno.EINVAL:
                self.enabled = False
                log.info("the kernel refused an AIO fsync: syncing in threads instead")
            raise OSError(-result, os.strerror(-result))

    async def submit(self, requests: Sequence[Request]) -> list[int]:
        """Submit ``requests`` at once (in one ``io_submit``; the kernel runs them in any
        order); returns each one's result once all are done: bytes written, 0, or minus
        an errno. Cannot be taken back: see :meth:`sync` about cancellation."""
        return await self.start(requests)

    def start(self, requests: Sequence[Request]) -> asyncio.Future[list[int]]:
        """:meth:`submit` as a future of the results (a caller that chains a callback to
        it instead of awaiting it in a task)."""
        done: asyncio.Future[list[int]] = self._loop.create_future()
        self.start_calling(requests, done)
        return done

    def start_calling(self, requests: Sequence[Request],
                      done: asyncio.Future[list[int]] | Callable[[list[int]], None]) -> None:
        """Submit ``requests``; ``done`` gets their results: a callable is called on the
        loop as soon as the last completion is reaped (no loop turn in between)."""
        assert 0 < len(requests) <= _SUBMIT_MAX
        self._submit(_Batch(done, len(requests)), requests)

    def _submit(self, batch: _Batch, requests: Sequence[Request]) -> None:
        first = self._next_id
        for index, (opcode, fd, address, count, offset, rw_flags) in enumerate(requests):
            block = self._blocks[index]
            block.data = first + index
            block.opcode = opcode
            block.fildes = fd
            block.buf = address
            block.nbytes = count
            block.offset = offset
            block.rw_flags = rw_flags
            self._waiting[first + index] = (batch, index)
        self._next_id += len(requests)
        submitted = _syscall(_long(self._submit_nr), self._context, _long(len(requests)),
                             self._pointers)
        if submitted != len(requests):
            code = ctypes.get_errno() if submitted < 0 else errno.EAGAIN
            for index in range(max(submitted, 0), len(requests)):
                self._waiting.pop(first + index)
                batch.settle(index, -code)

    def _reap(self) -> None:
        try:
            os.eventfd_read(self._eventfd)
        except BlockingIOError:
            return
        while True:
            got = _syscall(_long(self._getevents), self._context, _long(0),
                           _long(len(self._events)), self._events, ctypes.byref(self._no_wait))
            if got < 0 and ctypes.get_errno() == errno.EINTR:
                continue  # (the eventfd was read: completions left now would wait forever)
            for event in self._events[: max(got, 0)]:
                entry = self._waiting.pop(event.data, None)
                if entry is not None:
                    entry[0].settle(entry[1], event.res)
            if got < len(self._events):
                return

    def close(self) -> None:
        """Wait for the requests in flight (``io_destroy`` does) and release the context."""
        self._loop.remove_reader(self._eventfd)
        _syscall(_long(self._destroy), self._context)
        os.close(self._eventfd)
        for batch, index in self._waiting.values():
            batch.settle(index, -errno.ECANCELED)
        self._waiting.clear()


def open_kernel_syncs(loop: asyncio.AbstractEventLoop) -> KernelSyncs | None:
    """A :class:`KernelSyncs` for ``loop``, or None where Linux AIO is not available."""
    numbers = _SYSCALLS.get(platform.machine())
    if numbers is None or _syscall is None or not hasattr(os, "eventfd"):
        return None
    try:
        return KernelSyncs(loop, numbers)
    except OSError as exc:
        log.info("Linux AIO unavailable (%s): fsyncs run in worker threads", exc)
        return None
