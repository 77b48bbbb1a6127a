"""Async drivers of replica I/O: receiving a block from a stream, reading one as a stream.

File work runs in worker threads. A thread cannot be interrupted, so a cancelled caller
first waits for the file operation it started (which may hold the descriptors its cleanup
closes) and only then cleans up and re-raises: see :func:`in_thread`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import functools
import logging
import os
from collections.abc import AsyncIterable, Awaitable, Callable, Iterator
from pathlib import Path
from typing import ParamSpec, TypeVar

from xdfs.common.aio import KernelSyncs, Request, read_request, sync_request, write_request
from xdfs.common.files import fsync_dir
from xdfs.datanode import direct
from xdfs.datanode.replica import NotCached, Replica, ReplicaReader, ReplicaWriter
from xdfs.datanode.storage import CommitStep, DataStorage
from xdfs.errors import CorruptReplica, StorageError
from xdfs.rpc.streams import StreamReceiver

log = logging.getLogger(__name__)

#: A stream that brings nothing for this long has paused: what a large replica's writer
#: staged is written into its rbw file (``_receive_new``).
PAUSE_S = 0.1

P = ParamSpec("P")
T = TypeVar("T")


async def in_thread(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn`` in a worker thread; on cancellation, wait for it to finish, then re-raise.
    (The loop's executor directly: no context copy nor task per hop, unlike
    ``asyncio.to_thread``; nothing run here reads context variables.)"""
    loop = asyncio.get_running_loop()
    if kwargs:
        return await to_the_end(loop.run_in_executor(None, functools.partial(fn, *args, **kwargs)))
    return await to_the_end(loop.run_in_executor(None, fn, *args))


async def to_the_end(work: Awaitable[T]) -> T:
    """Await ``work``; should the caller be cancelled meanwhile, let the work finish first
    (it may hold descriptors the caller's cleanup closes, or have committed a replica
    the caller must record), then re-raise."""
    future = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        while not future.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait([future])
        if not future.cancelled():
            future.exception()  # retrieved: the cancellation is what the caller reports
        raise


class Transfers:
    """Block transfers (writes, reads, replications) running now, for heartbeats."""

    def __init__(self) -> None:
        self.count = 0

    @contextlib.contextmanager
    def track(self) -> Iterator[None]:
        self.count += 1
        try:
            yield
        finally:
            self.count -= 1


async def receive_replica(
    storage: DataStorage,
    block_id: int,
    genstamp: int,
    chunks: AsyncIterable[bytes | memoryview],
    on_kept: Callable[[Replica], None],
    append_to: Replica | None = None,
    syncs: KernelSyncs | None = None,
) -> Replica:
    """Write the stream to rbw/ and finalize it once the stream ended normally.

    The caller has claimed ``block_id``. A partial replica is never finalized. When the
    stream breaks (bad chunk CRC, cut connection, cancellation: the writer went away, or a
    block recovery stopped the write), what was written is kept in state rbw, checksummed
    and fsynced, put in the map and handed to ``on_kept`` (a block recovery may finalize
    it); a disk error deletes the rbw files instead. A finalize that completed is kept even
    if the caller was cancelled meanwhile (the replica is whole).

    ``append_to``: the finalized replica the stream continues (``ReplicaWriter``'s
    ``prepare_reopen``, ``reopen``, ``sync_reopened``); until the end, the map holds what
    readers may see of it. ``syncs``: the kernel's AIO for a small replica's fsyncs
    (``aio.py``; None: worker threads)."""
    writer = storage.new_writer(block_id, genstamp)
    disk_failed = False
    try:
        if append_to is None:
            await _receive_new(storage, writer, chunks, syncs)
        else:
            tail = await in_thread(writer.prepare_reopen, append_to)
            # on the loop, with the map: no reader opens the replica between the two
            storage.add(writer.reopen(append_to, tail))
            await in_thread(writer.sync_reopened, append_to.data_path.parent)
            async for data in chunks:
                await in_thread(writer.write, data)
            dest = await in_thread(storage.finish_append, writer)
            storage.add(writer.move_appended(dest))  # with the map, as reopen
            await in_thread(writer.sync_appended)
    except StorageError:
        disk_failed = True
        raise
    finally:
        # writer.finalized is also set when the caller was cancelled during a finalize
        # that completed (in_thread waited for it).
        if writer.finalized is not None:
            storage.add(writer.finalized)
        else:
            await _keep_or_abort(storage, writer, disk_failed, on_kept)
    assert writer.finalized is not None
    _make_leaf_ahead(storage, block_id)
    return writer.finalized


