"""Pure bookkeeping of what a DataNode tells its NameNode: pending incremental reports,
full-report batches, retry backoff and log throttling. No I/O, no clock reads."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from xdfs.protocol.blocks import BlockRecord


@dataclass
class IncrementalBatch:
    received: list[BlockRecord] = field(default_factory=list)
    deleted: list[int] = field(default_factory=list)
    rbw: list[BlockRecord] = field(default_factory=list)  # kept in state rbw


class PendingReports:
    """Received (finalized), rbw and deleted replicas not yet confirmed by the NameNode.

    The newest news of a block wins (received after deleted, or the reverse), so a retried
    report never resurrects a replica deleted since. Bounded by the number of block ids this
    node held: one entry per id at most."""

    def __init__(self) -> None:
        self.received: dict[int, BlockRecord] = {}
        self.rbw: dict[int, BlockRecord] = {}
        self.deleted: set[int] = set()

    def __bool__(self) -> bool:
        return bool(self.received or self.rbw or self.deleted)

    def _known(self, block_id: int) -> bool:
        return block_id in self.received or block_id in self.rbw or block_id in self.deleted

    def _forget(self, block_id: int) -> None:
        self.received.pop(block_id, None)
        self.rbw.pop(block_id, None)
        self.deleted.discard(block_id)

    def add_received(self, record: BlockRecord) -> None:
        self._forget(record.block_id)
        self.received[record.block_id] = record

    def add_rbw(self, record: BlockRecord) -> None:
        self._forget(record.block_id)
        self.rbw[record.block_id] = record

    def add_deleted(self, block_ids: list[int]) -> None:
        for block_id in block_ids:
            self._forget(block_id)
            self.deleted.add(block_id)

    def take(self, reporting: Collection[int] = ()) -> IncrementalBatch | None:
        """Everything pending, removed from the queue (give it back with ``restore``),
        except received replicas whose report is on its way now (``reporting``: block
        ids; they stay pending until confirmed, so a failed report is retried later)."""
        received = [r for r in self.received.values() if r.block_id not in reporting]
        if not (received or self.rbw or self.deleted):
            return None
        batch = IncrementalBatch(received, sorted(self.deleted), list(self.rbw.values()))
        for record in received:
            del self.received[record.block_id]
        self.rbw.clear()
        self.deleted.clear()
        return batch

    def restore(self, batch: IncrementalBatch) -> None:
        """Requeue a batch that failed, except what newer news superseded meanwhile."""
        for record in batch.received:
            if not self._known(record.block_id):
                self.received[record.block_id] = record
        for record in batch.rbw:
            if not self._known(record.block_id):
                self.rbw[record.block_id] = record
        for block_id in batch.deleted:
            if not self._known(block_id):
                self.deleted.add(block_id)

    def confirm_received(self, record: BlockRecord) -> None:
        """``record`` reached the NameNode on its own: drop it unless it changed since."""
        if self.received.get(record.block_id) == record:
            del self.received[record.block_id]


def report_batches(
    records: list[BlockRecord], batch_max: int, rbw: list[BlockRecord] | None = None
) -> list[tuple[list[BlockRecord], list[BlockRecord]]]:
    """A full report (finalized replicas, then those in state rbw) split into calls of at
    most ``batch_max`` entries, each ``(finalized, rbw)``; an empty report is still one
    (empty) batch, so the NameNode learns the node holds nothing."""
    assert batch_max >= 1, "block_report_batch_max must be >= 1"
    tagged = [(record, False) for record in records] + [(record, True) for record in rbw or []]
    batches = [tagged[i : i + batch_max] for i in range(0, len(tagged), batch_max)] or [[]]
    return [
        ([r for r, is_rbw in batch if not is_rbw], [r for r, is_rbw in batch if is_rbw])
        for batch in batches
    ]


def backoff_s(failures: int, initial_s: float, max_s: float) -> float:
    """Delay after ``failures`` consecutive failed exchanges: initial, 2x, 4x ... max."""
    if failures <= 0:
        return 0.0
    return float(min(max_s, initial_s * 2 ** min(failures - 1, 60)))


class LogThrottle:
    """Decides which of a run of repeated failures to log: the first, then one per
    ``interval_s`` (saying how many were suppressed), so an unreachable NameNode does not
    flood the log; ``recovered`` reports the end of the run."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.failures = 0
        self._suppressed = 0
        self._last_logged_s: float | None = None

    def failure(self, now_s: float) -> int | None:
        """None: stay quiet; else log now, mentioning the returned number suppressed."""
        self.failures += 1
        if self._last_logged_s is None or now_s - self._last_logged_s >= self.interval_s:
            suppressed, self._suppressed = self._suppressed, 0
            self._last_logged_s = now_s
            return suppressed
        self._suppressed += 1
        return None

    def recovered(self) -> int:
        """Failures in the run that just ended (0: there was none)."""
        count, self.failures, self._suppressed = self.failures, 0, 0
        self._last_logged_s = None
        return count
