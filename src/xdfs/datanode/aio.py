"""fsyncs the event loop hands to the kernel (Linux native AIO), without a worker thread.

Why: a small replica's write is three fsyncs (data, checksum file, directory) and little
else. Handed to a worker thread, every system call of that thread (each fsync, close,
rename) gave the GIL back and took it again against the busy event loop: measured ~30
context switches and ~80 futex calls per replica, a large part of the DataNode's CPU per
small file (docs/benchmarks.md). Linux's AIO runs ``IOCB_CMD_FDSYNC`` / ``IOCB_CMD_FSYNC``
in a kernel worker (since 4.18) and signals completion through an eventfd the loop
watches, so the loop thread does the renames itself and no Python thread is involved.

:func:`open_kernel_syncs` returns None where this is unavailable (another OS or CPU, a
kernel or sandbox refusing ``io_setup``); :class:`KernelSyncs` turns itself off when the
kernel refuses an fsync request (``EINVAL``: an old kernel, a file system without it).
Callers then fsync in a worker thread as before. ctypes only: no compiled code.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import logging
import os
import platform
from collections.abc import Sequence

log = logging.getLogger(__name__)

#: System call numbers of io_setup, io_destroy, io_getevents, io_submit.
_SYSCALLS = {"x86_64": (206, 207, 208, 209), "aarch64": (0, 1, 4, 2)}
_IOCB_CMD_FSYNC = 2
_IOCB_CMD_FDSYNC = 3
_IOCB_FLAG_RESFD = 1
#: Requests in flight at once; past it, callers use a worker thread.
DEPTH = 256


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


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_long = ctypes.c_long  # every argument of syscall(2) is read as a long


class KernelSyncs:
    """An AIO context whose completions wake the event loop ``loop`` (one per DataNode;
    :meth:`close` it when the node stops)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, numbers: tuple[int, int, int, int]
                 ) -> None:
        self._setup, self._destroy, self._getevents, self._submit = numbers
        context = ctypes.c_ulong(0)
        if _syscall(_long(self._setup), _long(DEPTH), ctypes.byref(context)) < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        self._context = context
        self._eventfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._loop = loop
        loop.add_reader(self._eventfd, self._reap)
        self._waiting: dict[int, asyncio.Future[int]] = {}
        self._next_id = 1
        self._events = (_Event * 64)()
        self._no_wait = _Timespec(0, 0)
        #: False once the kernel refused a request: callers use threads from then on.
        self.enabled = True

    def available(self, count: int) -> bool:
        """Whether ``count`` more requests may be submitted now."""
        return self.enabled and len(self._waiting) + count <= DEPTH

    async def sync(self, fds: Sequence[int], *, data_only: bool) -> None:
        """fdatasync (``data_only``) or fsync every fd at once; returns when all are done.
        OSError for the first that failed (``EINVAL``: the kernel cannot, and this object
        is disabled: the caller syncs them another way). Like a worker thread, the requests
        cannot be taken back: a cancelled caller waits for them before it re-raises."""
        futures = self._submit_all(fds, _IOCB_CMD_FDSYNC if data_only else _IOCB_CMD_FSYNC)
        done = asyncio.gather(*futures)
        try:
            results: list[int] = await asyncio.shield(done)
        except asyncio.CancelledError:
            await asyncio.wait([done])
            if not done.cancelled():
                done.exception()
            raise
        for result in results:
            if result < 0:
                if result == -errno.EINVAL:
                    self.enabled = False
                    log.info("the kernel refused an AIO fsync: syncing in threads instead")
                raise OSError(-result, os.strerror(-result))

    def _submit_all(self, fds: Sequence[int], opcode: int) -> list[asyncio.Future[int]]:
        blocks = (_Iocb * len(fds))()
        pointers = (ctypes.POINTER(_Iocb) * len(fds))()
        futures = []
        for index, fd in enumerate(fds):
            block = blocks[index]
            block.data = self._next_id
            block.opcode = opcode
            block.fildes = fd
            block.flags = _IOCB_FLAG_RESFD
            block.resfd = self._eventfd
            pointers[index] = ctypes.pointer(block)
            future = self._loop.create_future()
            self._waiting[self._next_id] = future
            futures.append(future)
            self._next_id += 1
        submitted = _syscall(_long(self._submit), self._context, _long(len(fds)), pointers)
        if submitted != len(fds):  # the kernel copied the iocbs: they need not outlive this
            code = ctypes.get_errno() if submitted < 0 else errno.EAGAIN
            for index in range(max(submitted, 0), len(fds)):
                self._waiting.pop(blocks[index].data).set_result(-code)
        return futures

    def _reap(self) -> None:
        try:
            os.eventfd_read(self._eventfd)
        except BlockingIOError:
            return
        while True:
            got = _syscall(_long(self._getevents), self._context, _long(0),
                           _long(len(self._events)), self._events, ctypes.byref(self._no_wait))
            for event in self._events[: max(got, 0)]:
                future = self._waiting.pop(event.data, None)
                if future is not None and not future.done():
                    future.set_result(event.res)
            if got < len(self._events):
                return

    def close(self) -> None:
        """Wait for the requests in flight (``io_destroy`` does) and release the context."""
        self._loop.remove_reader(self._eventfd)
        _syscall(_long(self._destroy), self._context)
        os.close(self._eventfd)
        for future in self._waiting.values():
            if not future.done():
                future.set_result(-errno.ECANCELED)
        self._waiting.clear()


def open_kernel_syncs(loop: asyncio.AbstractEventLoop) -> KernelSyncs | None:
    """A :class:`KernelSyncs` for ``loop``, or None where Linux AIO is not available."""
    numbers = _SYSCALLS.get(platform.machine())
    if numbers is None or not hasattr(os, "eventfd"):
        return None
    try:
        return KernelSyncs(loop, numbers)
    except OSError as exc:
        log.info("Linux AIO unavailable (%s): fsyncs run in worker threads", exc)
        return None
