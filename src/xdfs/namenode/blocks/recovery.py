"""Lease and block recovery decisions (pure core), as HDFS's internalReleaseLease and
BlockUnderConstructionFeature.initializeBlockRecovery.

A file whose writer went silent (hard limit), or named by ``recover_lease``, is closed
from what the DataNodes hold of its last block:

* no blocks, or a last block no DataNode holds or was asked to hold: close the file
  without that block (nothing of it was ever stored);
* a last block sent to DataNodes none of which is live now: wait for one to come back
  (a node only late with its heartbeats still holds the bytes; a server never deletes
  data it cannot prove is obsolete);
* a last block whose replicas are all finalized with the file's genstamp and one length:
  the writer streamed it whole, so close with that length at once;
* a last block with acknowledged bytes (hflushed, appended to, truncated: the manager's
  plan_lease_recovery) always goes through block recovery, or waits for a holder;
* otherwise **block recovery**: the lease passes to :data:`RECOVERY_HOLDER` and the block
  gets a new generation stamp (both logged, so a restarted NameNode never reuses the
  stamp); a *primary* DataNode among the holders is asked (in its next heartbeat reply) to
  agree a length with the other holders, truncate and finalize their replicas with the new
  stamp and call ``commit_block_synchronization``, which closes the file. An attempt whose
  primary dies or does not commit within ``block_recovery_timeout_s`` is started again with
  a new stamp and, while there is one, a primary not tried yet. Replicas left with an older
  stamp are stale and deleted once the block is complete (replication.py).

:class:`BlockRecoveries` keeps the attempts in memory only: after a restart, files held by
:data:`RECOVERY_HOLDER` are simply recovered again.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from xdfs.namenode.blocks.blockmap import REPORTED_BAD, Replica
from xdfs.protocol.blocks import BlockRecord

#: The lease holder of files under recovery (HDFS: "HDFS_NameNode"); no client may use it.
RECOVERY_HOLDER: Final = "xdfs-namenode-lease-recovery"


@dataclass(frozen=True)
class CloseNow:
    """Close the file with these blocks, no DataNode involved."""

    blocks: tuple[BlockRecord, ...]


@dataclass(frozen=True)
class RecoverBlock:
    """Start a recovery of the file's last block."""

    block: BlockRecord  # as the namespace has it
    holders: tuple[str, ...]  # node ids of the live DataNodes that may hold a replica


def plan_lease_recovery(
    blocks: Sequence[BlockRecord],
    finalized: Sequence[Replica],
    rbw: Sequence[Replica],
    expected: Iterable[str],
    sent_to_dead: bool = False,
) -> CloseNow | RecoverBlock:
    """What to do with an open file whose lease is recovered. ``finalized`` and ``rbw``
    are the last block's replicas on live nodes; ``expected`` the live nodes it was sent
    to (its targets, while this NameNode remembers them); ``sent_to_dead``: it was sent to
    nodes that are not live now. A plan without holders means: wait for one."""
    if not blocks:
        return CloseNow(())
    last = blocks[-1]
    usable, partial = _candidates(last, finalized, rbw)
    holders = recovery_holders(last, finalized, rbw, expected)
    if not holders:
        return RecoverBlock(last, ()) if sent_to_dead else CloseNow(tuple(blocks[:-1]))
    lengths = {r.num_bytes for r in usable}
    if usable and not partial and len(lengths) == 1 and all(
        r.genstamp == last.genstamp for r in usable
    ):
        whole = BlockRecord(last.block_id, last.genstamp, lengths.pop())
        return CloseNow((*blocks[:-1], whole))
    return RecoverBlock(last, holders)


def recovery_holders(
    block: BlockRecord, finalized: Sequence[Replica], rbw: Sequence[Replica],
    expected: Iterable[str],
) -> tuple[str, ...]:
    """The nodes a recovery of ``block`` asks: those holding a replica that may take part
    (not older than the block, not known bad), then the expected ones."""
    usable, partial = _candidates(block, finalized, rbw)
    return tuple(dict.fromkeys([*(r.node_id for r in (*usable, *partial)), *expected]))


def _candidates(
    block: BlockRecord, finalized: Sequence[Replica], rbw: Sequence[Replica]
) -> tuple[list[Replica], list[Replica]]:
    usable = [r for r in finalized if r.genstamp >= block.genstamp and not r.flags & REPORTED_BAD]
    return usable, [r for r in rbw if r.genstamp >= block.genstamp]


@dataclass
class Attempt:
    block_id: int
    genstamp: int  # the generation stamp this attempt gives the block (HDFS: recovery id)
    primary: str  # node id
    deadline_s: float
    tried: set[str] = field(default_factory=set)  # primaries of this and earlier attempts


class BlockRecoveries:
    """Block recoveries under way, one attempt per block."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._attempts: dict[int, Attempt] = {}

    def active(self, block_id: int, now_s: float) -> Attempt | None:
        """The block's attempt while it may still commit (None: none, or it is due again)."""
        attempt = self._attempts.get(block_id)
        return attempt if attempt is not None and attempt.deadline_s > now_s else None

    def current(self, block_id: int) -> Attempt | None:
        return self._attempts.get(block_id)

    def choose_primary(
        self, block_id: int, holders: Sequence[str], heartbeats: dict[str, float]
    ) -> str:
        """A holder not tried yet as primary of this block (all tried: any of them),
        preferring the one heard from last (HDFS)."""
        previous = self._attempts.get(block_id)
        tried = previous.tried if previous is not None else set()
        fresh = [node_id for node_id in holders if node_id not in tried] or list(holders)
        return max(fresh, key=lambda node_id: heartbeats.get(node_id, 0.0))

    def begin(self, block_id: int, genstamp: int, primary: str, now_s: float) -> Attempt:
        previous = self._attempts.get(block_id)
        tried = previous.tried if previous is not None else set()
        if primary in tried:
            tried = set()  # every holder had its turn: start the rotation again
        attempt = Attempt(block_id, genstamp, primary, now_s + self.timeout_s, tried | {primary})
        self._attempts[block_id] = attempt
        return attempt

    def node_dead(self, node_id: str) -> list[int]:
        """Attempts whose primary died are due at once; returns their blocks."""
        due = [a.block_id for a in self._attempts.values() if a.primary == node_id]
        for block_id in due:
            self._attempts[block_id].deadline_s = float("-inf")
        return due

    def finish(self, block_id: int) -> None:
        self._attempts.pop(block_id, None)

    def forget(self, block_ids: Iterable[int]) -> None:
        """The blocks left the namespace (or completed otherwise): no attempt matters."""
        for block_id in block_ids:
            self._attempts.pop(block_id, None)

    def __len__(self) -> int:
        return len(self._attempts)
