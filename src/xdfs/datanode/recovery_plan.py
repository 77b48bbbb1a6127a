"""The length a block recovery agrees on, and which replicas take part (pure core; HDFS's
BlockRecoveryWorker.syncBlock).

The primary DataNode asked every holder for its replica (``init_replica_recovery``); from
the answers:

* replicas older than the block's generation stamp in the namespace, or empty, do not
  count (*candidates* are the rest);
* no candidate at all, and every holder answered (with its replica, or that it has none):
  the block never got a byte, and the file closes without it (``delete_block``);
* a finalized candidate was written whole: its length is the block's, every finalized
  candidate takes part (they must agree, or nothing is decided), and so does each rbw
  candidate of exactly that length;
* otherwise (rbw only) the block is as long as the shortest candidate: every candidate
  holds at least that much, checksummed, so every one takes part, cut to that length;
* a truncate's recovery names the new length: every candidate at least that long takes
  part, cut to it.

Replicas that do not take part keep their old generation stamp: the NameNode deletes them
as stale once the recovered block is complete.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdfs.errors import InvalidArgument
from xdfs.protocol.datanode import ReplicaRecoveryInfo


@dataclass(frozen=True)
class RecoveryPlan:
    length: int
    participants: tuple[str, ...]  # addresses of the holders to truncate and finalize
    delete_block: bool = False


def plan_recovery(
    block_id: int,
    namespace_genstamp: int,
    answers: Sequence[tuple[str, ReplicaRecoveryInfo]],
    everyone_answered: bool,
    new_length: int = -1,
) -> RecoveryPlan:
    """The plan from the holders' answers ``(address, info)`` (``everyone_answered``: the
    holders missing from them said they have no replica); InvalidArgument when no length
    can be decided now (the NameNode starts the recovery again later). ``new_length``
    (a truncate): every candidate with at least that many bytes is cut to it."""
    candidates = [
        (address, info)
        for address, info in answers
        if info.block.genstamp >= namespace_genstamp and info.block.num_bytes > 0
    ]
    if new_length >= 0:
        return _truncation(block_id, candidates, new_length)
    if not candidates:
        if everyone_answered:
            return RecoveryPlan(0, (), delete_block=True)
        raise InvalidArgument(f"block {block_id}: no holder answered with a usable replica")
    finalized = {info.block.num_bytes for _address, info in candidates if info.finalized}
    if len(finalized) > 1:
        raise InvalidArgument(
            f"block {block_id}: finalized replicas differ in length: {sorted(finalized)}"
        )
    if finalized:
        length = finalized.pop()
        return RecoveryPlan(length, tuple(
            address for address, info in candidates
            if info.finalized or info.block.num_bytes == length
        ))
    length = min(info.block.num_bytes for _address, info in candidates)
    return RecoveryPlan(length, tuple(address for address, _info in candidates))


def _truncation(
    block_id: int, candidates: Sequence[tuple[str, ReplicaRecoveryInfo]], new_length: int
) -> RecoveryPlan:
    """A truncate's recovery (HDFS's truncate block recovery): the holders of at least
    ``new_length`` bytes take part; a shorter one cannot give the block its kept bytes."""
    long_enough = tuple(a for a, info in candidates if info.block.num_bytes >= new_length)
    if not long_enough:
        raise InvalidArgument(
            f"block {block_id}: no holder has the {new_length} bytes the truncate keeps"
        )
    return RecoveryPlan(new_length, long_enough)
