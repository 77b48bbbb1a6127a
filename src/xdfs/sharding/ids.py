"""Inode and block ids unique across shards: the shard's number in the high bits.

Each shard allocates its inode and block ids from its own counters, as one NameNode does;
the counters of shard ``k`` start at ``k << ID_SHARD_SHIFT`` (plus the usual first id), so
no two shards ever hand out the same id and no coordination is needed per allocation.
Shard 0 starts where an unsharded NameNode always has, so an existing namespace is shard 0
unchanged. A DataNode derives the block pool of a replica from its block id alone
(:func:`shard_of_id`), without a pool field in the data protocol.

47 bits leave each shard 1.4e14 ids; 15 shard bits keep every id below 2**62 (a signed
64-bit integer on the wire, in the image and in Parquet exports, with room to spare).
"""

from __future__ import annotations

from typing import Final

ID_SHARD_SHIFT: Final = 47
#: Shard numbers are 0 .. SHARDS_MAX - 1.
SHARDS_MAX: Final = 1 << 15
_LOCAL_MASK: Final = (1 << ID_SHARD_SHIFT) - 1


def check_shard_number(shard: int) -> int:
    """``shard`` if it is a valid shard number; ValueError otherwise."""
    if not 0 <= shard < SHARDS_MAX:
        raise ValueError(f"shard number {shard} is outside 0..{SHARDS_MAX - 1}")
    return shard


def first_id(shard: int, first_local_id: int) -> int:
    """The first id shard ``shard`` allocates for a counter that starts at
    ``first_local_id`` on an unsharded NameNode (FIRST_INODE_ID, FIRST_BLOCK_ID)."""
    assert 0 <= first_local_id <= _LOCAL_MASK
    return (check_shard_number(shard) << ID_SHARD_SHIFT) | first_local_id


def shard_of_id(any_id: int) -> int:
    """The shard that allocated inode or block id ``any_id``."""
    return any_id >> ID_SHARD_SHIFT


def local_part(any_id: int) -> int:
    """``any_id`` without its shard bits (the shard's own counter value)."""
    return any_id & _LOCAL_MASK
