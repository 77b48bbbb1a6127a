"""What of a file is in the page cache, and dropping it (tests of cached and uncached reads).

mincore(2) of a shared read-only mapping tells which pages are resident without faulting
any in; unlike a read that does not wait (``RWF_NOWAIT``), it starts no read-ahead that
would bring the pages back. Linux only (ctypes, no compiled code).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import time
from pathlib import Path

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]

#: Tries of :func:`drop_from_page_cache`, 10 ms apart.
DROP_TRIES = 500


def page_count(length: int) -> int:
    return -(-length // mmap.PAGESIZE)


def cached_pages(path: Path, length: int) -> int:
    """How many of the first ``length`` bytes' pages of ``path`` are in the page cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert addr not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
        try:
            vec = ctypes.create_string_buffer(page_count(length))
            assert _libc.mincore(addr, length, vec) == 0, os.strerror(ctypes.get_errno())
            return sum(byte & 1 for byte in vec.raw)
        finally:
            _libc.munmap(addr, length)
    finally:
        os.close(fd)


def drop_from_page_cache(path: Path) -> None:
    """Evict ``path``'s pages, at least one of them. POSIX_FADV_DONTNEED skips pages it
    cannot drop at that moment (still in another CPU's LRU batch after the write): it is
    repeated until one is gone."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        size = os.fstat(fd).st_size
        for _ in range(DROP_TRIES):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            if cached_pages(path, size) < page_count(size):
                return
            time.sleep(0.01)
        raise AssertionError(f"{path} stayed in the page cache")
    finally:
        os.close(fd)
