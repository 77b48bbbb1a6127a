"""Sections of block storage: ``[datanode]`` and ``[balancer]``."""

from __future__ import annotations

from dataclasses import dataclass, field

from xdfs.config.base import GiB, KiB, MiB, require, setting
from xdfs.config.sharding import SHARD_NUMBER_MAX


@dataclass(frozen=True)
class DataNodeConfig:
    data_dir: str = setting("", "Where the DataNode keeps its blocks (--data-dir).")
    rpc_address: str = setting(
        "127.0.0.1:9866", "Where the DataNode serves block reads and writes (--rpc-address)."
    )
    namenode: str = setting(
        "", "NameNode address(es), host:port[,host:port] tried in order (--namenode)."
    )
    shards: dict[str, str] = field(default_factory=dict, metadata={"doc": (
        "Metadata shards this DataNode stores block pools for: shard number -> its "
        "NameNode(s), a TOML table {0 = \"h1:8020\", 1 = \"h2:8020,h3:8020\"} (two addresses: "
        "the shard's HA pair, one actor each). Empty: datanode.namenode is shard 0; when "
        "set, datanode.namenode is not used."
    )})
    checksum_chunk_bytes: int = setting(
        64 * KiB, "Bytes covered by one CRC32C in a replica's checksum file."
    )
    reserved_bytes: int = setting(0, "Disk space left free for others (not reported as free).")
    scan_period_s: float = setting(
        604800.0, "The block scanner re-verifies every finalized replica at least this often."
    )
    scan_bytes_per_s: int = setting(8 * MiB, "Upper bound of the block scanner's read rate.")
    replication_concurrency_max: int = setting(
        4, "Replicate commands a DataNode carries out at once."
    )
    replication_queue_max: int = setting(
        64, "Replicate commands waiting for a slot; more are dropped (the NameNode retries)."
    )
    report_timeout_s: float = setting(
        5.0,
        "A block write waits this long for its received-replica report to reach the NameNode "
        "before answering the writer (a failed report is retried with the heartbeats).",
    )
    namenode_retry_max_s: float = setting(
        10.0, "Longest pause between attempts to reach an unreachable NameNode (backoff cap)."
    )
    namenode_call_timeout_s: float = setting(
        10.0,
        "Deadline of each register, report and heartbeat call; a NameNode that does not "
        "answer in time (paused) is left for the next address, as if its connection broke.",
    )
    registration_wait_s: float = setting(
        10.0,
        "A block read or write that reaches a DataNode before its first registration has "
        "given it the block keys (it just started) waits this long for them, then is refused.",
    )
    secret_file: str = setting(
        "",
        "File holding the cluster's DataNode secret (a NameNode writes it to datanode.secret "
        "in each name dir); the DataNode logs in with it. Empty: it logs in as client.user.",
    )
    directory_scan_interval_s: float = setting(
        21600.0,
        "The directory scanner compares the data dir with the replica map this often: "
        "vanished replicas are dropped and reported, unknown ones added (HDFS: 6 h).",
    )
    directory_scan_batch_dirs: int = setting(
        64, "Directories one step of the directory scanner lists (one worker-thread job)."
    )
    block_recovery_max: int = setting(
        16, "Block recoveries a DataNode coordinates at once; more are dropped (retried)."
    )
    http_address: str = setting(
        "",
        "Where the DataNode serves HTTP (WebHDFS data: CREATE, OPEN, GETFILECHECKSUM), "
        "host:port (HDFS: 9864); empty: no HTTP server.",
    )
    capacity_bytes: int = setting(
        0,
        "Capacity the DataNode reports (utilization and the balancer judge by it); 0: its "
        "file system's size. For several DataNodes sharing one disk.",
    )
    direct_io: bool = setting(
        True,
        "Write and read replica data files with O_DIRECT (bypassing the page cache: much "
        "less kernel CPU per byte); replicas under 1 MiB as datanode.small_direct_io says; "
        "a file system that refuses it is used buffered.",
    )
    loop_write_max_bytes: int = setting(
        512 * KiB,
        "A replica whose whole stream is at most this long is written on the event loop and "
        "fsynced through Linux AIO, without a worker thread (less CPU per small file); 0: "
        "every replica is written in worker threads.",
    )
    small_direct_io: bool = setting(
        True,
        "With direct_io and Linux AIO: a replica under 1 MiB whose whole stream arrived at "
        "once is written direct by the kernel's AIO, and replicas under 1 MiB are read "
        "direct by it (no fresh page-cache pages: their kernel CPU varied 0.1-0.7 ms per "
        "200 KiB on a VM, a direct write's stayed ~0.1; repeated reads then go to the disk "
        "each time); false: small replicas are written and read through the page cache.",
    )
    spare_files_max: int = setting(
        4096,
        "Empty files a data dir keeps in current/spares/ for the files of new replicas (a "
        "rename instead of a create: no inode allocated on the write path; a create cost "
        "~1 ms of kernel CPU on ext4 without a journal after deletions nearby). Made while "
        "the node writes nothing, refilled with deleted replicas' files (cut to 0 bytes); "
        "a replica uses two. 0: none (spares left from before are removed at startup).",
    )
    reports_in_flight_max: int = setting(
        4,
        "Received-replica reports a DataNode has on their way to a NameNode at once: a "
        "replica finalized while that many are in flight joins the next report (reports "
        "group replicas finalized together either way; 1: one report at a time).",
    )

    def shard_table(self) -> dict[int, str]:
        """``datanode.shards`` by shard number (empty when not set)."""
        return {int(shard): addresses for shard, addresses in sorted(self.shards.items())}

    def validate(self) -> None:
        require(
            4 * KiB <= self.checksum_chunk_bytes <= 1 * MiB,
            "datanode.checksum_chunk_bytes must be in [4 KiB, 1 MiB]",
        )
        require(self.scan_bytes_per_s > 0, "datanode.scan_bytes_per_s must be > 0")
        require(self.scan_period_s > 0, "datanode.scan_period_s must be > 0")
        require(self.reserved_bytes >= 0, "datanode.reserved_bytes must be >= 0")
        require(
            self.replication_concurrency_max >= 1,
            "datanode.replication_concurrency_max must be >= 1",
        )
        require(self.replication_queue_max >= 0, "datanode.replication_queue_max must be >= 0")
        require(self.report_timeout_s > 0, "datanode.report_timeout_s must be > 0")
        require(self.reports_in_flight_max >= 1, "datanode.reports_in_flight_max must be >= 1")
        require(self.namenode_retry_max_s > 0, "datanode.namenode_retry_max_s must be > 0")
        require(self.namenode_call_timeout_s > 0, "datanode.namenode_call_timeout_s must be > 0")
        require(
            self.directory_scan_interval_s > 0, "datanode.directory_scan_interval_s must be > 0"
        )
        require(
            self.directory_scan_batch_dirs >= 1, "datanode.directory_scan_batch_dirs must be >= 1"
        )
        require(self.block_recovery_max >= 1, "datanode.block_recovery_max must be >= 1")
        for shard, addresses in self.shards.items():
            require(shard.isdigit() and int(shard) <= SHARD_NUMBER_MAX and bool(addresses.strip()),
                    f"datanode.shards: {shard!r} = {addresses!r} is not shard = "
                    f"\"host:port[,host:port]\" (shards 0..{SHARD_NUMBER_MAX})")
        require(self.capacity_bytes >= 0, "datanode.capacity_bytes must be >= 0")
        require(self.spare_files_max >= 0, "datanode.spare_files_max must be >= 0")
        require(
            0 <= self.loop_write_max_bytes <= 1 * MiB,
            "datanode.loop_write_max_bytes must be in [0, 1 MiB]",
        )


