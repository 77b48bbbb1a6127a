"""keep_freed_memory: a server's allocator keeps what it freed (no page faults to reuse it)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from xdfs.common.memory import keep_freed_memory

#: Rounds of a stream window's worth of 1 MiB buffers allocated, then all freed (a server
#: receiving a stream); prints the page faults of the rounds after the first two.
_WINDOWS = """
import resource, sys
from xdfs.common.memory import keep_freed_memory
keep_freed_memory(int(sys.argv[1]))
def rounds(count):
    for _ in range(count):
        window = [bytearray(1 << 20) for _ in range(16)]
        del window
rounds(2)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
rounds(10)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(keep_bytes: int) -> int:
    # A process of its own: the allocator's settings last as long as the process.
    done = subprocess.run([sys.executable, "-c", _WINDOWS, str(keep_bytes)],
                          capture_output=True, text=True, check=True)
    return int(done.stdout)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_freed_buffers_are_reused_without_page_faults() -> None:
    # 10 rounds of 16 MiB: glibc's defaults give the heap's top back each time, so every
    # round faults its pages in again (~4,000 faults); kept, they are reused.
    assert _faults(0) > 10 * 1000
    assert _faults(256 << 20) < 1000


def test_zero_leaves_the_allocator_alone() -> None:
    assert keep_freed_memory(0) is False
