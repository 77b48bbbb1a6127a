"""The edits double buffer and group-commit bookkeeping (pure: no I/O, no clock, no asyncio).

As in HDFS's ``EditsDoubleBuffer`` (seed 001: ``bufCurrent``/``bufReady``): writers append
framed records to the *current* buffer; the one syncer :meth:`DoubleBuffer.swap` s it with the
empty *ready* buffer and writes + fsyncs the ready one while new appends go on into the new
current one. When the flush is done, :meth:`DoubleBuffer.flush_done` clears the ready buffer,
advances ``synced_txid`` and returns the waiters that flush satisfied -- every waiter whose
txid it covered, however many there are: that is group commit, many calls riding one fsync.

Waiters are opaque tokens (the asyncio driver uses futures) kept in a heap by txid, so a
flush satisfies exactly the waiters at or below its last txid and the rest wait for the
next one. ``is_full`` is the back-pressure signal: once the current buffer holds
``capacity_bytes`` the driver makes appenders wait until a swap empties it.

Invariants (asserted, never disabled): txids are appended consecutively; only one flush is in
progress; ``synced_txid <= flushing_txid <= last_txid``.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class FlushBatch:
    """What one flush writes: records ``first_txid..last_txid``, framed, back to back."""

    data: bytearray
    first_txid: int
    last_txid: int

    @property
    def count(self) -> int:
        return self.last_txid - self.first_txid + 1


class _Half:
    __slots__ = ("data", "first_txid", "last_txid")

    def __init__(self) -> None:
        self.data = bytearray()
        self.first_txid = 0
        self.last_txid = 0

    def __len__(self) -> int:
        return len(self.data)

    def clear(self) -> None:
        self.data = bytearray()
        self.first_txid = 0
        self.last_txid = 0


class DoubleBuffer(Generic[T]):
    def __init__(self, capacity_bytes: int, last_txid: int) -> None:
        """``last_txid``: the txid before the first one that will be appended."""
        assert capacity_bytes > 0, capacity_bytes
        self.capacity_bytes = capacity_bytes
        self._current = _Half()
        self._ready = _Half()
        self.last_txid = last_txid
        self.synced_txid = last_txid
        self.sync_in_progress = False
        self._waiters: list[tuple[int, int, T]] = []
        self._seq = itertools.count()

    # -- appending --

    def append(self, txid: int, record: bytes) -> bool:
        """Buffer ``record``; True when the current buffer is now full (:attr:`is_full`,
        answered here so that the appender asks no second call)."""
        assert txid == self.last_txid + 1, f"txid {txid} appended after {self.last_txid}"
        current = self._current
        data = current.data
        if not data:
            current.first_txid = txid
        data += record
        current.last_txid = txid
        self.last_txid = txid
        return len(data) >= self.capacity_bytes

    @property
    def is_full(self) -> bool:
        """The current buffer reached its capacity: appenders should wait for a swap."""
        return len(self._current) >= self.capacity_bytes

    @property
    def current_bytes(self) -> int:
        return len(self._current)

    @property
    def ready_bytes(self) -> int:
        return len(self._ready)

    @property
    def current_range(self) -> tuple[int, int] | None:
        """(first, last) txid in the current buffer, None when empty."""
        c = self._current
        return (c.first_txid, c.last_txid) if c.data else None

    @property
    def flushing_txid(self) -> int:
        """Last txid that is synced or in the flush in progress."""
        return self._ready.last_txid if self.sync_in_progress else self.synced_txid

    # -- flushing --

    def ready_to_flush(self) -> bool:
        """Something to write and no flush in progress."""
        return bool(self._current.data) and not self.sync_in_progress

    def needs_flush(self) -> bool:
        """A flush should start now: it is possible and someone waits for it (a sync waiter
        beyond what is synced, or an appender blocked on a full buffer)."""
        if not self.ready_to_flush():
            return False
        return self.is_full or (bool(self._waiters) and self._waiters[0][0] > self.synced_txid)

    def swap(self) -> FlushBatch:
        """Exchange the buffers: the current one becomes the batch to write."""
        assert self.ready_to_flush(), "swap with nothing to flush or a flush in progress"
        assert not self._ready.data, "ready buffer not empty"
        self._current, self._ready = self._ready, self._current
        self.sync_in_progress = True
        ready = self._ready
        return FlushBatch(ready.data, ready.first_txid, ready.last_txid)

    def flush_done(self) -> list[T]:
        """The swapped batch is durable: advance synced_txid; return satisfied waiters."""
        assert self.sync_in_progress, "flush_done without a flush"
        assert self._ready.last_txid >= self.synced_txid
        self.synced_txid = self._ready.last_txid
        self._ready.clear()
        self.sync_in_progress = False
        done: list[T] = []
        waiters = self._waiters
        while waiters and waiters[0][0] <= self.synced_txid:
            done.append(heapq.heappop(waiters)[2])
        return done

    def flush_failed(self) -> list[T]:
        """The flush failed: nothing more will ever be synced; every waiter must fail."""
        self.sync_in_progress = False
        return self.drain_waiters()

    def drain_waiters(self) -> list[T]:
        out = [token for _, _, token in self._waiters]
        self._waiters.clear()
        return out

    # -- waiting --

    def add_waiter(self, txid: int, token: T) -> bool:
        """Register a wait for ``txid``; False (not registered) when it is already synced."""
        assert txid <= self.last_txid, f"wait for txid {txid} beyond last {self.last_txid}"
        if txid <= self.synced_txid:
            return False
        heapq.heappush(self._waiters, (txid, next(self._seq), token))
        return True

    @property
    def waiter_count(self) -> int:
        return len(self._waiters)
