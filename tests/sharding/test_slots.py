"""The slot of a path: Redis Cluster's CRC16 and the partition-root cut."""

from __future__ import annotations

import pytest

from xdfs.errors import ConfigError, InvalidPath
from xdfs.sharding.slots import (
    SLOT_COUNT,
    Partitioning,
    crc16,
    is_top_layer,
    key_slot,
    partition_root,
    slot_of,
)


def test_crc16_check_value() -> None:
    # the CRC16-CCITT/XMODEM check value, as in Redis's crc16.c
    assert crc16(b"123456789") == 0x31C3
    assert crc16(b"") == 0


@pytest.mark.parametrize(("key", "slot"), [
    # CLUSTER KEYSLOT answers from Redis's and Dragonfly's command references
    (b"somekey", 11058),
    (b"hash_tag", 2515),  # foo{hash_tag}: the tag alone is hashed
    (b"user1", 8106),  # {user1}.following
    (b"8xjx7vWrfPq54mKfFD3Y1CcjjofpnAcQ", 5458),
    # keys known to land in the first slots
    (b"fyimk7v1CgnBo", 0),
    (b"8HMdi", 1),
    (b"IQhHSeAVHI", 2),
])
def test_key_slot_matches_redis(key: bytes, slot: int) -> None:
    assert key_slot(key) == slot


@pytest.mark.parametrize(("path", "overrides", "root"), [
    ("/user/alice/x/y", {}, "/user/alice"),
    ("/user/alice", {}, "/user/alice"),
    ("/user/alice/", {}, "/user/alice"),
    ("/tmp/f", {}, "/tmp/f"),
    ("/", {}, None),
    ("/user", {}, None),
    ("/user/", {}, None),
    # a deeper tree: /data/<team>/<set> are the partitions, /data/<team> is top layer
    ("/data/t1/s1/part-0", {"/data": 3}, "/data/t1/s1"),
    ("/data/t1", {"/data": 3}, None),
    ("/database/x/y", {"/data": 3}, "/database/x"),  # a prefix is whole components
    # a shallower one: all of /tmp on one shard
    ("/tmp/a/b", {"/tmp": 1}, "/tmp"),
    ("/tmp", {"/tmp": 1}, "/tmp"),
    # the longest prefix wins
    ("/data/big/a/b/c", {"/data": 3, "/data/big": 4}, "/data/big/a/b"),
    ("/data/small/a/b", {"/data": 3, "/data/big": 4}, "/data/small/a"),
    ("/data/big/a", {"/data": 3, "/data/big": 4}, None),
])
def test_partition_root(path: str, overrides: dict[str, int], root: str | None) -> None:
    assert partition_root(path, overrides=overrides) == root
    assert is_top_layer(path, overrides=overrides) is (root is None)
    expected = None if root is None else key_slot(root.encode())
    assert slot_of(path, overrides=overrides) == expected


def test_depth_setting() -> None:
    assert partition_root("/a/b/c/d", depth=3) == "/a/b/c"
    assert partition_root("/a/b/c/d", depth=1) == "/a"
    assert is_top_layer("/a/b", depth=3)
    assert not is_top_layer("/a", depth=1)


def test_everything_under_a_root_shares_its_slot() -> None:
    slots = {slot_of(p) for p in ("/user/alice", "/user/alice/a", "/user/alice/a/b/c/d")}
    assert len(slots) == 1
    slot = slots.pop()
    assert slot is not None
    assert 0 <= slot < SLOT_COUNT
    assert slot == key_slot(b"/user/alice")


@pytest.mark.parametrize("path", ["user/alice", "/user//alice", "/user/../x", "", "/a/\x00"])
def test_bad_paths_are_invalid_path(path: str) -> None:
    with pytest.raises(InvalidPath):
        slot_of(path)


@pytest.mark.parametrize("overrides", [
    {"/": 3},  # the default depth itself
    {"/a/b/c": 4},  # below the default cut (inside partition /a/b)
    {"/data": 3, "/data/x/y/z": 5},  # inside partition /data/x/y
    {"/tmp": 1, "/tmp/x": 2},  # inside partition /tmp
    {"/data/x": 1},  # cut above its own prefix
])
def test_bad_overrides_are_config_errors(overrides: dict[str, int]) -> None:
    with pytest.raises(ConfigError):
        Partitioning(2, overrides)


def test_depth_must_be_positive() -> None:
    with pytest.raises(ConfigError):
        Partitioning(0)