def _make_leaf_ahead(storage: DataStorage, block_id: int) -> None:
    """The next leaf of finalized/ made in a worker thread in the background
    (``DataStorage.leaf_ahead``), if not made yet."""
    ahead = storage.leaf_ahead(block_id)
    if ahead is None:
        return

    def done(work: asyncio.Future[Path]) -> None:
        storage.leaf_ahead_done(ahead)
        if not work.cancelled() and work.exception() is not None:
            log.warning("cannot make the directory of block %d ahead (a write needing "
                        "it makes it): %s", ahead, work.exception())

    making = asyncio.get_running_loop().run_in_executor(None, storage.finalized_dir, ahead)
    making.add_done_callback(done)


def _one_by_one(
    chunks: AsyncIterable[bytes | memoryview],
) -> Callable[[], Awaitable[tuple[list[bytes | memoryview], bool]]]:
    """``StreamReceiver.next_batch`` for other iterables: one chunk per batch, then
    ``([], True)``."""
    iterator = aiter(chunks)

    async def next_batch() -> tuple[list[bytes | memoryview], bool]:
        try:
            return [await anext(iterator)], False
        except StopAsyncIteration:
            return [], True

    return next_batch


def _write_new(
    storage: DataStorage, writer: ReplicaWriter, batch: list[bytes | memoryview],
    ended: bool, replaced: Replica | None,
) -> None:
    """Worker thread: a batch of a new replica's chunks, its files opened first when this
    is the first batch, the replica finalized after it when the stream ``ended``."""
    if not writer.is_open:
        writer.open()
    for data in batch:
        writer.write(data, defer_checksums=True)
    if ended:
        storage.commit(writer, replaced)
    else:
        writer.flush()  # what arrived is in the rbw file, as a reader or recovery expects


async def _receive_new(
    storage: DataStorage, writer: ReplicaWriter,
    chunks: AsyncIterable[bytes | memoryview], syncs: KernelSyncs | None,
) -> None:
    """A new replica's stream into ``writer``, finalized once it ended normally.

    While the replica is within ``loop_write_max_bytes`` its batches are written on the
    event loop as they arrive (page-cache writes of a few hundred KiB cost less than
    handing them to a thread; a replica whose whole stream came in one batch is opened
    buffered), and a small replica is finalized without a thread (``_finalize_small``).
    Past that size: one hop to a worker thread per batch of chunks, the first such hop
    also opening the files, the last also finalizing."""
    on_loop = True
    # A replica whose whole stream is in hand is staged for the kernel's direct write when
    # it has the AIO for it (``KernelCommit``), else written through the page cache.
    stage = (storage.small_direct_io and syncs is not None and syncs.enabled
             and direct.KERNEL_WRITES)
    # Batches of what arrived together, each with whether the stream ended with it (the
    # last may be empty: the stream ended with no more data). A stream's own, without an
    # async generator between (a small replica's stream is one or two batches).
    receiver = chunks if isinstance(chunks, StreamReceiver) else None
    next_batch = receiver.next_batch if receiver is not None else _one_by_one(chunks)
    ended = False
    while not ended:
        if not on_loop and receiver is not None and not await receiver.ready(PAUSE_S):
            # The sender paused: the bytes a large replica's writer keeps staged (to write
            # them in large pieces) go into the rbw file, as a reader or recovery expects.
            await in_thread(writer.flush, True)
        batch, ended = await next_batch()
        if on_loop and writer.num_bytes + sum(map(len, batch)) <= storage.loop_write_max_bytes:
            _write_on_loop(writer, batch, ended, stage)
            if ended:
                await _finalize_small(storage, writer, syncs)
            continue
        on_loop = False
        replaced = storage.get(writer.block_id) if ended else None
        await in_thread(_write_new, storage, writer, batch, ended, replaced)


