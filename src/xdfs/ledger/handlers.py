"""The ``ledger`` service (xdfs.protocol.ledger) of a storage node.

Every call runs on one worker thread, in arrival order (a handler hands its call over
before its first ``await``): the store never sees two calls at once, its fsyncs never block
the event loop. A store whose disk failed refuses every further call until the process
restarts and loads it again (as a journal does).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from xdfs.errors import StorageError
from xdfs.ledger.storage import LedgerStore
from xdfs.protocol import ledger as lp
from xdfs.rpc.messages import Empty
from xdfs.rpc.server import CallContext

log = logging.getLogger(__name__)

T = TypeVar("T")


class LedgerWorker:
    """The store and the one thread that runs its calls."""

    def __init__(self, root: Path, read_bytes_max: int) -> None:
        self.store = LedgerStore(root)
        self.read_bytes_max = read_bytes_max
        self.failure: StorageError | None = None
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="ledgers")

    def load(self) -> None:
        self.store.load()

    def submit(self, call: Callable[[LedgerStore], T]) -> asyncio.Future[T]:
        return asyncio.get_running_loop().run_in_executor(self._thread, self._run, call)

    def _run(self, call: Callable[[LedgerStore], T]) -> T:
        if self.failure is not None:
            raise StorageError(f"ledger storage failed earlier ({self.failure.message}); "
                               "restart the storage node")
        try:
            return call(self.store)
        except StorageError as exc:
            self.failure = exc
            log.critical("ledger storage failed: %s", exc.message)
            raise

    def close(self) -> None:
        self._thread.shutdown(wait=True)


class LedgerHandlers:
    def __init__(self, worker: LedgerWorker) -> None:
        self.worker = worker

    async def add_entries(
        self, ctx: CallContext, req: lp.AddEntriesRequest
    ) -> lp.AddEntriesResponse:
        return lp.AddEntriesResponse(await self.worker.submit(lambda s: s.add(req)))

    async def fence_ledger(self, ctx: CallContext, req: lp.LedgerIdRequest) -> lp.LedgerState:
        return await self.worker.submit(lambda s: s.fence(req.ledger_id))

    async def ledger_state(self, ctx: CallContext, req: lp.LedgerIdRequest) -> lp.LedgerState:
        return await self.worker.submit(lambda s: s.state(req.ledger_id))

    async def read_entries(
        self, ctx: CallContext, req: lp.ReadEntriesRequest
    ) -> lp.ReadEntriesResponse:
        limit = min(req.max_bytes, self.worker.read_bytes_max)
        capped = lp.ReadEntriesRequest(req.ledger_id, req.from_entry, req.max_entries, limit)
        return await self.worker.submit(lambda s: s.read(capped))

    async def delete_ledger(self, ctx: CallContext, req: lp.LedgerIdRequest) -> Empty:
        await self.worker.submit(lambda s: s.delete(req.ledger_id))
        return Empty()

    async def list_ledgers(self, ctx: CallContext, req: Empty) -> lp.ListLedgersResponse:
        return lp.ListLedgersResponse(await self.worker.submit(lambda s: s.ledger_ids()))
