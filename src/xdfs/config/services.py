"""Sections of the side services: ``[logservice]`` and ``[dev]`` (``xdfs dev``)."""

from __future__ import annotations

from dataclasses import dataclass

from xdfs.config.base import MiB, require, setting


@dataclass(frozen=True)
class LogServiceConfig:
    zookeeper_quorum: str = setting(
        "", "ZooKeeper host:port[,host:port...] holding the logs' metadata (seeds 002, 004)."
    )
    zookeeper_root: str = setting("/xdfs-log", "Parent znode of every log's metadata.")
    zookeeper_secret_file: str = setting(
        "", "File holding the ZooKeeper secret (mode 600): instances log in to ZooKeeper "
        "with it (digest) and every znode under zookeeper_root carries an ACL giving only "
        "its holders any right. Required by `xdfs logservice`."
    )
    zookeeper_session_timeout_s: float = setting(
        10.0, "ZooKeeper session timeout of a log writer (its writer lock lives that long)."
    )
    storage_nodes: tuple[str, ...] = setting(
        (), "JournalNodes (host:port) whose `ledger` service stores the logs' ledgers: the "
        "only storage nodes an instance (or, set there, a storage node) ever dials."
    )
    secret_file: str = setting(
        "", "The storage nodes' secret (their journalnode.secret_file; mode 600)."
    )
    ensemble_size: int = setting(3, "Default ensemble of a new log's ledgers (E).")
    write_quorum: int = setting(3, "Default write quorum of a new log (W; = E).")
    ack_quorum: int = setting(2, "Default ack quorum (A): copies fsynced before an append is ok.")
    ledger_entries_max: int = setting(100_000, "Rotate to a new ledger past this many entries.")
    ledger_bytes_max: int = setting(256 * MiB, "... or past this many bytes.")
    ledger_age_max_s: float = setting(3600.0, "... or when the open ledger is this old.")
    add_timeout_s: float = setting(
        10.0, "How long an append waits for its ack quorum before the writer gives up a node."
    )
    call_timeout_s: float = setting(10.0, "Deadline of a call to one storage node.")
    read_bytes_max: int = setting(4 * MiB, "Most record bytes one read returns.")
    reclaim_interval_s: float = setting(
        30.0, "How often truncated ledgers no registered reader needs are deleted."
    )
    read_wait_max_s: float = setting(
        30.0, "Longest a tailing read (`xdfs log tail -f`) waits for a new record."
    )
    keeper_interval_s: float = setting(
        1.0, "How often the keeper plans from the heartbeats (re-replication, deletions)."
    )
    instances: tuple[str, ...] = setting(
        (), "Log service instances (host:port) a storage node sends its heartbeats to (any "
        "of them: one that is not the keeper names it); none: the node sends none."
    )
    heartbeat_interval_s: float = setting(
        1.0, "How often a storage node sends the keeper its ledgers and free space."
    )
    node_dead_after_s: float = setting(
        10.0, "A storage node not heard from for this long is dead: the keeper restores the "
        "closed ledgers it held on other nodes."
    )
    copy_timeout_s: float = setting(
        300.0, "How long the keeper waits for a re-replication it ordered before ordering it "
        "again (to another node if need be)."
    )
    http_address: str = setting(
        "", "Where the log service serves HTTP (its status page and /metrics), host:port; "
        "empty: no HTTP server."
    )

    def validate(self) -> None:
        e, w, a = self.ensemble_size, self.write_quorum, self.ack_quorum
        require(1 <= a <= w == e, "logservice: need 1 <= ack_quorum <= write_quorum "
                 "= ensemble_size")
        require(self.ledger_entries_max >= 1 and self.ledger_bytes_max >= 1
                 and self.ledger_age_max_s > 0, "logservice: ledger bounds must be positive")
        for name in ("zookeeper_session_timeout_s", "add_timeout_s", "call_timeout_s",
                     "reclaim_interval_s", "keeper_interval_s", "heartbeat_interval_s",
                     "node_dead_after_s", "copy_timeout_s"):
            require(getattr(self, name) > 0, f"logservice.{name} must be > 0")
        require(self.read_wait_max_s >= 0, "logservice.read_wait_max_s must be >= 0")
        require(self.read_bytes_max >= 1, "logservice.read_bytes_max must be >= 1")


@dataclass(frozen=True)
class DevConfig:
    base_dir: str = setting("dev-cluster", "Where `xdfs dev` keeps its cluster's data.")
    port: int = setting(8020, "Client RPC port of the dev cluster's NameNode.")
    ready_timeout_s: float = setting(60.0, "How long `xdfs dev` waits for each process.")
    datanodes: int = setting(3, "DataNodes `xdfs dev` starts (--datanodes).")
    backup: bool = setting(False, "Also start a BackupNode (--backup).")
    journalnodes: int = setting(
        0, "JournalNodes the NameNode writes its edits through (--journal; 0: local only)."
    )
    ha: bool = setting(
        False, "Two NameNodes with automatic failover, ZooKeeper and controllers (--ha)."
    )
    writable_timeout_s: float = setting(
        120.0, "How long `xdfs dev` waits for its cluster to accept writes before giving up."
    )
    safe_mode_extension_s: float = setting(
        3.0, "namenode.safe_mode_extension_s of the dev NameNode (its DataNodes are local)."
    )
    http_port: int = setting(
        0, "WebHDFS port of the dev NameNode (0: any free), unless namenode.http_address is set."
    )
    logservice: bool = setting(
        False, "Also start ZooKeeper, 3 storage nodes and a log service (--logservice)."
    )
    shards: int = setting(
        1, "NameNode shards of one namespace (--shards; 1: one NameNode, unsharded)."
    )
    logservice_only: bool = setting(
        False, "Start the log service alone (ZooKeeper, 3 storage nodes, an instance), no "
        "file system (--logservice-only)."
    )

