"""The recovery rule of the quorum journal (HDFS-3077), pure.

A new writer first takes an epoch above every promise a majority has made
(:func:`next_epoch`), then settles the last segment, which a crashed writer may have left
with different lengths on different nodes. Each node answers ``prepare_recovery`` with
what it holds (:class:`~xdfs.protocol.journal.PrepareRecoveryResponse`);
:func:`choose_recovery_source` picks the copy every node will accept (``accept_recovery``)
before the segment is finalized:

1. a node without the segment ranks lowest;
2. a finalized copy beats any in-progress one (finalized copies must all agree);
3. among in-progress copies, the highest *seen epoch* wins -- the epoch in which the copy
   was accepted by an earlier recovery, or else the epoch of the writer that wrote it -- so
   a recovery that reached a majority once is never undone by a later one;
4. then the longest copy (the most transactions).

The winner must end at or after every committed txid any node has heard of: a writer acks a
txid only once a majority stored it, and any majority overlaps the one that answered, so a
shorter winner would mean a broken invariant (raised as :class:`RecoveryConflict`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from xdfs.errors import StorageError
from xdfs.protocol.journal import PrepareRecoveryResponse, SegmentState


class RecoveryConflict(StorageError):
    """The nodes' answers contradict the protocol's invariants (never expected)."""


def seen_epoch(candidate: PrepareRecoveryResponse) -> int:
    """The epoch a node's copy is vouched for by: the recovery that accepted it, or else
    the writer that wrote it."""
    return max(candidate.accepted_epoch, candidate.last_writer_epoch)


def next_epoch(promised_epochs: Iterable[int]) -> int:
    """The epoch a new writer proposes: one above every promise it was told of."""
    return max(promised_epochs, default=0) + 1


def _rank(candidate: PrepareRecoveryResponse) -> tuple[int, int, int]:
    segment = candidate.segment
    if segment is None or segment.txn_count == 0:
        return (0, 0, 0)
    if not segment.in_progress:
        return (2, 0, segment.end_txid)
    return (1, seen_epoch(candidate), segment.end_txid)


def choose_recovery_source(
    candidates: Mapping[str, PrepareRecoveryResponse],
) -> tuple[str, SegmentState] | None:
    """The node whose copy of the segment wins, and that copy (as finalized: ``in_progress``
    False); None when no node holds a record of it (nothing to recover)."""
    finalized_ends = {
        c.segment.end_txid for c in candidates.values()
        if c.segment is not None and not c.segment.in_progress and c.segment.txn_count
    }
    if len(finalized_ends) > 1:
        raise RecoveryConflict(
            f"finalized copies of one segment end at different txids: {sorted(finalized_ends)}"
        )
    starts = {c.segment.start_txid for c in candidates.values() if c.segment is not None}
    if len(starts) > 1:
        raise RecoveryConflict(f"copies of one segment start at different txids: {starts}")
    # ties go to the smallest node name, so every run of the rule picks the same node
    node = max(sorted(candidates), key=lambda n: _rank(candidates[n]))
    best = candidates[node].segment
    if best is None or best.txn_count == 0:
        return None
    committed = max(c.committed_txid for c in candidates.values())
    if best.end_txid < committed:
        raise RecoveryConflict(
            f"the best copy of segment {best.start_txid} ends at txid {best.end_txid}, "
            f"below the committed txid {committed}: acknowledged edits would be lost"
        )
    return node, SegmentState(best.start_txid, best.end_txid, in_progress=False)
