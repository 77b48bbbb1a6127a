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
acknowledged is on a majority of JournalNodes and comes back through the tailer. Its
records at or below the committed txid are not safe either: killed with a record synced
locally but on no majority, it finds, after a failover, another writer's record at that
txid. So each record is compared with the journal's, byte for byte, and the segment is
cut at the first that differs.

DataNodes report to the standby too (namenode/blocks/failover.py): :class:`TrackedNamespace`
is the tailer's replay target, which tells the block manager what each batch changed
(blocks gone, blocks whose length or replication changed) once the batch is synced, so
that the warm block map follows the namespace and the reports that waited for the batch
are placed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Protocol

from xdfs.editlog.segments import segment_index
from xdfs.errors import ProtocolError, Standby, StorageError, XdfsError
from xdfs.namenode.editlog.editlog import EditLog
from xdfs.namenode.editlog.replay import (
    Backoff,
    Decoded,
    apply_batch,
    decode_batch,
)
from xdfs.namenode.editlog.shared import trim_to_journal
from xdfs.namenode.handlers.client import AdminHandlers
from xdfs.namenode.namespace.ops import Op
from xdfs.namenode.namespace.tree import Namespace
from xdfs.protocol.namenode import DataNodeReport
from xdfs.quorum.channel import JournalChannel
from xdfs.quorum.reader import JournalTailer
from xdfs.rpc.handling import CallContext, Download
from xdfs.rpc.messages import Empty
from xdfs.rpc.service import NotActiveHandlers

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


async def trim_unconfirmed(current: Path, committed: int, channels: Sequence[JournalChannel],
                           journal_id: str) -> None:
    """Cut an in-progress local segment back to the records the journal holds identically,
    up to what is known committed (module doc). Finalized segments were synced to a
    majority before they were finalized: kept."""
    for segment in segment_index(current):
        if segment.end is None:
            await trim_to_journal(segment.path, segment.start, committed, channels, journal_id)


class BlockTracker(Protocol):
    """What of the block manager a tailing standby drives (BlockManager)."""

    def leaving(self, block_ids: Iterable[int]) -> None: ...

    def affected_blocks(self, op: Op) -> tuple[int, ...]: ...

    def tailed(self, dropped: Iterable[int], affected: Iterable[int]) -> None: ...


class TrackedNamespace:
    """Replay target of a standby: the namespace, with the block manager told (module doc)."""

    def __init__(self, ns: Namespace, blocks: BlockTracker) -> None:
        self.ns = ns
        self.blocks = blocks
        self._dropped: list[int] = []
        self._affected: list[int] = []

    def apply(self, op: Op) -> tuple[int, ...]:
        gone = self.ns.apply(op)
        self.blocks.leaving(gone)  # not orphans until the batch is synced
        self._dropped.extend(gone)
        self._affected.extend(self.blocks.affected_blocks(op))
        return gone

    def batch_done(self) -> None:
        dropped, self._dropped = self._dropped, []
        affected, self._affected = self._affected, []
        self.blocks.tailed(dropped, affected)


class StandbyTailer:
    """Applies the journal's committed records to the namespace and the local log."""

    def __init__(self, tailer: JournalTailer, namespace: TrackedNamespace, edits: EditLog,
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
            self.namespace.batch_done()


class StandbyAdminHandlers(NotActiveHandlers):
    """The admin service of a standby: its DataNode report and block map dump are served
    (what an operator checks before a failover: ``admin -fs xdfs://<standby>
    -dumpBlockMap``), every other admin call is refused with Standby."""

    def __init__(self, admin: AdminHandlers) -> None:
        super().__init__(lambda: "this NameNode is standby", Standby)
        self._admin = admin

    def datanode_report(self, ctx: CallContext, req: Empty) -> DataNodeReport:
        return self._admin.datanode_report(ctx, req)

    async def block_map(self, ctx: CallContext, req: Empty) -> Download:
        return await self._admin.block_map(ctx, req)
