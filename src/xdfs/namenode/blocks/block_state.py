"""Where a block stands in the namespace and what its replicas count for (pure): shared
by the replication monitor, decommissioning, failover, fsck and the block-map export."""

from __future__ import annotations

import bisect
from typing import NamedTuple

from xdfs.namenode.blocks.blockmap import BAD_GENSTAMP, BAD_LENGTH
from xdfs.namenode.namespace.inodes import FileInode
from xdfs.namenode.namespace.tree import Namespace
from xdfs.protocol.blocks import BlockRecord
from xdfs.sharding.ids import shard_of_id


class BlockState(NamedTuple):
    file: FileInode
    record: BlockRecord  # as committed in the namespace
    complete: bool  # False for the last block of a file being written


def block_state(ns: Namespace, block_id: int) -> BlockState | None:
    """Where ``block_id`` stands in the namespace; None when no file holds it."""
    file = ns.block_file(block_id)
    if file is None:
        return None
    blocks = file.blocks
    index = bisect.bisect_left(blocks, block_id, key=_block_id)
    if index >= len(blocks) or blocks[index].block_id != block_id:
        # block ids grow with each add_block, so lists are sorted; a scan covers the rest
        index = next(i for i, block in enumerate(blocks) if block.block_id == block_id)
    complete = index < len(blocks) - 1 or not ns.is_open(file)
    return BlockState(file, blocks[index], complete)


def another_shards(ns: Namespace, block_id: int) -> bool:
    """A block another metadata shard allocated (its id's shard bits, ``sharding.ids``):
    this namespace neither knows nor owns it, so a replica of it is no orphan to delete.
    The namespace's own shard is that of its block counter (shard k's counters start at
    ``first_id(k, ...)``; 0 for an unsharded NameNode)."""
    return shard_of_id(block_id) != shard_of_id(ns.next_block_id)


def from_the_future(ns: Namespace, reported: BlockRecord) -> bool:
    """A replica whose block id or genstamp this namespace never allocated: a newer
    NameNode (one promoted while this one was away, or this one restarted from older
    edits) created it. As HDFS, it is neither an orphan nor corrupt: deleting it could
    destroy acknowledged data, so it is kept and reported."""
    return reported.block_id >= ns.next_block_id or reported.genstamp >= ns.next_genstamp


def replica_flags(state: BlockState, reported: BlockRecord) -> int:
    """Why a reported replica is corrupt (0: it is good)."""
    flags = 0
    if reported.genstamp != state.record.genstamp:
        flags |= BAD_GENSTAMP
    if state.complete and reported.num_bytes != state.record.num_bytes:
        flags |= BAD_LENGTH
    return flags


class ReplicaCounts(NamedTuple):
    """One block's good replicas by the admin state of their nodes: ``normal`` (in
    service), ``maintenance`` (in maintenance, live or down: counted), decommissioning ones
    only in ``any_good`` (readable, a copy source, not counted), and ``corrupt`` ones."""

    expected: int
    normal: tuple[str, ...]
    maintenance: tuple[str, ...]
    corrupt: tuple[str, ...]
    any_good: int
    floor: int  # normal replicas a block with replicas in maintenance must keep

    @property
    def counted(self) -> int:
        return len(self.normal) + len(self.maintenance)

    @property
    def short(self) -> int:
        """Copies it needs (enough counted replicas, and enough normal ones)."""
        return max(self.expected - self.counted, self.floor - len(self.normal))

    @property
    def surplus(self) -> int:
        return self.counted - self.expected


def _block_id(block: BlockRecord) -> int:
    return block.block_id