def _write_on_loop(writer: ReplicaWriter, batch: list[bytes | memoryview], ended: bool,
                   stage: bool) -> None:
    """On the event loop: a batch of a small replica into its rbw files, through the page
    cache (or, the whole replica in hand and ``stage``, into the data file's staging
    buffer for the kernel's direct write); at the end of the stream its checksum file is
    completed, otherwise what arrived is put in the file (as ``_write_new`` does)."""
    if not writer.is_open:
        writer.open(buffered=ended and not stage)
    for data in batch:
        writer.write(data, defer_checksums=True)
    if ended:
        writer.finish_writes()
    else:
        writer.flush()


async def _finalize_small(
    storage: DataStorage, writer: ReplicaWriter, syncs: KernelSyncs | None
) -> None:
    """``storage.commit`` of a small replica written on the loop: its steps driven by the
    kernel's AIO completions (:class:`KernelCommit`), so no thread is involved (the
    worker thread's commit when AIO is unavailable or busy). Run to the end even if the
    caller is cancelled (``to_the_end``), as a commit in a worker thread is."""
    replaced = storage.get(writer.block_id)
    if syncs is None or not syncs.available(3):
        await in_thread(storage.commit, writer, replaced)
        return
    await to_the_end(KernelCommit(storage, writer, replaced, syncs).done)


class KernelCommit:
    """``DataStorage.commit_steps`` run on the event loop, each step's requests handed to
    the kernel's AIO (``aio.py``) and the next step taken in the completion's callback: no
    task and no loop turn between the steps, the renames done on the loop. ``done`` gets
    the outcome (the replica is ``writer.finalized``); the steps go on to the end whoever
    waits. A replica staged whole (``ReplicaWriter.kernel_write``) has its data written
    direct by the kernel, in the submission that fdatasyncs the checksum file, and the
    data file fdatasynced once that write is done, or, where the file system honours it
    (``DataStorage.dsync_direct_writes``), made durable by that write itself
    (``RWF_DSYNC``: one disk step and one AIO round trip fewer per replica, its unaligned
    end fdatasynced in the same submission) (a buffered write of fresh page-cache
    pages cost ~0.6 ms of kernel CPU per 200 KiB here, the direct one a tenth); otherwise
    both fdatasyncs at once. Should the kernel refuse AIO fsyncs (``syncs.enabled`` turns
    false), the step is done in a worker thread instead."""

    def __init__(self, storage: DataStorage, writer: ReplicaWriter, replaced: Replica | None,
                 syncs: KernelSyncs) -> None:
        self._loop = asyncio.get_running_loop()
        self.done: asyncio.Future[None] = self._loop.create_future()
        self._writer = writer
        self._syncs = syncs
        self._steps = storage.commit_steps(writer, replaced)
        self._storage = storage
        self._dir_fd = -1
        self._advance(None)

    def _advance(self, answer: Path | None) -> None:
        """The next step started (or the outcome set)."""
        try:
            step = self._steps.send(answer)
            if step is CommitStep.DURABLE:
                self._durable()
            elif step is CommitStep.MAKE_DIR:
                self._in_thread(self._storage.finalized_dir, self._writer.block_id)
            else:
                self._sync_dir(step)
        except StopIteration:
            self.done.set_result(None)
        except Exception as exc:  # (StorageError; a bug must still end the commit)
            self._fail(exc)

    def _fail(self, exc: Exception) -> None:
        self._steps.close()
        self.done.set_exception(exc)

    def _in_thread(self, fn: Callable[..., object], *args: object) -> None:
        """A step done in a worker thread (``in_thread``: rare, a task is fine), the next
        one taken on the loop after it."""
        def then(work: asyncio.Future[object]) -> None:
            exc = work.exception()
            if exc is not None:
                self._fail(exc if isinstance(exc, Exception) else StorageError(str(exc)))
            else:
                result = work.result()
                self._advance(result if isinstance(result, Path) else None)
        asyncio.ensure_future(in_thread(fn, *args)).add_done_callback(then)

    def _on(self, requests: list[Request], then: Callable[[list[int]], None],
            fallback: Callable[..., None], *args: object) -> None:
        """``requests`` submitted; ``then`` gets their results. An OSError it raises (a
        failed fsync) fails the commit, or runs ``fallback`` in a thread if it was the
        kernel refusing AIO fsyncs (``fallback(*args)``)."""
        def settled(results: list[int]) -> None:
            try:
                then(results)
            except OSError as exc:
                if self._syncs.enabled:
                    what = (f"directory {args[0]}" if args else
                            f"block {self._writer.block_id} in {self._writer.rbw_dir}")
                    self._fail(StorageError(f"fsync of {what} failed: {exc}"))
                else:
                    self._in_thread(fallback, *args)
            except Exception as exc:
                self._fail(exc)
        self._syncs.start_calling(requests, settled)

    def _durable(self) -> None:
        writer = self._writer
        data_fd, meta_fd = writer.sync_fds
        staged = writer.kernel_write()
        if staged is None or not staged[1]:  # (nothing aligned: all went to the page cache)
            self._on([sync_request(data_fd, data_only=True),
                      sync_request(meta_fd, data_only=True)],
                     self._synced, self._writer.sync_and_close)
            return
        address, aligned = staged
        dsync = self._storage.dsync_direct_writes
        requests = [write_request(data_fd, address, aligned, 0, dsync=dsync),
                    sync_request(meta_fd, data_only=True)]
        if dsync and aligned < writer.num_bytes:  # its unaligned end, in the page cache
            requests.append(sync_request(data_fd, data_only=True))
        self._on(requests, functools.partial(self._written, aligned, dsync),
                 self._writer.sync_and_close)

    def _written(self, aligned: int, dsync: bool, results: list[int]) -> None:
        """The direct write done (durable too with ``dsync``: ``RWF_DSYNC``, the unaligned
        end fdatasynced beside it, so the data file needs no step of its own), the
        checksum file durable."""
        wrote, *synced = results
        for result in synced:
            self._syncs.check_sync(result)
        writer = self._writer
        if wrote == -errno.EINVAL:  # the file system opened the file direct but refuses
            writer.write_aligned_buffered()
        elif wrote != aligned:
            code = -wrote if wrote < 0 else errno.EIO  # (a short write: out of space)
            raise StorageError(f"direct write of block {writer.block_id} in "
                               f"{writer.rbw_dir} failed: {os.strerror(code)}")
        elif dsync:
            self._synced([])
            return
        self._on([sync_request(writer.sync_fds[0], data_only=True)], self._synced,
                 self._writer.sync_and_close)

    def _synced(self, results: list[int]) -> None:
        for result in results:
            self._syncs.check_sync(result)
        self._writer.close_synced()
        self._advance(None)

    def _sync_dir(self, directory: Path) -> None:
        """``fsync_dir`` through the kernel's AIO (in a thread if it refuses)."""
        try:
            self._dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            raise StorageError(f"cannot open directory {directory} to fsync it: "
                               f"{exc}") from exc

        def synced(results: list[int]) -> None:
            self._close_dir()
            self._syncs.check_sync(results[0])
            self._advance(None)

        try:
            self._on([sync_request(self._dir_fd, data_only=False)], synced, fsync_dir,
                     directory)
        except BaseException:
            self._close_dir()
            raise

    def _close_dir(self) -> None:
        fd, self._dir_fd = self._dir_fd, -1
        if fd >= 0:
            os.close(fd)


