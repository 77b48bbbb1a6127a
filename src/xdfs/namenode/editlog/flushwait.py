"""The future every in-process waiter of one edits flush shares (``EditLog.synced_future``).

A plain module, not compiled with the edits log: a subclass of asyncio's future is a
Python class. Shared, it must not be cancelled by one waiter: asyncio cancels what a
cancelled task awaits, which would cancel everyone's wait (and answer "cancelled" for
durable changes). Its ``cancel`` refuses, so a cancelled waiter's task is cancelled once
the flush it waits for ends (asyncio then raises CancelledError in it), a flush later at
most; the others are told the flush's outcome, as each of them would have been.
"""

from __future__ import annotations

import asyncio


class FlushFuture(asyncio.Future[None]):
    """Done when one flush of the edits log is durable (or failed); never cancelled."""

    def cancel(self, msg: object = None) -> bool:
        return False
