"""The C allocator of a long-running server process (``rpc.server_malloc_keep_bytes``).

A fresh 4 KiB page costs a page fault the first time it is touched (~5 us each on a
virtualised host: 1.25 ms per MiB, more than copying the MiB). glibc's malloc hands large
freed blocks back to the kernel: a block above its mmap threshold (128 KiB at first, raised
as such blocks are freed, never above 32 MiB) is unmapped at ``free``, and the top of a heap
is trimmed once more than twice that threshold is free there. A server's data path frees and
allocates buffers of a few hundred KiB to a few MiB all the time (frames, replies, a small
file's bytes), so much of what it moved went through fresh pages: ~128k page faults in the
DataNodes per GiB written.

:func:`keep_freed_memory` makes glibc keep what a server freed for its next allocations:
blocks up to the largest mmap threshold come from the heap, and a heap is trimmed only
past ``keep_bytes`` of free memory at its top. The process then keeps up to that much
memory it no longer uses (its resident size is its peak, less what was freed beyond it).

Only server commands call it: a library must not change the allocator of the process that
imports it (a client application may set ``GLIBC_TUNABLES`` itself, see
docs/configuration.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

# mallopt's parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3

#: The largest mmap threshold glibc accepts on 64-bit hosts (HEAP_MAX_SIZE / 2): blocks
#: larger than this are always mapped and unmapped on their own.
MMAP_THRESHOLD_MAX_BYTES = 32 * 1024 * 1024
#: Memory a heap grows by beyond what an allocation needs (fewer ``brk`` calls).
TOP_PAD_BYTES = 16 * 1024 * 1024


def keep_freed_memory(keep_bytes: int) -> bool:
    """Make glibc's malloc keep up to ``keep_bytes`` of freed memory for reuse (0: leave
    its defaults). Returns whether the allocator was changed (False elsewhere than glibc,
    or when glibc refused a parameter)."""
    if keep_bytes <= 0 or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # ints: mallopt takes an int, so keep_bytes is capped below 2 GiB.
    settings = (
        (_M_MMAP_THRESHOLD, min(MMAP_THRESHOLD_MAX_BYTES, keep_bytes)),
        (_M_TRIM_THRESHOLD, min(keep_bytes, 2**31 - 1)),
        (_M_TOP_PAD, min(TOP_PAD_BYTES, keep_bytes)),
    )
    return all(mallopt(param, value) == 1 for param, value in settings)
