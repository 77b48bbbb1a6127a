"""The ``ledger`` service (xdfs.protocol.ledger) of a storage node.

Every call runs on one worker thread, in arrival order (a handler hands its call over
before its first ``await``): the store never sees two calls at once, its fsyncs never block
the event loop. A store whose disk failed refuses every further call until the process
restarts and loads it again (as a journal does).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from xdfs.errors import InternalError, StorageError, XdfsError
from xdfs.ledger.storage import LedgerStore
from xdfs.protocol import ledger as lp
from xdfs.rpc.handling import CallContext
from xdfs.rpc.messages import Empty

log = logging.getLogger(__name__)

T = TypeVar("T")


class LedgerWorker:
    """The store and the one thread that runs its calls."""

    def __init__(self, root: Path, read_bytes_max: int) -> None:
        self.store = LedgerStore(root)
        self.read_bytes_max = read_bytes_max
        self.failure: StorageError | None = None
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="ledgers")
        #: Adds waiting for the thread (appended on the loop, drained on the thread).
        self._adds: deque[tuple[lp.AddEntriesRequest, asyncio.Future[int]]] = deque()

    def load(self) -> None:
        self.store.load()

    def submit(self, call: Callable[[LedgerStore], T]) -> asyncio.Future[T]:
        return asyncio.get_running_loop().run_in_executor(self._thread, self._run, call)

    def add(self, request: lp.AddEntriesRequest) -> asyncio.Future[int]:
        """Queue an add (in arrival order). The adds queued while the thread was busy are
        staged together and made durable by one sync per file before any is answered:
        the node's group commit, so concurrent appends share fsyncs."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[int] = loop.create_future()
        self._adds.append((request, answer))
        if len(self._adds) == 1:  # else a batch not yet drained will take this one too
            loop.run_in_executor(self._thread, self._commit_adds, loop)
        return answer

    def _commit_adds(self, loop: asyncio.AbstractEventLoop) -> None:
        batch = []
        while self._adds:  # taken on the thread: adds queued meanwhile join this batch
            batch.append(self._adds.popleft())
        outcomes: list[int | BaseException] = []
        try:
            outcomes = [self._stage(request) for request, _ in batch]
            self._run(lambda store: store.sync())
        except StorageError as exc:
            outcomes = [exc] * len(batch)  # nothing staged is known durable
        finally:
            if len(outcomes) < len(batch):  # a bug: no add stays unanswered
                outcomes = [InternalError("ledger add failed; see the node's log")] * len(batch)
            loop.call_soon_threadsafe(_settle, [a for _, a in batch], outcomes)

    def _stage(self, request: lp.AddEntriesRequest) -> int | BaseException:
        try:
            return self._run(lambda store: store.stage(request))
        except StorageError:
            raise
        except XdfsError as exc:  # this add is refused; the others go on
            return exc

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


def _settle(answers: list[asyncio.Future[int]], outcomes: list[int | BaseException]) -> None:
    for answer, outcome in zip(answers, outcomes, strict=True):
        if answer.done():
            continue  # the caller gave up (cancelled)
        if isinstance(outcome, BaseException):
            answer.set_exception(outcome)
        else:
            answer.set_result(outcome)


class LedgerHandlers:
    def __init__(self, worker: LedgerWorker) -> None:
        self.worker = worker

    async def add_entries(
        self, ctx: CallContext, req: lp.AddEntriesRequest
    ) -> lp.AddEntriesResponse:
        return lp.AddEntriesResponse(await self.worker.add(req))

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
