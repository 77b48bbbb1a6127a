"""Checkpoints that never stop the event loop: the image is written by a forked child.

``os.fork()`` gives the child a copy-on-write copy of the whole process, so the namespace it
sees is exactly the one at the instant of the fork, whatever the NameNode does afterwards.
The caller forks (:func:`start_checkpoint`, synchronous) at a point where the namespace holds
exactly the ops up to ``txid`` (no ``await`` between reading ``txid`` and forking), and goes
on serving; the child runs phase 1 of a save only (:func:`~.fsimage.write_checkpoint_files`:
``fsimage.ckpt_<txid>`` written and fsynced, md5 computed), reports the md5 through a pipe and
exits with ``os._exit``. The parent then runs phase 2 in a thread
(:func:`~.fsimage.install_checkpoint_files`: md5 file, rename, dir fsync, ``seen_txid``), so
the image bytes and every durability step are those of a stop-the-world save at ``txid``,
and the fault points of a save fire in the NameNode process as before.

Why a fork rather than a copy-on-write namespace or a chunked walk: it is the only option
that changes no mutation path (every op of ``namespace/tree.py`` would otherwise have to copy
inodes while a save runs, and a missed one silently corrupts images), and its pause is the
fork itself: copying the page tables, about 1-2 ms per 100 MB of heap. The price is memory:
the child touches every inode (reference counts), so its pages get copied as it goes; plan
for up to twice the NameNode's heap while a checkpoint is written (docs/operations.md).

The child is safe although the parent has threads: it runs only pure Python over the
namespace, msgspec, hashlib and ``os`` file calls, never logs or takes a lock another thread
could hold, closes every inherited descriptor (sockets: the port and the connections stay
the parent's alone), and leaves through ``os._exit`` (no atexit, no asyncio). It dies with
its parent (``PR_SET_PDEATHSIG``): a NameNode killed with ``kill -9`` leaves no writer
behind, only a ``.ckpt`` that the next checkpoint purges; its older image and all its
edits are untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import hashlib
import logging
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from xdfs.errors import StorageError
from xdfs.namenode.image.fsimage import (
    image_targets,
    install_checkpoint_files,
    remove_checkpoint_files,
    write_checkpoint_files,
)
from xdfs.namenode.image.recovery import CheckpointSource, checkpoint_source
from xdfs.namenode.image.storage import StorageDirectory
from xdfs.namenode.namespace.ops import ImageHeader

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
_MESSAGE_BYTES_MAX = 4096
_FDS_MAX = os.sysconf("SC_OPEN_MAX")
hashlib.md5(b"")  # OpenSSL loads its md5 now, under its own locks, not in a forked child
try:  # loaded now: the child must not load libraries
    _LIBC: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover - not Linux
    _LIBC = None


@dataclass
class Checkpoint:
    """A checkpoint under way: a child writing ``fsimage.ckpt_<txid>`` to ``targets``
    (none: every dir had the image already, nothing to do)."""

    dirs: list[StorageDirectory]
    targets: list[StorageDirectory]
    header: ImageHeader
    timeout_s: float
    pid: int = 0
    pipe: int = -1

    @property
    def txid(self) -> int:
        return self.header.txid


def start_checkpoint(
    dirs: Sequence[StorageDirectory], namespace: CheckpointSource, txid: int, timeout_s: float
) -> Checkpoint:
    """Fork the writer of ``fsimage_<txid>`` for ``namespace`` as it is now (the caller
    makes sure it holds exactly the ops up to ``txid``). Then :func:`finish_checkpoint`,
    which kills a writer still running after ``timeout_s``."""
    header, source = checkpoint_source(dirs, namespace, txid)
    checkpoint = Checkpoint(list(dirs), image_targets(dirs, txid), header, timeout_s)
    if not checkpoint.targets:
        return checkpoint
    read_fd, write_fd = os.pipe()
    parent = os.getpid()
    forking_at = time.perf_counter()
    try:
        pid = os.fork()
    except OSError as exc:
        os.close(read_fd)
        os.close(write_fd)
        raise StorageError(f"cannot fork the image writer: {exc}") from exc
    if pid == 0:  # the child never returns
        os.close(read_fd)
        _child(parent, write_fd, lambda: write_checkpoint_files(
            checkpoint.targets, header, source))
    os.close(write_fd)
    log.info("forked the writer of image %d (pid %d): the NameNode paused %.1f ms", txid, pid,
             (time.perf_counter() - forking_at) * 1000)
    checkpoint.pid, checkpoint.pipe = pid, read_fd
    return checkpoint


async def finish_checkpoint(checkpoint: Checkpoint) -> list[Path]:
    """Wait for the writer, then install the image (in a thread); returns the image paths.
    Cancelled or failed: the writer is killed and its ``.ckpt`` files removed."""
    if checkpoint.targets:
        try:
            digest = await _wait(checkpoint)
            await asyncio.to_thread(
                install_checkpoint_files, checkpoint.targets, checkpoint.header, digest)
        except BaseException:
            # (a failing disk may refuse this too: the save's own error is what to report)
            with contextlib.suppress(OSError):
                remove_checkpoint_files(checkpoint.targets, checkpoint.txid)
            raise
    return [d.image_path(checkpoint.txid) for d in checkpoint.dirs]


async def _wait(checkpoint: Checkpoint) -> str:
    reaper = asyncio.ensure_future(asyncio.to_thread(_reap, checkpoint.pid, checkpoint.pipe))
    try:
        status, message = await asyncio.wait_for(asyncio.shield(reaper), checkpoint.timeout_s)
    except (asyncio.CancelledError, TimeoutError) as exc:
        with contextlib.suppress(ProcessLookupError):
            os.kill(checkpoint.pid, signal.SIGKILL)
        await asyncio.wait([reaper])  # reaped: no zombie, the pipe closed
        if isinstance(exc, asyncio.CancelledError):
            raise
        raise StorageError(f"the writer of image {checkpoint.txid} was still running after "
                           f"{checkpoint.timeout_s} s: killed") from None
    text = message.decode("utf-8", "replace")
    if status == 0 and text.startswith("ok "):
        return text[3:]
    if text.startswith("error "):
        raise StorageError(f"writing image {checkpoint.txid}: {text[6:]}")
    raise StorageError(f"the writer of image {checkpoint.txid} died ({_describe(status)})")


def _reap(pid: int, pipe: int) -> tuple[int, bytes]:
    """(exit code, message) of the child: reads its pipe to the end, then waits for it."""
    chunks = []
    try:
        while chunk := os.read(pipe, _MESSAGE_BYTES_MAX):
            chunks.append(chunk)
    finally:
        os.close(pipe)
    _, wait_status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(wait_status), b"".join(chunks)


def _describe(status: int) -> str:
    if status < 0:
        return f"killed by {signal.Signals(-status).name}"
    return f"exit code {status}"


def _child(parent: int, write_fd: int, work: Callable[[], str]) -> None:
    """Run ``work()`` -> md5 and report ``ok <md5>`` or ``error <text>``; never returns."""
    code = 1
    try:
        _detach(parent, write_fd)
        message = f"ok {work()}"
        code = 0
    except BaseException as exc:
        message = f"error {getattr(exc, 'message', None) or exc!r}"
    finally:
        try:
            os.write(write_fd, message.encode("utf-8", "replace")[:_MESSAGE_BYTES_MAX])
        finally:
            os._exit(code)


def _detach(parent: int, keep_fd: int) -> None:
    """Die with the parent; leave its signals, its event loop and its sockets alone."""
    gc.disable()  # the collector would touch (and so copy) every tracked page
    # Inherited sockets would keep the NameNode's port bound and its closed connections
    # open (no FIN) while the child runs: close every descriptor but stdio and the pipe.
    os.closerange(3, keep_fd)
    os.closerange(keep_fd + 1, _FDS_MAX)
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the prctl
        os._exit(1)
    with contextlib.suppress(ValueError):  # only the main thread may (and needs to)
        signal.set_wakeup_fd(-1)  # a signal to the child must not wake the parent's loop
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        with contextlib.suppress(ValueError):
            signal.signal(signum, signal.SIG_DFL)
