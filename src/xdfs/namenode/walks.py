"""The driver of whole-subtree walks: a step generator (:mod:`.namespace.steps`) run on the
event loop a slice at a time, so the NameNode answers other calls while fsck, ``-count``,
the block map export or a recursive delete's permission check walks millions of inodes.

After every ``slice_inodes`` steps the walk yields to the loop. With a rate, slices are
also spaced so that all walks sharing one pacer together visit at most ``rate_inodes_per_s``
inodes per second (a shared schedule: two concurrent fscks each get half).
"""

from __future__ import annotations

import asyncio
from typing import TypeVar

from xdfs.namenode.namespace.steps import Steps

T = TypeVar("T")


class WalkPacer:
    def __init__(self, slice_inodes: int, rate_inodes_per_s: float = 0.0) -> None:
        assert slice_inodes >= 1 and rate_inodes_per_s >= 0
        self.slice_inodes = slice_inodes
        self.rate_inodes_per_s = rate_inodes_per_s
        self._next_slice_at = 0.0  # loop time when the next slice may start (with a rate)
        self.slices = 0  # slices run, all walks (for tests and status)

    async def run(self, steps: Steps[T]) -> T:
        """Run ``steps`` to the end; its result (or its exception)."""
        while True:
            for _ in range(self.slice_inodes):
                try:
                    next(steps)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
            self.slices += 1
            await self._pause()

    async def _pause(self) -> None:
        if not self.rate_inodes_per_s:
            await asyncio.sleep(0)  # one loop turn: pending I/O and calls run first
            return
        now = asyncio.get_running_loop().time()
        self._next_slice_at = max(self._next_slice_at, now) + (
            self.slice_inodes / self.rate_inodes_per_s)
        await asyncio.sleep(self._next_slice_at - now)
