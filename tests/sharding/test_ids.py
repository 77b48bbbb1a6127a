from __future__ import annotations

import pytest

from xdfs.namenode.namespace.inodes import FIRST_INODE_ID
from xdfs.namenode.namespace.tree_base import FIRST_BLOCK_ID
from xdfs.sharding.ids import SHARDS_MAX, first_id, local_part, shard_of_id


def test_shard_zero_keeps_the_unsharded_first_ids() -> None:
    assert first_id(0, FIRST_INODE_ID) == FIRST_INODE_ID
    assert first_id(0, FIRST_BLOCK_ID) == FIRST_BLOCK_ID


@pytest.mark.parametrize("shard", [0, 1, 2, 17, SHARDS_MAX - 1])
def test_an_id_names_the_shard_that_allocated_it(shard: int) -> None:
    for start in (FIRST_INODE_ID, FIRST_BLOCK_ID):
        allocated = first_id(shard, start) + 123_456
        assert shard_of_id(allocated) == shard
        assert local_part(allocated) == start + 123_456
        assert allocated < 1 << 62


def test_ranges_of_two_shards_never_meet() -> None:
    assert first_id(1, FIRST_INODE_ID) > first_id(0, FIRST_BLOCK_ID) + (1 << 46)


@pytest.mark.parametrize("shard", [-1, SHARDS_MAX])
def test_a_shard_number_out_of_range_is_refused(shard: int) -> None:
    with pytest.raises(ValueError, match="outside"):
        first_id(shard, FIRST_INODE_ID)