@dataclass(frozen=True)
class BalancerConfig:
    threshold_percent: float = setting(
        10.0, "A node is balanced within this many points of the mean utilization (-threshold)."
    )
    bandwidth_bytes_per_s: int = setting(
        100 * MiB, "Most bytes per second the balancer has moved, all moves together (-bandwidth)."
    )
    moves_in_flight_max: int = setting(8, "Moves the balancer has under way at once.")
    moves_per_node_max: int = setting(
        4,
        "Moves one DataNode takes part in at once, as source or target (at most "
        "namenode.replication_streams_per_node; HDFS dfs.datanode.balance.max.concurrent.moves).",
    )
    iteration_bytes_max: int = setting(
        10 * GiB, "Most bytes one node sends or receives in one iteration (HDFS: 10 GiB)."
    )
    iteration_wait_s: float = setting(
        6.0,
        "Pause after an iteration so DataNodes' heartbeats bring the NameNode their new "
        "usage (two heartbeat intervals).",
    )
    idle_iterations_max: int = setting(
        5, "Iterations in a row that move nothing before the balancer gives up (exit 3)."
    )
    lock_renew_interval_s: float = setting(
        10.0,
        "The balancer renews its lease on /system/balancer.id this often (keep it below "
        "the NameNode's lease_soft_limit_s, after which a killed balancer's lock lapses).",
    )

    def validate(self) -> None:
        require(0 < self.threshold_percent < 100, "balancer.threshold_percent in (0, 100)")
        require(self.bandwidth_bytes_per_s > 0, "balancer.bandwidth_bytes_per_s must be > 0")
        require(self.moves_in_flight_max >= 1, "balancer.moves_in_flight_max must be >= 1")
        require(self.moves_per_node_max >= 1, "balancer.moves_per_node_max must be >= 1")
        require(self.iteration_bytes_max > 0, "balancer.iteration_bytes_max must be > 0")
        require(self.iteration_wait_s >= 0, "balancer.iteration_wait_s must be >= 0")
        require(self.idle_iterations_max >= 1, "balancer.idle_iterations_max must be >= 1")
        require(self.lock_renew_interval_s > 0, "balancer.lock_renew_interval_s must be > 0")

