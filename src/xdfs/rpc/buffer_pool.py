"""The pool of large-frame receive buffers of a process (:data:`LARGE_BUFFERS`).

A :class:`~xdfs.rpc.framing.FrameReader` takes a large frame's buffer from here: fresh
memory is what a large frame costs most (each fresh 4 KiB page is a page fault, ~5 us on a
virtualised host: 1.25 ms per MiB received, more than the MiB's whole trip through the
socket; bench/rpc.py once measured upload at a third of raw socket speed because of it).
The pool remembers the buffers it lent and lends one again once nothing but the pool
refers to it any more (CPython reference counts are exact), so a buffer is never
overwritten while a payload, a decoded chunk or anything else still holds it. It holds at
most :data:`POOL_BYTES_MAX` bytes (the oldest are forgotten first); every connection of
the process shares it, so a DataNode's new stream starts with warm buffers, and 200 KiB
payloads (a small file's chunk) reach the caller without being copied out of the shared
receive buffer into fresh memory.

This module is never compiled (xdfs.common.native): compiled code borrows references where
the interpreter takes them, so ``sys.getrefcount`` would not mean the same there.
"""

from __future__ import annotations

import sys
import sysconfig
import threading

#: Large-frame buffers are sized in steps of this (frames of nearby sizes share buffers).
BUFFER_STEP_BYTES = 64 * 1024
#: Bytes of large-frame buffers a process's pool remembers: a DataNode receiving a few
#: block streams at once (a window of 8 chunks of 1 MiB each, plus the ones being written).
POOL_BYTES_MAX = 48 * 1024 * 1024


def _refs_when_unshared() -> int:
    """What ``sys.getrefcount(list[i])`` reports for an object only that list holds."""
    probe = [bytearray(1)]
    return sys.getrefcount(probe[0])


#: Reference counts are exact only on CPython with the GIL; elsewhere never recycle.
_RECYCLE = sys.implementation.name == "cpython" and not sysconfig.get_config_var(
    "Py_GIL_DISABLED"
)
_UNSHARED_REFS = _refs_when_unshared() if _RECYCLE else -1


def buffer_bytes_for(length: int) -> int:
    """The size of the pooled buffer a frame of ``length`` bytes is received into."""
    return -(-length // BUFFER_STEP_BYTES) * BUFFER_STEP_BYTES


class BufferPool:
    """Large-frame buffers lent out and taken back once unshared (see the module's
    docstring). Thread-safe: a client's blocking connections receive in callers'
    threads while its event loop receives in its own."""

    def __init__(self, bytes_max: int) -> None:
        self.bytes_max = bytes_max
        self._lent: list[bytearray] = []  # oldest first
        self._lent_bytes = 0
        self._lock = threading.Lock()

    @property
    def held_bytes(self) -> int:
        """Bytes of the buffers the pool remembers (lent or free)."""
        return self._lent_bytes

    def take(self, size: int) -> bytearray:
        """A buffer of ``size`` bytes (a multiple of :data:`BUFFER_STEP_BYTES`): one lent
        earlier that nothing else refers to any more, else a new one; the pool remembers
        it, to lend it again once its borrower let go."""
        buffer = self._unshared(size) if _RECYCLE else None
        if buffer is None:
            buffer = bytearray(size)
        with self._lock:
            self._lent.append(buffer)
            self._lent_bytes += size
            while self._lent_bytes > self.bytes_max:
                self._lent_bytes -= len(self._lent.pop(0))  # freed once its borrower ends
        return buffer

    def _unshared(self, size: int) -> bytearray | None:
        with self._lock:
            lent = self._lent
            for index in range(len(lent)):
                if len(lent[index]) == size and sys.getrefcount(lent[index]) <= _UNSHARED_REFS:
                    self._lent_bytes -= size
                    return lent.pop(index)
        return None

    def clear(self) -> None:
        """Forget every buffer (those still lent stay their borrowers')."""
        with self._lock:
            self._lent.clear()
            self._lent_bytes = 0


#: The pool of every FrameReader of this process.
LARGE_BUFFERS = BufferPool(POOL_BYTES_MAX)