async def _keep_or_abort(
    storage: DataStorage, writer: ReplicaWriter, disk_failed: bool,
    on_kept: Callable[[Replica], None],
) -> None:
    kept = None
    if (writer.is_open or writer.synced) and not disk_failed:
        try:
            kept = await in_thread(writer.keep)
        except StorageError as exc:
            log.error("cannot keep the partial replica of block %d: %s", writer.block_id, exc)
    if kept is None:
        writer.abort()
        return
    storage.add(kept)
    log.info("write of block %d broke after %d bytes: kept in rbw for block recovery",
             kept.block_id, kept.num_bytes)
    on_kept(kept)


class PieceStream:
    """Verified pieces of a replica range as an async iterator (a download's chunks or a
    replication upload's). The reader is closed when the stream ends, fails, or is
    dropped unfinished (the server abandons a download's chunks when the peer goes away).

    The next piece is read (in a thread) while the current one is sent, so disk reads
    overlap the network. Pieces are views of the reader's two alternating buffers: the RPC
    layer copies each piece into its frame before asking for the next, and the read ahead
    fills the other buffer, so no copy of our own is needed."""

    def __init__(
        self,
        reader: ReplicaReader,
        on_corrupt: Callable[[Replica, CorruptReplica], None],
        transfers: Transfers,
        syncs: KernelSyncs | None = None,
    ) -> None:
        """``syncs``: the kernel's AIO, for the pieces of a reader that reads direct
        (``ReplicaReader.kernel_read``): read without a worker thread."""
        self._reader: ReplicaReader | None = reader
        self._on_corrupt = on_corrupt
        self._transfers = transfers
        self._syncs = syncs
        self._ahead: asyncio.Future[memoryview | None] | None = None
        transfers.count += 1

    def __aiter__(self) -> PieceStream:
        return self

    def _read_ahead(self, reader: ReplicaReader) -> asyncio.Future[memoryview | None]:
        """The next piece: read by the kernel's AIO when the reader is direct, on the loop
        when it is all in the page cache (a small replica written or read through it: no
        thread hop), else in a worker thread."""
        syncs = self._syncs
        if reader.kernel_reads and syncs is not None and syncs.available(1):
            return _kernel_read(syncs, reader)
        if reader.cached_reads:
            done: asyncio.Future[memoryview | None] = (
                asyncio.get_running_loop().create_future())
            try:
                done.set_result(reader.read_piece(cached_only=True))
            except NotCached:
                pass
            except Exception as exc:  # (CorruptReplica, StorageError: as from the thread)
                done.set_exception(exc)
                return done
            else:
                return done
        return asyncio.ensure_future(in_thread(reader.read_piece))

    async def __anext__(self) -> memoryview:
        reader = self._reader
        if reader is None:
            raise StopAsyncIteration
        if self._ahead is None and reader.exhausted:  # no read in flight moves it meanwhile
            self.close()
            raise StopAsyncIteration
        pending = self._ahead or self._read_ahead(reader)
        self._ahead = None
        try:
            piece = await pending
        except CorruptReplica as exc:
            self.close()
            self._on_corrupt(reader.replica, exc)
            raise
        except BaseException:
            self.close()
            raise
        if piece is None:
            self.close()
            raise StopAsyncIteration
        if not reader.exhausted:  # the end is known without a hop: a small block is one
            self._ahead = self._read_ahead(reader)
        return piece

    def close(self) -> None:
        ahead, self._ahead = self._ahead, None
        reader, self._reader = self._reader, None
        if reader is None:
            return
        self._transfers.count -= 1
        if ahead is None or ahead.done():
            if ahead is not None and not ahead.cancelled():
                ahead.exception()  # retrieved: nobody wants a piece past the end
            _close_soon(reader)
        else:
            # The read ahead still uses the descriptors: close them once it is done.
            ahead.add_done_callback(lambda done: _close_after(done, reader))

    def __del__(self) -> None:
        self.close()


