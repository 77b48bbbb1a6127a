"""The standby NameNode's duties (HDFS's EditLogTailer and StandbyCheckpointer).

A standby keeps its namespace hot by *tailing* the quorum journal: it reads the records
the active committed (in-progress segments included, so it lags by about one group commit
and the journal's commit notice), checks the whole batch, applies it and appends it,
byte for byte, to its own local edits log, where it is synced. Its name dirs therefore
always hold a gap-free prefix of the committed history, and becoming active is the
NameNode's ordinary start on the quorum journal with the namespace already in memory:
fence, recover, catch up the few txids it lacks, write.

Starting as a standby, the local dirs may hold an in-progress segment written while this
NameNode was active. Its records after the journal's committed txid may never have been
acknowledged (and another writer may have replaced them), so they are cut off before the
namespace is loaded (kept beside the segment as ``.unacked``, never deleted): anything
acknowledged is on a majority of JournalNodes and comes back through the tailer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from xdfs.editlog.segments import segment_index
from xdfs.errors import ProtocolError, StorageError, XdfsError
from xdfs.namenode.editlog.editlog import EditLog
from xdfs.namenode.editlog.replay import (
    Backoff,
    Decoded,
    ReplayTarget,
    apply_batch,
    decode_batch,
)
from xdfs.namenode.editlog.shared import trim_in_progress
from xdfs.namenode.namespace.ops import Op
from xdfs.quorum.channel import JournalChannel
from xdfs.quorum.reader import JournalTailer

log = logging.getLogger(__name__)


async def committed_txid(channels: Sequence[JournalChannel], journal_id: str) -> int:
    """The highest txid any JournalNode knows to be committed (each one's figure is a true
    lower bound of what the writer committed). StorageError when none answers."""
    answers = await asyncio.gather(*(c.get_journal_state(journal_id) for c in channels),
                                   return_exceptions=True)
    states = [a for a in answers if not isinstance(a, BaseException)]
    for answer in answers:
        if isinstance(answer, BaseException) and not isinstance(answer, XdfsError):
            raise answer
    if not states:
        raise StorageError(f"journal {journal_id}: no JournalNode answered")
    return max(state.committed_txid for state in states)


def trim_unconfirmed(current: Path, committed: int) -> None:
    """Cut an in-progress local segment back to what is known committed (module doc).
    Finalized segments were synced to a majority before they were finalized: kept."""
    finalized_end = max((s.end for s in segment_index(current) if s.end is not None),
                        default=0)
    bound = max(committed, finalized_end)
    for segment in segment_index(current):
        if segment.end is None:
            trim_in_progress(segment.path, segment.start, bound)


class StandbyTailer:
    """Applies the journal's committed records to the namespace and the local log."""

    def __init__(self, tailer: JournalTailer, namespace: ReplayTarget, edits: EditLog,
                 last_txid: int, *, batch_txns: int,
                 on_applied: Callable[[int, Op], None] | None = None) -> None:
        """``on_applied(txid, op)`` after each op (the retry cache learns its calls)."""
        self.tailer = tailer
        self.namespace = namespace
        self.edits = edits
        self.last_txid = last_txid
        self.batch_txns = batch_txns
        self.on_applied = on_applied
        self.last_read_s = 0.0  # loop time of the last answer from a JournalNode
        self.lock = asyncio.Lock()  # held while a batch is applied (a checkpoint takes it)
        self.error = ""  # the last failure, for health reports

    async def run(self) -> None:
        """Tail until cancelled. A JournalNode answer that is unreadable, or no answer, is
        retried with backoff; a record the namespace refuses stops the NameNode (its copy
        diverged: StorageError from apply, through the caller)."""
        backoff = Backoff(0.05, 2.0)
        while True:
            try:
                answer = await self.tailer.next(self.last_txid, self.batch_txns)
                records = decode_batch(answer.first_txid, answer.count, answer.records)
                if answer.count and answer.first_txid != self.last_txid + 1:
                    raise ProtocolError(f"asked the journal for txid {self.last_txid + 1}, "
                                        f"got {answer.first_txid}")
            except (StorageError, ProtocolError) as exc:
                self.error = exc.message
                delay = backoff.next_s()
                log.warning("tailing the journal: %s (next try in %.2f s)", exc.message, delay)
                await asyncio.sleep(delay)
                continue
            self.error = ""
            backoff.reset()
            self.last_read_s = asyncio.get_running_loop().time()
            if records:
                await self._apply(records)

    async def _apply(self, records: list[Decoded]) -> None:
        async with self.lock:
            last = apply_batch(records, self.namespace, self.edits, self.on_applied)
            await self.edits.sync(last)
            self.last_txid = last
