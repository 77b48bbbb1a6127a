"""The [sharding] section, and a shard's namespace allocating ids in its own range."""

from __future__ import annotations

from pathlib import Path

import pytest

from xdfs.config import NameNodeConfig, build_config
from xdfs.config.sharding import SHARD_NUMBER_MAX
from xdfs.errors import ConfigError
from xdfs.namenode.image.format import format_namenode
from xdfs.namenode.image.recovery import load_namespace
from xdfs.namenode.image.storage import StorageDirectory
from xdfs.namenode.namespace.tree import Namespace
from xdfs.namenode.sharded import ShardState, check_namespace_shard
from xdfs.sharding.ids import SHARDS_MAX, shard_of_id


def test_unsharded_by_default() -> None:
    config = build_config([])
    assert config.sharding.shard == -1 and not config.sharding.enabled
    assert config.sharding.partition_depth == 2 and not config.sharding.depth_overrides


def test_the_shard_number_bound_is_the_ids() -> None:
    assert SHARD_NUMBER_MAX == SHARDS_MAX - 1


def test_overrides_and_depth_reach_the_partitioning() -> None:
    config = build_config([{"sharding": {"partition_depth": 1,
                                         "depth_overrides": {"/data": 3}}}])
    parts = ShardState(config.sharding, trash_enabled=True).partitioning
    assert parts.root_of("/tmp/x") == "/tmp"
    assert parts.root_of("/data/a/b/c") == "/data/a/b"


@pytest.mark.parametrize("values", [
    {"shard": -2}, {"shard": 1 << 15}, {"partition_depth": 0},
    {"depth_overrides": {"/data": 0}}, {"zookeeper_root": "x"},
    {"shard": 0},  # sharded without ZooKeeper
])
def test_bad_values_are_config_errors(values: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        build_config([{"sharding": values}])


def test_a_shard_refuses_an_override_inside_a_partition() -> None:
    config = build_config([{"sharding": {"depth_overrides": {"/user/a/b": 2}}}])
    with pytest.raises(ConfigError):
        ShardState(config.sharding, trash_enabled=True)


@pytest.mark.parametrize("shard", [0, 3])
def test_format_starts_the_counters_in_the_shards_range(tmp_path: Path, shard: int) -> None:
    format_namenode([tmp_path], NameNodeConfig(), superuser="su", password="pw", shard=shard)
    dirs = [StorageDirectory(tmp_path)]
    ns, _ = load_namespace(dirs, Namespace)
    for d in dirs:
        d.unlock()
    expected = shard
    assert shard_of_id(ns.next_inode_id) == expected
    assert shard_of_id(ns.next_block_id) == expected
    assert shard_of_id(ns.resolve("/user").get().id) == expected  # made at format, in the range
    check_namespace_shard(ns.next_inode_id, shard)
    with pytest.raises(ConfigError):  # another shard's name dir
        check_namespace_shard(ns.next_inode_id, shard + 1)