def _kernel_read(syncs: KernelSyncs, reader: ReplicaReader) -> asyncio.Future[memoryview | None]:
    """The reader's next piece read by the kernel's AIO and verified on the loop as soon
    as the completion is reaped: a future done only once the kernel is done with the
    buffer (should it be cancelled meanwhile, the pinned buffer stays mapped until then
    and is not pooled again: ``direct.give_back``)."""
    piece: asyncio.Future[memoryview | None] = asyncio.get_running_loop().create_future()
    fd, pin, count, offset = reader.kernel_read()

    def done(results: list[int]) -> None:
        nonlocal pin
        del pin  # the kernel is done with the buffer
        if piece.cancelled():
            return
        try:
            piece.set_result(reader.kernel_read_done(results[0]))
        except Exception as exc:  # (CorruptReplica, StorageError: as from a thread's read)
            piece.set_exception(exc)

    syncs.start_calling([read_request(fd, ctypes.addressof(pin), count, offset)], done)
    return piece


def _close_soon(reader: ReplicaReader) -> None:
    """Close ``reader`` at the next turn of the loop (at once when no loop runs). The task
    that took the last piece runs inside the loop's handle that woke it, which still
    refers to the awaited future and so to that piece, a view of the reader's buffer:
    closed in the same turn, a pooled buffer was refused by the pool (still viewed) and
    unmapped, and the next reader page-faulted a fresh one in (a third of small reads)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # (garbage-collected after the loop stopped)
        reader.close()
        return
    loop.call_soon(reader.close)


def _close_after(done: asyncio.Future[memoryview | None], reader: ReplicaReader) -> None:
    if not done.cancelled():
        done.exception()
    reader.close()
