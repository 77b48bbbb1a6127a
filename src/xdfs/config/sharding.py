"""The ``[sharding]`` section: one namespace over many NameNode shards (metadata sharding).

A NameNode with ``shard`` unset (-1) is unsharded and behaves as it always has; with a shard
number it holds the partitions of the slots the slot map in ZooKeeper gives it."""

from __future__ import annotations

from dataclasses import dataclass, field

from xdfs.config.base import require, setting

#: The largest shard number: xdfs.sharding.ids.SHARDS_MAX - 1 (the config sits below the
#: sharding cores in the layers; tests/sharding/test_shard_config checks they agree).
SHARD_NUMBER_MAX = (1 << 15) - 1


@dataclass(frozen=True)
class ShardingConfig:
    shard: int = setting(
        -1, "This NameNode's shard number (0 .. 32767); -1: unsharded (one NameNode holds "
        "the whole namespace). Its name dir must be formatted with `xdfs namenode -format "
        "--shard K` (shard K's inode and block ids start at K << 47), else it refuses to "
        "start."
    )
    partition_depth: int = setting(
        2, "Path components of a partition root (2: /user/alice/x -> "
        "/user/alice); a path's slot is the CRC16 of its partition root mod 16384. The same "
        "on every shard and client."
    )
    depth_overrides: dict[str, int] = field(default_factory=dict, metadata={"doc": (
        "Prefix -> partition depth, a TOML table ({\"/data\" = 3}): the longest matching "
        "prefix wins. The same on every shard and client."
    )})
    zookeeper: str = setting(
        "", "ZooKeeper servers holding the slot map, host:port[,host:port...]; required by a "
        "sharded NameNode."
    )
    zookeeper_root: str = setting(
        "/xdfs-shards", "Parent znode of the shards' registrations, the controller's "
        "election and epoch, and the slot map."
    )
    zookeeper_secret_file: str = setting(
        "", "File holding the ZooKeeper secret (mode 600): shards log in with it (digest) and "
        "every znode under zookeeper_root carries an ACL giving only its holders any right. "
        "Required by a sharded NameNode."
    )
    zookeeper_session_timeout_s: float = setting(
        5.0, "ZooKeeper session timeout of a shard: a controller cut off for this long is "
        "deposed (its writes of the map fail from then on)."
    )
    shards_expected: int = setting(
        0, "How many shards the cluster starts with: the controller writes the initial slot "
        "map (even contiguous ranges) once this many shards have registered. 0: the map is "
        "written only by `xdfs admin -initShards`."
    )
    address: str = setting(
        "", "host:port clients reach this shard at, as registered in ZooKeeper; empty: the "
        "NameNode's RPC address."
    )

    @property
    def enabled(self) -> bool:
        return self.shard >= 0

    def validate(self) -> None:
        """(The overrides are checked where they are used, xdfs.sharding.slots.Partitioning:
        a shard refuses to start with a bad one.)"""
        require(-1 <= self.shard <= SHARD_NUMBER_MAX,
                f"sharding.shard must be -1 (unsharded) or 0 .. {SHARD_NUMBER_MAX}")
        require(self.partition_depth >= 1, "sharding.partition_depth must be at least 1")
        require(all(depth >= 1 for depth in self.depth_overrides.values()),
                "sharding.depth_overrides: every depth must be at least 1")
        require(self.zookeeper_root.startswith("/") and not self.zookeeper_root.endswith("/"),
                "sharding.zookeeper_root must be an absolute znode path (no trailing '/')")
        require(self.zookeeper_session_timeout_s > 0,
                "sharding.zookeeper_session_timeout_s must be > 0")
        require(self.shards_expected >= 0, "sharding.shards_expected must be >= 0")
        if self.enabled:
            require(bool(self.zookeeper and self.zookeeper_secret_file),
                    "a sharded NameNode (sharding.shard set) needs sharding.zookeeper and "
                    "sharding.zookeeper_secret_file")
