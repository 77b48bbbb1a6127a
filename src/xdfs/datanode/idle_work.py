"""Work a DataNode does ahead while it writes nothing: spare files (``spares.py``,
``DataStorage.idle_job``), so the write path allocates no inode for its replicas' files.

Idle means no block claimed for ``quiet_s`` (1 s): a node busy with a stream of small
files has short gaps between replicas, and a job started in one of them would take CPU
from the writes (on a 2-CPU machine, 10% of a CPU per DataNode). One job at a time in a
worker thread, each short (``SPARES_BATCH`` creates), jobs paced to about ``duty`` of a
CPU: a create costs ~35 us in a quiet ext4 block group and ~1 ms after deletions nearby, so
a fresh node is stocked in seconds or in a minute, never hogging a small machine, and a
write that starts meanwhile finds at most one job under way. (The leaf directories of
finalized/ need no such work since layout version 2: one per 256 block ids, made one
ahead by the writes, ``DataStorage.leaf_ahead``.)
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from xdfs.datanode.storage import DataStorage
from xdfs.errors import StorageError

log = logging.getLogger(__name__)

#: Spares one job makes.
SPARES_BATCH = 64


async def work_while_idle(
    storage: DataStorage,
    in_thread: Callable[[Callable[[], object]], Awaitable[object]],
    period_s: float = 0.25, duty: float = 0.1, quiet_s: float = 1.0,
) -> None:
    """Run until cancelled; a failure (a full disk) is logged and tried again later."""
    pause_s = period_s
    while True:
        await asyncio.sleep(pause_s)
        pause_s = period_s
        if not storage.idle(quiet_s):
            continue
        job = storage.idle_job(SPARES_BATCH)
        if job is None:
            continue
        started = time.monotonic()
        try:
            await in_thread(job)
        except (OSError, StorageError) as exc:
            log.warning("cannot make spare files ahead in %s: %s",
                        storage.current, exc)
            pause_s = 120 * period_s
            continue
        pause_s = max(period_s, (time.monotonic() - started) * (1 - duty) / duty)
