"""The edits log: an asyncio driver over the pure :class:`~xdfs.editlog.buffer.DoubleBuffer`
and one or more journals (a :class:`~xdfs.editlog.segments.FileJournal` per name dir).

Use from a request handler, with no ``await`` between apply and append::

    await editlog.wait_for_room()      # back-pressure: the current buffer is full
    result = namespace.apply(op)       # may raise a NamespaceError: nothing logged
    txid = editlog.append(op)          # synchronous: assigns the txid, buffers the record
    await editlog.sync(txid)           # durable on every journal
    reply(result)

**Durability before acknowledgement** is enforced here: :meth:`EditLog.sync` returns only
after a flush that covers ``txid`` has been written *and fsynced* on every journal. One
syncer task at a time swaps the buffers and writes the ready one (in worker threads) while
appends continue into the other; every waiter the flush covers is released by it (group
commit). If any journal fails a write or fsync, the log is *failed*: a CRITICAL line names the
journal, ``on_fatal(error)`` is called (the NameNode exits rather than diverge), every waiter
gets a :class:`~xdfs.errors.StorageError`, and nothing is ever acknowledged again.

Segments roll automatically once a flush leaves the open one at ``edits_segment_bytes_max``
bytes or ``edits_segment_txns_max`` txns, and on :meth:`EditLog.roll`.

:func:`read_edits` is the read side (replay, ``fetch_edits`` for the BackupNode): it reads
finalized and in-progress segments of one or more dirs, falling back to the next dir when a
dir's copy is damaged. :meth:`EditLog.read_cached` serves recently synced edits from memory.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, Protocol

from xdfs.editlog.buffer import DoubleBuffer, FlushBatch
from xdfs.editlog.framing import SEGMENT_HEADER_BYTES, Frame, parse_frame, record_bounds
from xdfs.editlog.segments import (
    EDITS_PREALLOCATE_BYTES,
    FileJournal,
    SegmentReader,
    segment_index,
)
from xdfs.errors import ConfigError, StorageError
from xdfs.namenode.editlog.codec import decode_frame, decode_payload, encode_record
from xdfs.namenode.editlog.flushwait import FlushFuture
from xdfs.namenode.namespace.ops import LAYOUT_VERSION, Op

log = logging.getLogger("xdfs.namenode.editlog")

KiB = 1024
MiB = 1024 * KiB


@dataclass(frozen=True)
class EditLogSettings:
    """Limits of the edits log; field names match the ``[namenode]`` config keys."""

    #: Size of each half of the double buffer; appenders wait (wait_for_room) beyond it.
    edits_buffer_bytes: int = 512 * KiB
    #: Roll the open segment once a flush leaves it at or past this many bytes.
    edits_segment_bytes_max: int = 64 * MiB
    #: ... or at or past this many transactions.
    edits_segment_txns_max: int = 1_000_000
    #: Recently synced edits kept in memory for read_cached (BackupNode fetches).
    edits_cache_bytes: int = 4 * MiB

    def __post_init__(self) -> None:
        if self.edits_buffer_bytes < 1:
            raise ConfigError("edits_buffer_bytes must be >= 1")
        if self.edits_segment_bytes_max < SEGMENT_HEADER_BYTES + 1:
            raise ConfigError("edits_segment_bytes_max is too small")
        if self.edits_segment_txns_max < 1:
            raise ConfigError("edits_segment_txns_max must be >= 1")
        if self.edits_cache_bytes < 0:
            raise ConfigError("edits_cache_bytes must be >= 0")

    @classmethod
    def from_config(cls, namenode: object) -> EditLogSettings:
        """From a ``NameNodeConfig`` (any object with the matching attributes)."""
        defaults = cls()
        return cls(**{
            name: getattr(namenode, name, getattr(defaults, name))
            for name in cls.__dataclass_fields__
        })


class Journal(Protocol):
    """Where flushed batches go. Every method returns only when its effect is durable."""

    @property
    def name(self) -> str: ...

    async def recover_unfinalized(self, next_txid: int) -> None: ...

    async def start_segment(self, first_txid: int) -> None: ...

    async def write(self, data: bytes | bytearray, first_txid: int, last_txid: int) -> None: ...

    def start_write(self, data: bytes | bytearray, first_txid: int, last_txid: int,
                    done: Callable[[BaseException | None], None]) -> bool:
        """Start :meth:`write` without a task, ``done(None)`` or ``done(error)`` called
        from the loop when it ends; False when the journal cannot (then :meth:`write`)."""
        ...

    async def finalize_segment(self, first_txid: int, last_txid: int) -> None: ...

    async def close(self) -> None: ...

    def finalized_ranges(self) -> list[tuple[int, int]]:
        """(start, end) of the finalized segments this journal holds, oldest first."""
        ...


class NameDir(Protocol):
    """What the edits log needs of a name dir (a ``StorageDirectory``): where its segments
    go, and its ``seen_txid``, raised as segments start and are finalized."""

    @property
    def current(self) -> Path: ...

    def write_seen_txid(self, txid: int) -> None: ...


State = Literal["new", "open", "closing", "closed", "failed"]

#: Told once a txid is durable (None) or can never be (the log's error): a mutation whose
#: answer leaves without a task or a future (:meth:`EditLog.when_synced`).
SyncCallback = Callable[[BaseException | None], None]
#: What waits for a flush: a future (``await sync()``) or a plain callback.
Waiter = asyncio.Future[None] | SyncCallback


#: (Final: a C static in the compiled module, not a module attribute read per waiter.)
_FUTURE: Final = asyncio.Future


def _release(waiter: Waiter, error: BaseException | None) -> None:
    """Tell one waiter of a flush its outcome: ``error`` None when it is durable."""
    if isinstance(waiter, _FUTURE):
        if not waiter.done():
            if error is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(error)
        return
    try:
        waiter(error)
    except Exception:  # one answer's failure must not stop the syncer (or the others)
        log.exception("edits sync callback failed")


class EditLog:
    def __init__(
        self,
        journals: Sequence[Journal],
        settings: EditLogSettings | None = None,
        *,
        on_fatal: Callable[[BaseException], None] | None = None,
    ) -> None:
        if not journals:
            raise StorageError("the edits log needs at least one journal")
        self.journals = list(journals)
        self.settings = settings or EditLogSettings()
        self.on_fatal = on_fatal
        self._state: State = "new"
        self._buffer: DoubleBuffer[Waiter] = DoubleBuffer(
            self.settings.edits_buffer_bytes, 0
        )
        self._room_waiters: list[asyncio.Future[None]] = []
        #: The future the waiters of the current buffer's flush share (synced_future).
        self._group: FlushFuture | None = None
        #: The current buffer is full: :meth:`wait_for_room` before applying an op. An
        #: attribute kept with the buffer, so a mutation reads it without a call.
        self.buffer_full = False
        self._io_lock = asyncio.Lock()
        self._closed = asyncio.Event()
        self._syncer: asyncio.Task[None] | None = None
        #: What the syncer awaits while nothing needs a flush (None while it flushes).
        self._syncer_idle: asyncio.Future[None] | None = None
        self._fatal: StorageError | None = None
        self._segment_start = 0
        self._segment_bytes = 0
        self._segment_txns = 0
        self._cache: collections.deque[FlushBatch] = collections.deque()
        self._cache_bytes = 0
        # Finalized segments as (start, end): an immutable tuple replaced on every roll or
        # purge (copy-on-write), so readers such as the edits replicator take a snapshot
        # without ever locking against the syncer.
        self._finalized: tuple[tuple[int, int], ...] = ()
        self._synced_event = asyncio.Event()
        #: The loop the log was opened in (each sync's future: ``get_running_loop`` is a
        #: getpid system call per mutation, ~2 us here).
        self._loop: asyncio.AbstractEventLoop | None = None
        self.flush_count = 0
        #: Told (seconds, transactions) of each durable flush: group-commit metrics.
        self.on_flushed: Callable[[float, int], None] | None = None
        self.roll_count = 0

    @classmethod
    def for_storage(
        cls,
        dirs: Sequence[NameDir],
        settings: EditLogSettings | None = None,
        *,
        on_fatal: Callable[[BaseException], None] | None = None,
        extra_journals: Sequence[Journal] = (),
    ) -> EditLog:
        """A FileJournal per name dir (the first one is what readers of finalized segments
        consult), then ``extra_journals`` (the shared edits)."""
        journals: list[Journal] = [
            FileJournal(d.current, LAYOUT_VERSION, seen_txid=d.write_seen_txid,
                        preallocate_bytes=EDITS_PREALLOCATE_BYTES)
            for d in dirs
        ]
        return cls([*journals, *extra_journals], settings, on_fatal=on_fatal)

    # -- properties --

    @property
    def state(self) -> State:
        return self._state

    @property
    def last_txid(self) -> int:
        """Last txid appended (durable or not)."""
        return self._buffer.last_txid

    @property
    def synced_txid(self) -> int:
        """Every txid up to this one is durable on every journal."""
        return self._buffer.synced_txid

    @property
    def current_segment_start(self) -> int:
        return self._segment_start

    @property
    def finalized_segments(self) -> tuple[tuple[int, int], ...]:
        """(start, end) of the finalized segments on disk, oldest first (a snapshot)."""
        return self._finalized

    def forget_segments_before(self, txid: int) -> None:
        """The segments ending before ``txid`` were purged from disk."""
        self._finalized = tuple(r for r in self._finalized if r[1] >= txid)

    # -- lifecycle --

    async def open_for_write(self, first_txid: int) -> None:
        """Finalize segments a crash left open, then start a segment at ``first_txid``."""
        assert self._state in ("new", "closed"), f"open_for_write in state {self._state}"
        assert first_txid >= 1, first_txid
        for journal in self.journals:
            await journal.recover_unfinalized(first_txid)
        await self._each("start_segment", lambda j: j.start_segment(first_txid), fatal=False)
        self._buffer = DoubleBuffer(self.settings.edits_buffer_bytes, first_txid - 1)
        self.buffer_full = False
        self._segment_start = first_txid
        self._segment_bytes = SEGMENT_HEADER_BYTES
        self._segment_txns = 0
        self._cache.clear()
        self._cache_bytes = 0
        self._finalized = tuple(self.journals[0].finalized_ranges())
        self._fatal = None
        self._group = None
        self._loop = asyncio.get_running_loop()
        self._state = "open"
        log.info("edits log open for write at txid %d on %s",
                 first_txid, ", ".join(j.name for j in self.journals))

    async def close(self) -> None:
        """Sync everything, finalize the open segment, close the journals."""
        if self._state in ("new", "closed"):
            self._state = "closed"
            return
        if self._state == "closing":
            await self._closed.wait()  # another close() is at work
            if self._fatal:
                raise self._fatal
            return
        if self._state == "open":
            self._state = "closing"
            self._closed.clear()
            # No await in a finally (or except) block: compiled by mypyc, one that suspends
            # there re-raises, once resumed, the exception its caller was handling (a
            # BackupNode closes its log while handling EditsPurged).
            error: BaseException | None = None
            try:
                await self.sync(self._buffer.last_txid)
                async with self._io_lock:
                    await self._finalize_locked()
            except BaseException as exc:
                error = exc
            await self._close_journals()
            self._state = "failed" if self._fatal else "closed"
            self._closed.set()
            if error is not None:
                raise error
            if self._fatal:
                raise self._fatal
            log.info("edits log closed at txid %d", self._buffer.synced_txid)
            return
        await self._close_journals()  # failed: close files, finalize nothing

    async def _close_journals(self) -> None:
        self._stop_idle_syncer()
        if self._syncer is not None and not self._syncer.done():
            await asyncio.gather(self._syncer, return_exceptions=True)
        for journal in self.journals:
            try:
                await journal.close()
            except Exception as exc:  # closing after a failure must not hide the failure
                log.warning("closing journal %s: %s", journal.name, exc)

    # -- the write path --

    def append(self, op: Op) -> int:
        """Assign the next txid to ``op`` and buffer it. Never awaits. Not durable until
        :meth:`sync` returns for the returned txid."""
        if self._state != "open":
            raise self._fatal or StorageError(f"edits log is not open for write ({self._state})")
        buffer = self._buffer
        txid = buffer.last_txid + 1
        if buffer.append(txid, encode_record(txid, op)):
            self.buffer_full = True
            self._kick()
        return txid

    def append_record(self, txid: int, record: bytes | bytearray | memoryview) -> None:
        """Buffer an already framed record (a BackupNode copying its NameNode's log): the
        txid must be the next one. Like :meth:`append`, durable only after :meth:`sync`."""
        if self._state != "open":
            raise self._fatal or StorageError(f"edits log is not open for write ({self._state})")
        buffer = self._buffer
        if txid != buffer.last_txid + 1:
            raise StorageError(f"record txid {txid} does not follow {buffer.last_txid}")
        if buffer.append(txid, bytes(record)):
            self.buffer_full = True
            self._kick()

    async def wait_synced_beyond(self, txid: int, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` until something after ``txid`` is synced."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while self._buffer.synced_txid <= txid and self._state in ("open", "closing"):
            event = self._synced_event
            try:
                async with asyncio.timeout_at(deadline):
                    await event.wait()
            except TimeoutError:
                break
        return self._buffer.synced_txid > txid

    async def wait_for_room(self) -> None:
        """Wait while the current buffer is full (call before applying an op)."""
        while self._buffer.is_full:
            self._check_usable()
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._room_waiters.append(fut)
            self._kick()
            await fut

    async def sync(self, txid: int | None = None) -> None:
        """Return once ``txid`` (default: the last appended) is durable on every journal."""
        buffer = self._buffer
        if txid is None:
            txid = buffer.last_txid
        if txid <= buffer.synced_txid:
            return
        self._check_usable()
        assert self._loop is not None  # set by open_for_write, as the state checked above
        fut: asyncio.Future[None] = self._loop.create_future()
        buffer.add_waiter(txid, fut)
        self._kick()
        await fut

    def synced_future(self, txid: int) -> asyncio.Future[None] | None:
        """What to await until ``txid`` is durable on every journal, None if it is: the
        future every waiter of the same flush shares (one future and one heap entry per
        flush, not per mutation; a waiter's cancellation cancels only its own task, see
        :mod:`.flushwait`), a future of its own for a txid in the flush under way."""
        buffer = self._buffer
        if txid <= buffer.synced_txid:
            return None
        self._check_usable()
        assert self._loop is not None  # set by open_for_write, as the state checked above
        if txid <= buffer.flushing_txid:  # written now: the next group would wait longer
            fut: asyncio.Future[None] = self._loop.create_future()
            buffer.add_waiter(txid, fut)
            return fut
        group = self._group
        if group is None:
            # Every txid appended until the next swap goes out with that flush, so the
            # first waiter's txid stands for the group (the swap starts a new one).
            group = self._group = FlushFuture(loop=self._loop)
            buffer.add_waiter(txid, group)
            self._kick()
        return group

    def when_synced(self, txid: int, callback: SyncCallback) -> None:
        """Call ``callback(None)`` once ``txid`` is durable on every journal (now, if it
        is), or ``callback(error)`` if the log fails first: what :meth:`sync` does, with
        no future and no task (the syncer calls every callback of a flush in one go). A
        log that is not usable raises here instead."""
        buffer = self._buffer
        if txid <= buffer.synced_txid:
            callback(None)
            return
        self._check_usable()
        buffer.add_waiter(txid, callback)
        self._kick()

    async def roll(self) -> tuple[int, int] | None:
        """Flush, finalize the open segment, start the next at the next txid. Returns the
        finalized (start, end), or None when the open segment was empty (it is deleted)."""
        self._check_usable()
        async with self._io_lock:
            self._check_usable()
            if self._buffer.ready_to_flush():
                await self._flush_locked()
                self._check_usable()
            finalized = await self._roll_locked()
            self._check_usable()
            return finalized

    # -- internals --

    def _check_usable(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        if self._state not in ("open", "closing"):
            raise StorageError(f"edits log is not open ({self._state})")

    def _kick(self) -> None:
        idle = self._syncer_idle
        if idle is not None:
            self._syncer_idle = None
            if not idle.done():
                idle.set_result(None)  # wake the parked syncer: no new task per flush
        elif self._syncer is None or self._syncer.done():
            # A context of its own: it outlives the call that started it, whose context
            # (its retry key) must not travel with it.
            self._syncer = asyncio.get_running_loop().create_task(
                self._run_syncer(), name="edits-syncer", context=contextvars.Context()
            )

    async def _run_syncer(self) -> None:
        """Flush while someone waits; then park until the next kick (a lone mutation then
        costs a future, not a task), and end when the log stops being writable."""
        loop = asyncio.get_running_loop()
        while True:
            while self._state in ("open", "closing") and self._buffer.needs_flush():
                async with self._io_lock:
                    if self._fatal is None and self._buffer.ready_to_flush():
                        await self._flush_locked()
                        if self._fatal is None and self._should_roll():
                            await self._roll_locked()
            if self._state != "open":
                return  # closing or failed: a later kick starts a new syncer if need be
            idle: asyncio.Future[None] = loop.create_future()
            self._syncer_idle = idle
            try:
                await idle
            finally:
                if self._syncer_idle is idle:
                    self._syncer_idle = None

    def _stop_idle_syncer(self) -> None:
        """End the syncer if it is parked (the log is closing or failed)."""
        idle, self._syncer_idle = self._syncer_idle, None
        if idle is not None and self._syncer is not None:
            self._syncer.cancel()

    def _should_roll(self) -> bool:
        s = self.settings
        return (self._segment_bytes >= s.edits_segment_bytes_max
                or self._segment_txns >= s.edits_segment_txns_max)

    async def _flush_locked(self) -> None:
        buffer = self._buffer
        batch = buffer.swap()
        self._group = None  # the waiters of this flush are its own; later ones the next
        self.buffer_full = False
        room, self._room_waiters = self._room_waiters, []
        for fut in room:
            if not fut.done():
                fut.set_result(None)
        started = time.perf_counter()
        journals = self.journals
        if len(journals) == 1 and await self._write_without_task(journals[0], batch, started):
            return
        if await self._each(
            "write", lambda j: j.write(batch.data, batch.first_txid, batch.last_txid)
        ):
            self._flushed(batch, started)

    async def _write_without_task(self, journal: Journal, batch: FlushBatch,
                                  started: float) -> bool:
        """Write ``batch`` to a lone journal that can tell its end by a callback; its
        waiters are then answered in the loop turn that reaps the write (an await of the
        write would answer them one or two turns later, each turn a round of frames read
        on every connection). False when the journal cannot: nothing was written."""
        assert self._loop is not None
        done: asyncio.Future[None] = self._loop.create_future()

        def written(error: BaseException | None) -> None:
            try:
                if error is None:
                    self._flushed(batch, started)
                else:
                    self._go_fatal(journal, "write", error)
            finally:  # (the syncer must never wait for a flush that is over)
                if not done.done():
                    done.set_result(None)

        try:
            if not journal.start_write(batch.data, batch.first_txid, batch.last_txid, written):
                return False
        except Exception as exc:  # (an armed fault point before the write)
            self._go_fatal(journal, "write", exc)
            return True
        await done  # the syncer's next flush, or a roll, waits for this one
        return True

    def _flushed(self, batch: FlushBatch, started: float) -> None:
        """``batch`` is durable on every journal: count it and answer its waiters."""
        buffer = self._buffer
        self.flush_count += 1
        if self.on_flushed is not None:
            self.on_flushed(time.perf_counter() - started, batch.count)
        self._segment_bytes += len(batch.data)
        self._segment_txns += batch.count
        self._remember(batch)
        for waiter in buffer.flush_done():
            _release(waiter, None)
        event, self._synced_event = self._synced_event, asyncio.Event()
        event.set()
        if buffer.needs_flush():
            self._kick()  # the flush was roll's, or the syncer is about to look again

    async def _roll_locked(self) -> tuple[int, int] | None:
        start, end = self._segment_start, self._buffer.synced_txid
        if not await self._finalize_locked():
            return None
        if not await self._each("start_segment", lambda j: j.start_segment(end + 1)):
            return None
        self._segment_start = end + 1
        self._segment_bytes = SEGMENT_HEADER_BYTES
        self._segment_txns = 0
        self.roll_count += 1
        if end < start:
            return None
        self._finalized = (*self._finalized, (start, end))
        log.info("rolled edits: finalized %d-%d, next segment starts at %d", start, end, end + 1)
        return start, end

    async def _finalize_locked(self) -> bool:
        start, end = self._segment_start, self._buffer.synced_txid
        assert end == self._buffer.flushing_txid, "finalize with a flush in progress"
        return await self._each("finalize", lambda j: j.finalize_segment(start, end))

    async def _each(
        self, what: str, call: Callable[[Journal], Awaitable[None]], *, fatal: bool = True
    ) -> bool:
        """Run ``call`` on every journal concurrently; on any failure go fatal (or raise)."""
        journals = self.journals
        if len(journals) == 1:
            # The common case: awaited directly, not through gather (which wraps it in a
            # task of its own: two more loop turns between the fsync and the replies).
            try:
                await call(journals[0])
            except BaseException as exc:
                return self._journal_failed(journals[0], what, exc, fatal)
            return True
        results = await asyncio.gather(*(call(j) for j in journals), return_exceptions=True)
        for journal, result in zip(journals, results, strict=True):
            if isinstance(result, BaseException):
                return self._journal_failed(journal, what, result, fatal)
        return True

    def _journal_failed(
        self, journal: Journal, what: str, error: BaseException, fatal: bool
    ) -> bool:
        """False after going fatal; raises what must not be swallowed (or when not fatal)."""
        if isinstance(error, asyncio.CancelledError | KeyboardInterrupt | SystemExit):
            raise error
        if not fatal:
            raise StorageError(f"edits journal {journal.name}: {what} failed: "
                               f"{error}") from error
        self._go_fatal(journal, what, error)
        return False

    def _go_fatal(self, journal: Journal, what: str, exc: BaseException) -> None:
        if self._fatal is not None:
            return
        error = StorageError(
            f"edits journal {journal.name} failed ({what}): {exc}; "
            f"nothing after txid {self._buffer.synced_txid} is acknowledged"
        )
        error.__cause__ = exc
        self._fatal = error
        self._state = "failed"
        self._group = None
        self._stop_idle_syncer()
        log.critical("edits journal %s failed during %s: %s -- the edits log is stopped, "
                     "no edit after txid %d will be acknowledged",
                     journal.name, what, exc, self._buffer.synced_txid)
        # The owner first (a NameNode drops its connections): a caller whose edits may or
        # may not have reached the disk must not be answered as if they had not (its
        # client retries instead, and a restarted NameNode answers from what is on disk).
        # Whoever still waits then gets the error, never a success.
        if self.on_fatal is not None:
            try:
                self.on_fatal(error)
            except Exception:
                log.exception("on_fatal callback failed")
        for waiter in self._buffer.flush_failed():
            _release(waiter, error)
        for fut in self._room_waiters:
            if not fut.done():
                fut.set_exception(error)
        self._room_waiters = []

    # -- in-memory cache of synced edits --

    def _remember(self, batch: FlushBatch) -> None:
        limit = self.settings.edits_cache_bytes
        if limit <= 0:
            return
        self._cache.append(batch)
        self._cache_bytes += len(batch.data)
        while self._cache_bytes > limit and len(self._cache) > 1:
            self._cache_bytes -= len(self._cache.popleft().data)

    def read_cached(self, from_txid: int, max_records: int) -> list[tuple[int, Op]] | None:
        """Synced edits from ``from_txid`` (at most ``max_records``) from memory; ``[]`` when
        nothing is synced beyond it yet, None when ``from_txid`` is no longer cached (read
        the segments with :func:`read_edits` instead)."""
        if from_txid > self._buffer.synced_txid:
            return []
        if not self._cache or from_txid < self._cache[0].first_txid:
            return None
        out: list[tuple[int, Op]] = []
        for batch in list(self._cache):
            if batch.last_txid < from_txid:
                continue
            data = batch.data
            pos = 0
            while pos < len(data) and len(out) < max_records:
                frame = parse_frame(data, pos)
                assert isinstance(frame, Frame), frame
                if frame.txid >= from_txid:
                    out.append((frame.txid, decode_frame(data, frame)))
                pos = frame.end
            if len(out) >= max_records:
                break
        return out

    def read_cached_frames(
        self, from_txid: int, max_count: int, max_bytes: int
    ) -> tuple[int, bytes] | None:
        """Like :meth:`read_cached` but the framed records themselves, back to back:
        ``(count, bytes)`` -- at least one record when any is synced past ``from_txid``,
        then as many as ``max_count`` and ``max_bytes`` allow. None when not cached."""
        if from_txid > self._buffer.synced_txid:
            return 0, b""
        if not self._cache or from_txid < self._cache[0].first_txid:
            return None
        parts: list[bytes] = []
        count = size = 0
        for batch in self._cache:  # no await below: the deque cannot change meanwhile
            if batch.last_txid < from_txid:
                continue
            whole = from_txid <= batch.first_txid
            if whole and count + batch.count <= max_count and size + len(batch.data) <= max_bytes:
                parts.append(bytes(batch.data))  # the common case: no record walk needed
                count += batch.count
                size += len(batch.data)
                continue
            bounds = record_bounds(batch.data)
            first = max(from_txid - batch.first_txid, 0)
            limit = min(len(bounds) - 1, first + max_count - count)
            last = first
            while last < limit and (
                count + last == first or size + bounds[last + 1] - bounds[first] <= max_bytes
            ):
                last += 1  # within max_bytes, but never return nothing
            parts.append(bytes(batch.data[bounds[first] : bounds[last]]))
            count += last - first
            size += bounds[last] - bounds[first]
            if last < len(bounds) - 1:
                break  # a limit stopped us inside this batch
        return count, b"".join(parts)

    def stats(self) -> dict[str, int]:
        return {
            "last_txid": self.last_txid,
            "synced_txid": self.synced_txid,
            "flushes": self.flush_count,
            "rolls": self.roll_count,
            "segment_start": self._segment_start,
            "segment_bytes": self._segment_bytes,
            "buffer_bytes": self._buffer.current_bytes,
            "sync_waiters": self._buffer.waiter_count,
        }


# --- the read side -----------------------------------------------------------------------


def _current_dir(d: NameDir | str | os.PathLike[str]) -> Path:
    if not isinstance(d, str | os.PathLike):
        return d.current
    path = Path(d)
    return path / "current" if (path / "current").is_dir() else path


def read_edits(
    dirs: Sequence[NameDir | str | os.PathLike[str]],
    from_txid: int,
    to_txid: int | None = None,
) -> Iterator[tuple[int, Op]]:
    """Yield ``(txid, op)`` for ``from_txid..to_txid`` (to the end of the log when None) from
    finalized and in-progress segments. Never modifies anything: a partial record at the end
    of an in-progress segment (still being written, or torn) ends the log. A damaged or short
    copy in one dir makes the reader continue from the next dir. StorageError when the range
    is not (entirely) available."""
    expected = from_txid
    errors: list[str] = []
    for d in dirs:
        current = _current_dir(d)
        try:
            for txid, op, _, _ in read_dir_edits(current, expected, to_txid):
                yield txid, op
                expected = txid + 1
            if to_txid is None or expected > to_txid:
                return
            errors.append(f"{current}: log ends at txid {expected - 1}")
        except StorageError as exc:
            log.warning("reading edits from %s: %s", current, exc)
            errors.append(str(exc))
    raise StorageError(
        f"edits from txid {expected}{'' if to_txid is None else f' to {to_txid}'} are not "
        f"available: {'; '.join(errors) or 'no directories'}"
    )


def read_dir_edits(
    current: Path, from_txid: int, to_txid: int | None = None
) -> Iterator[tuple[int, Op, Path, int]]:
    """``(txid, op, segment path, byte offset)`` from one ``current`` dir (see read_edits);
    ends quietly where the log ends, raises StorageError on a gap or corruption."""
    expected = from_txid
    for _attempt in range(5):  # a live writer may finalize a segment while we list
        segments = [
            s for s in segment_index(current)
            if (s.end is None or s.end >= expected) and (to_txid is None or s.start <= to_txid)
        ]
        relist = False
        for seg in segments:
            if seg.start > expected:
                raise StorageError(f"{current}: txids {expected}..{seg.start - 1} are missing "
                                   f"(next segment is {seg.name})")
            if seg.in_progress and not seg.path.exists():
                relist = True
                break
            reader = SegmentReader(seg.path, layout_version=LAYOUT_VERSION,
                                   expected_start=seg.start, expected_end=seg.end,
                                   torn_tail="allow" if seg.in_progress else "error")
            for txid, opcode, payload, offset in reader:
                if txid < expected:
                    continue
                if to_txid is not None and txid > to_txid:
                    return
                try:
                    op = decode_payload(opcode, payload)
                except ValueError as exc:
                    raise StorageError(f"corrupt edits segment {seg.path} at byte offset "
                                       f"{offset}: txid {txid}: {exc}") from None
                yield txid, op, seg.path, offset
                expected = txid + 1
            if seg.in_progress:
                return  # an open segment is the end of what is readable
        if not relist:
            return
    raise StorageError(f"{current}: segments keep changing while being listed")
