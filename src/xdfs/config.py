"""Every tunable of xdfs: one frozen dataclass per section, each default and limit named
with its unit last, each with a one-line doc that ``docs/configuration.md`` is checked
against.

Sources, later ones winning: the defaults here, a TOML file (``--conf`` or ``XDFS_CONF``),
then ``-D section.key=value`` overrides and role-specific flags. Unknown sections or keys
and values of the wrong type are a :class:`~xdfs.errors.ConfigError`, never ignored.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from xdfs.errors import ConfigError

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

CONF_ENV = "XDFS_CONF"


def setting(default: Any, doc: str) -> Any:
    """A config field with its documentation attached (read by ``xdfs conf --markdown``)."""
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True)
class RpcConfig:
    frame_bytes_max: int = setting(
        4 * MiB, "Hard limit on one frame (length prefix); larger frames close the connection."
    )
    receive_buffer_bytes: int = setting(
        256 * KiB, "Per-connection receive buffer for small frames; large frames get their own."
    )
    connect_timeout_s: float = setting(5.0, "Deadline for TCP connect plus handshake.")
    call_timeout_s: float = setting(30.0, "Default deadline of one call (per try).")
    handshake_timeout_s: float = setting(
        10.0, "A server closes a connection that has not sent its handshake within this time."
    )
    unauthenticated_frame_bytes_max: int = setting(
        16 * KiB,
        "Largest frame a server takes from a peer not authenticated as a user (before its "
        "handshake, and in an anonymous session, which may only log in).",
    )
    unauthenticated_idle_timeout_s: float = setting(
        20.0,
        "A server closes an anonymous session (handshake without credentials) that runs no "
        "call and completes no frame for this long.",
    )
    partial_frame_timeout_s: float = setting(
        60.0,
        "A server closes a connection whose frame stays incomplete this long while it reads "
        "(a peer that sends a length prefix and never the rest).",
    )
    tries_per_address: int = setting(3, "Tries against one address before failing over.")
    retry_backoff_initial_s: float = setting(0.05, "First backoff between retries; doubles.")
    retry_backoff_max_s: float = setting(2.0, "Upper bound of the retry backoff.")
    inflight_per_connection_max: int = setting(
        1024, "Requests a server runs at once per connection; beyond it it stops reading."
    )
    connections_max: int = setting(4096, "Connections a server accepts at once.")
    stream_chunk_bytes: int = setting(1 * MiB, "Payload bytes per chunk frame of a stream.")
    stream_window_chunks: int = setting(
        8, "Chunks a stream sender may have unacknowledged (per-stream flow-control window)."
    )
    write_buffer_high_bytes: int = setting(
        4 * MiB, "Socket write buffer above which a sender waits (and a server stops reading)."
    )
    stalled_peer_timeout_s: float = setting(
        30.0, "A peer that reads nothing for this long while we have data for it is dropped."
    )
    tls_cert_file: str = setting("", "PEM certificate; with tls_key_file enables TLS serving.")
    tls_key_file: str = setting("", "PEM private key of tls_cert_file.")
    tls_ca_file: str = setting("", "PEM CA bundle clients verify servers with; enables TLS.")
    use_uvloop: bool = setting(True, "Run on uvloop when it is installed.")
    slow_call_s: float = setting(
        1.0, "A call slower than this is kept in its server's ring of recent slow calls "
        "(the web UI's Slow operations page)."
    )
    slow_calls_kept: int = setting(100, "Recent slow calls a server keeps (the oldest go).")
    loop_lag_interval_s: float = setting(
        1.0, "How often a server measures its event-loop lag (xdfs_event_loop_lag_seconds)."
    )

    def validate(self) -> None:
        _require(self.frame_bytes_max >= 64 * KiB, "rpc.frame_bytes_max must be >= 64 KiB")
        _require(
            self.stream_chunk_bytes + 1 * KiB <= self.frame_bytes_max,
            "rpc.stream_chunk_bytes must leave 1 KiB of room under rpc.frame_bytes_max",
        )
        _require(self.stream_window_chunks >= 1, "rpc.stream_window_chunks must be >= 1")
        _require(
            1 * KiB <= self.unauthenticated_frame_bytes_max <= self.frame_bytes_max,
            "rpc.unauthenticated_frame_bytes_max must be in [1 KiB, rpc.frame_bytes_max]",
        )
        _require(self.unauthenticated_idle_timeout_s > 0,
                 "rpc.unauthenticated_idle_timeout_s must be > 0")
        _require(self.partial_frame_timeout_s > 0, "rpc.partial_frame_timeout_s must be > 0")
        _require(self.tries_per_address >= 1, "rpc.tries_per_address must be >= 1")
        _require(self.inflight_per_connection_max >= 1, "rpc.inflight_per_connection_max >= 1")
        _require(
            bool(self.tls_cert_file) == bool(self.tls_key_file),
            "rpc.tls_cert_file and rpc.tls_key_file go together",
        )
        _require(self.slow_call_s > 0, "rpc.slow_call_s must be > 0")
        _require(self.slow_calls_kept >= 0, "rpc.slow_calls_kept must be >= 0")
        _require(self.loop_lag_interval_s > 0, "rpc.loop_lag_interval_s must be > 0")


@dataclass(frozen=True)
class NameNodeConfig:
    name_dirs: tuple[str, ...] = setting(
        (), "Storage directories; edits and images are written to every one (--name-dir)."
    )
    rpc_address: str = setting("127.0.0.1:8020", "Where the NameNode serves (--rpc-address).")
    edits_buffer_bytes: int = setting(
        512 * KiB, "Size of each half of the edits double buffer; appends wait beyond it."
    )
    edits_segment_bytes_max: int = setting(64 * MiB, "Roll the edits segment past this size.")
    edits_segment_txns_max: int = setting(1_000_000, "Roll the edits segment past this many.")
    edits_cache_bytes: int = setting(
        4 * MiB, "Recently synced edits kept in memory for BackupNode fetches."
    )
    checkpoint_period_s: float = setting(3600.0, "Write an fsimage at least this often.")
    checkpoint_txns: int = setting(1_000_000, "... or after this many transactions.")
    checkpoint_check_interval_s: float = setting(60.0, "How often the checkpointer looks.")
    images_retained: int = setting(2, "fsimages kept (with the edits needed after them).")
    default_replication: int = setting(2, "Replication of files that do not ask (seed 003).")
    replication_max: int = setting(32, "Largest replication a file may ask for.")
    default_block_size_bytes: int = setting(64 * MiB, "Block size of files that do not ask.")
    block_size_min_bytes: int = setting(4 * KiB, "Smallest block size a file may ask for.")
    list_limit_max: int = setting(10_000, "Most entries one listing page returns.")
    lease_soft_limit_s: float = setting(
        60.0, "After this long without renewal another writer may take a file over."
    )
    lease_hard_limit_s: float = setting(
        3600.0, "After this long without renewal the NameNode closes the file itself."
    )
    lease_check_interval_s: float = setting(5.0, "How often expired leases are looked for.")
    block_recovery_timeout_s: float = setting(
        120.0,
        "A block recovery whose primary DataNode has not committed by then is started again "
        "with a new generation stamp (another primary when one is left).",
    )
    token_lifetime_s: float = setting(86400.0, "Lifetime of a login token.")
    token_key_rotation_s: float = setting(86400.0, "A new token-signing key this often.")
    password_checks_max: int = setting(
        2, "Password checks (scrypt: ~16 MiB and tens of ms of CPU each) run at once; more wait."
    )
    password_checks_per_peer_max: int = setting(
        8,
        "Password checks one client host may have running or waiting; beyond it its logins "
        "are refused with Overloaded (so one host cannot queue work for everyone).",
    )
    login_failures_throttle: int = setting(
        10,
        "Failed logins (per user, and per client host) after which each next attempt must wait "
        "login_throttle_delay_s, doubling with every further failure (LoginThrottled).",
    )
    login_throttle_delay_s: float = setting(1.0, "The first wait of a throttled login.")
    login_failures_lockout: int = setting(
        30, "Failed logins after which the user or host is locked out (LockedOut)."
    )
    login_lockout_s: float = setting(
        300.0, "How long a lockout lasts (password logins only; tokens keep working)."
    )
    login_failure_window_s: float = setting(
        900.0, "Failed logins are forgotten this long after the last one."
    )
    trash_interval_s: float = setting(
        86400.0, "Trash checkpoints older than this are deleted; 0 disables the trash."
    )
    trash_checkpoint_interval_s: float = setting(
        3600.0, "How often the emptier rolls .Trash/Current into a checkpoint."
    )
    umask: int = setting(0o022, "Permission bits removed from default modes (decimal in TOML).")
    supergroup: str = setting("supergroup", "Members of this group are superusers.")
    heartbeat_interval_s: float = setting(3.0, "DataNode heartbeat period (seed 003: 3 s).")
    heartbeat_misses_dead: int = setting(
        3, "A DataNode silent for this many heartbeat intervals is declared dead."
    )
    block_report_batch_max: int = setting(
        100, "Entries per full-block-report call a DataNode sends (seed 003: 100)."
    )
    full_report_interval_s: float = setting(21600.0, "DataNodes send a full report this often.")
    replication_check_interval_s: float = setting(
        3.0, "How often the replication monitor looks for under/over-replicated blocks."
    )
    replication_streams_per_node: int = setting(
        4, "Replications one DataNode is asked to run at once (as source or target)."
    )
    replication_pending_timeout_s: float = setting(
        60.0, "A scheduled replication not reported by then is scheduled again."
    )
    deletions_per_heartbeat: int = setting(1000, "Replica deletions sent in one heartbeat reply.")
    min_replication: int = setting(
        1, "Replicas a block needs reported before `complete` succeeds (and for safe mode)."
    )
    complete_wait_s: float = setting(
        20.0,
        "How long `complete` waits for every block's replicas to be reported (keep it below "
        "rpc.call_timeout_s: the writer then hears NotEnoughReplicas, not a timeout).",
    )
    block_token_lifetime_s: float = setting(600.0, "Lifetime of a block access token.")
    safe_mode_threshold: float = setting(
        0.999, "Fraction of blocks with min_replication replicas needed to leave safe mode."
    )
    safe_mode_extension_s: float = setting(
        30.0, "Safe mode lasts this long more once the threshold is reached."
    )
    safe_mode_min_datanodes: int = setting(0, "Live DataNodes needed to leave startup safe mode.")
    safe_mode_check_interval_s: float = setting(
        1.0, "How often startup safe mode checks whether it may end (its extension's grain)."
    )
    resource_free_bytes_min: int = setting(
        100 * MiB,
        "Free space each name dir needs: below it the NameNode enters safe mode (reads go on, "
        "writes wait) before the disk is full, and leaves once every dir has it again.",
    )
    resource_check_interval_s: float = setting(5.0, "How often name dirs' free space is read.")
    fsck_list_max: int = setting(10_000, "Most files one fsck answer lists.")
    shared_edits: str = setting(
        "",
        "The quorum journal: qjournal://host:port;host:port;host:port/<journal id>. Empty: "
        "local edits only. Acknowledged only once a majority of JournalNodes stored an edit.",
    )
    journal_write_timeout_s: float = setting(
        20.0, "A batch must be stored by a majority of JournalNodes within this (HDFS: 20 s)."
    )
    journal_call_timeout_s: float = setting(
        20.0, "Deadline of every other call to JournalNodes (epochs, recovery, segments)."
    )
    journal_commit_notify_s: float = setting(
        0.02, "When no batch follows, the committed txid reaches the JournalNodes this soon."
    )
    journal_heartbeat_interval_s: float = setting(
        1.0, "The writer heartbeats idle JournalNodes this often (and finds out it is fenced)."
    )
    standby_tail_wait_s: float = setting(
        1.0, "A standby NameNode's long poll of the journal for committed edits (below "
        "journalnode.read_wait_max_s and journal_call_timeout_s)."
    )
    standby_tail_txns_max: int = setting(
        10000, "Most edits a standby NameNode reads and applies in one batch."
    )
    failover_safe_mode_extension_s: float = setting(
        0.0, "safe_mode_extension_s of a NameNode that just became active: its block map "
        "is the standby's, filled by the DataNodes' reports, so it leaves safe mode as "
        "soon as the threshold is reached (the extension at startup waits for slow ones)."
    )
    edits_fetch_bytes_max: int = setting(
        2 * MiB, "Most bytes of edits one fetch_edits answer carries (below frame_bytes_max)."
    )
    edits_fetch_wait_max_s: float = setting(
        5.0, "Longest long poll of a caught-up fetch_edits (below the call timeout)."
    )
    backup_active_window_s: float = setting(
        120.0,
        "A backup that fetched within this window checkpoints for the NameNode: its own "
        "checkpoints wait until twice overdue.",
    )
    backup_forget_s: float = setting(
        3600.0, "admin -report lists backups that fetched within this window."
    )
    peers: tuple[str, ...] = setting(
        (),
        "Other NameNodes/BackupNodes of this namespace (host:port); before serving, the "
        "NameNode refuses to start if one of them has a higher epoch or a newer txid.",
    )
    peer_check_timeout_s: float = setting(5.0, "How long the NameNode waits for each peer.")
    peer_check_required: bool = setting(
        False, "Refuse to start when a peer cannot be asked (default: start with a warning)."
    )
    retry_cache_expiry_s: float = setting(
        600.0,
        "How long the NameNode remembers the outcome of a non-idempotent call, so a client's "
        "retry of it gets that outcome instead of a second execution (HDFS: 10 min).",
    )
    retry_cache_entries_max: int = setting(
        100_000, "Most calls the retry cache remembers (the oldest finished go first)."
    )
    http_address: str = setting(
        "",
        "Where the NameNode serves HTTP (the WebHDFS gateway), host:port (HDFS: 9870); "
        "empty: no HTTP server.",
    )
    walk_slice_inodes: int = setting(
        1000,
        "Inodes a whole-subtree walk (fsck, -count/-du, the block map export, a recursive "
        "delete's permission check) visits before the NameNode serves other calls again.",
    )
    image_writer_timeout_s: float = setting(
        3600.0,
        "A checkpoint's forked image writer still running after this is killed and the "
        "checkpoint fails (the older image stays); a standby or BackupNode uses it too.",
    )
    fsck_rate_inodes_per_s: float = setting(
        200_000.0,
        "Most inodes per second all fsck walks together visit (0: no limit), so fsck of a "
        "large tree, which any user may run where they may read, cannot monopolise the "
        "NameNode.",
    )
    # --- DataNode lifecycle: racks, decommission, maintenance, balancer ---------------
    topology_file: str = setting(
        "",
        "Rack of each DataNode: lines 'HOST[:PORT] /rack' (HDFS net.topology); empty: no "
        "file. Unlisted nodes ask topology_script, else /default-rack.",
    )
    topology_script: str = setting(
        "",
        "Program given DataNode addresses as arguments, printing one rack per address "
        "(HDFS net.topology.script.file.name); answers are cached. Empty: none.",
    )
    topology_script_timeout_s: float = setting(
        5.0, "A topology script that has not answered by then fails the registration."
    )
    hosts_include_file: str = setting(
        "",
        "DataNodes allowed to register (HOST or HOST:PORT per line); empty file or no file: "
        "all (HDFS dfs.hosts). Re-read by admin -refreshNodes and at start.",
    )
    hosts_exclude_file: str = setting(
        "", "DataNodes to decommission (HOST or HOST:PORT per line; HDFS dfs.hosts.exclude)."
    )
    hosts_maintenance_file: str = setting(
        "",
        "DataNodes to put in maintenance: lines 'HOST[:PORT] UNTIL' (epoch seconds or ISO "
        "8601 with a zone); back in service at UNTIL.",
    )
    maintenance_min_replicas: int = setting(
        1,
        "Replicas a block keeps on in-service nodes while others of its replicas are in "
        "maintenance (HDFS dfs.namenode.maintenance.replication.min).",
    )
    decommission_check_interval_s: float = setting(
        30.0, "How often decommission and maintenance progress is computed (HDFS: 30 s)."
    )
    balancer_move_timeout_s: float = setting(
        20.0,
        "How long a balancer's move call waits for the target's copy to be reported "
        "(below rpc.call_timeout_s).",
    )

    def validate(self) -> None:
        _require(self.heartbeat_interval_s > 0, "namenode.heartbeat_interval_s must be > 0")
        _require(self.walk_slice_inodes >= 1, "namenode.walk_slice_inodes must be >= 1")
        _require(self.image_writer_timeout_s > 0, "namenode.image_writer_timeout_s must be > 0")
        _require(self.fsck_rate_inodes_per_s >= 0,
                 "namenode.fsck_rate_inodes_per_s must be >= 0")
        _require(self.retry_cache_expiry_s > 0, "namenode.retry_cache_expiry_s must be > 0")
        _require(self.retry_cache_entries_max > 0, "namenode.retry_cache_entries_max must be > 0")
        _require(self.heartbeat_misses_dead >= 1, "namenode.heartbeat_misses_dead must be >= 1")
        _require(self.block_report_batch_max >= 1, "namenode.block_report_batch_max must be >= 1")
        _require(self.min_replication >= 1, "namenode.min_replication must be >= 1")
        _require(
            0.0 <= self.safe_mode_threshold <= 1.0,
            "namenode.safe_mode_threshold must be in [0, 1]",
        )
        _require(self.edits_buffer_bytes >= 4 * KiB, "namenode.edits_buffer_bytes >= 4 KiB")
        _require(self.images_retained >= 1, "namenode.images_retained must be >= 1")
        _require(
            1 <= self.default_replication <= self.replication_max,
            "namenode.default_replication must be in [1, replication_max]",
        )
        _require(
            self.default_block_size_bytes >= self.block_size_min_bytes,
            "namenode.default_block_size_bytes below block_size_min_bytes",
        )
        _require(
            self.lease_soft_limit_s <= self.lease_hard_limit_s,
            "namenode.lease_soft_limit_s must not exceed lease_hard_limit_s",
        )
        _require(0 <= self.umask <= 0o777, "namenode.umask must be in [0, 0o777]")
        _require(self.edits_fetch_bytes_max >= 64 * KiB,
                 "namenode.edits_fetch_bytes_max must be >= 64 KiB")
        _require(self.edits_fetch_wait_max_s >= 0, "namenode.edits_fetch_wait_max_s must be >= 0")
        _require(self.peer_check_timeout_s > 0, "namenode.peer_check_timeout_s must be > 0")
        _require(self.resource_free_bytes_min >= 0,
                 "namenode.resource_free_bytes_min must be >= 0")
        _require(self.resource_check_interval_s > 0,
                 "namenode.resource_check_interval_s must be > 0")
        _require(self.password_checks_max >= 1, "namenode.password_checks_max must be >= 1")
        _require(self.password_checks_per_peer_max >= 1,
                 "namenode.password_checks_per_peer_max must be >= 1")
        _require(
            1 <= self.login_failures_throttle <= self.login_failures_lockout,
            "namenode.login_failures_throttle must be in [1, login_failures_lockout]",
        )
        _require(self.login_throttle_delay_s > 0, "namenode.login_throttle_delay_s must be > 0")
        _require(self.login_lockout_s >= 0, "namenode.login_lockout_s must be >= 0")
        _require(self.block_recovery_timeout_s > 0, "namenode.block_recovery_timeout_s must be > 0")
        _require(0 < self.standby_tail_wait_s < self.journal_call_timeout_s,
                 "namenode.standby_tail_wait_s must be in (0, journal_call_timeout_s)")
        _require(self.standby_tail_txns_max >= 1, "namenode.standby_tail_txns_max must be >= 1")
        _require(self.failover_safe_mode_extension_s >= 0,
                 "namenode.failover_safe_mode_extension_s must be >= 0")
        _require(self.topology_script_timeout_s > 0,
                 "namenode.topology_script_timeout_s must be > 0")
        _require(self.maintenance_min_replicas >= 1,
                 "namenode.maintenance_min_replicas must be >= 1")
        _require(self.decommission_check_interval_s > 0,
                 "namenode.decommission_check_interval_s must be > 0")
        _require(self.balancer_move_timeout_s > 0, "namenode.balancer_move_timeout_s must be > 0")


@dataclass(frozen=True)
class BackupNodeConfig:
    name_dir: str = setting("", "The BackupNode's storage directory, HDFS layout (--name-dir).")
    rpc_address: str = setting(
        "127.0.0.1:50100", "Where the BackupNode serves, and serves clients once promoted."
    )
    namenode: str = setting("", "The NameNode it follows, host:port (--namenode).")
    fetch_batch_max: int = setting(
        16384, "Most edits one fetch_edits asks for (measured: see docs/benchmarks.md)."
    )
    fetch_wait_s: float = setting(
        1.0, "Long poll of a caught-up fetch: the NameNode answers at its next sync or then."
    )
    fetch_retry_max_s: float = setting(
        5.0, "Longest pause between fetches while the NameNode is unreachable (backoff cap)."
    )
    checkpoint_period_s: float = setting(3600.0, "Checkpoint at least this often (HDFS default).")
    checkpoint_txns: int = setting(1_000_000, "... or after this many transactions.")
    checkpoint_check_interval_s: float = setting(60.0, "How often the checkpointer looks.")
    images_retained: int = setting(2, "fsimages the backup keeps (with the edits after them).")
    takeover_probe_timeout_s: float = setting(
        2.0, "transitionToActive refuses if the NameNode answers a ping within this time."
    )
    fencing_methods: tuple[str, ...] = setting(
        (),
        "How a takeover fences the old NameNode, tried in order until one succeeds: "
        "shell(COMMAND) or kill(NAME_DIR); none configured or none succeeding refuses it.",
    )
    fencing_timeout_s: float = setting(
        30.0, "Deadline of one fencing method (a shell command is killed after it)."
    )
    http_address: str = setting(
        "", "Where the BackupNode serves HTTP (its status page and /metrics), host:port; "
        "empty: no HTTP server."
    )

    def validate(self) -> None:
        _require(self.fetch_batch_max >= 1, "backupnode.fetch_batch_max must be >= 1")
        _require(self.fetch_wait_s >= 0, "backupnode.fetch_wait_s must be >= 0")
        _require(self.fetch_retry_max_s > 0, "backupnode.fetch_retry_max_s must be > 0")
        _require(self.checkpoint_txns >= 1, "backupnode.checkpoint_txns must be >= 1")
        _require(self.images_retained >= 1, "backupnode.images_retained must be >= 1")
        _require(self.fencing_timeout_s > 0, "backupnode.fencing_timeout_s must be > 0")


@dataclass(frozen=True)
class DataNodeConfig:
    data_dir: str = setting("", "Where the DataNode keeps its blocks (--data-dir).")
    rpc_address: str = setting(
        "127.0.0.1:9866", "Where the DataNode serves block reads and writes (--rpc-address)."
    )
    namenode: str = setting(
        "", "NameNode address(es), host:port[,host:port] tried in order (--namenode)."
    )
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

    def validate(self) -> None:
        _require(
            4 * KiB <= self.checksum_chunk_bytes <= 1 * MiB,
            "datanode.checksum_chunk_bytes must be in [4 KiB, 1 MiB]",
        )
        _require(self.scan_bytes_per_s > 0, "datanode.scan_bytes_per_s must be > 0")
        _require(self.scan_period_s > 0, "datanode.scan_period_s must be > 0")
        _require(self.reserved_bytes >= 0, "datanode.reserved_bytes must be >= 0")
        _require(
            self.replication_concurrency_max >= 1,
            "datanode.replication_concurrency_max must be >= 1",
        )
        _require(self.replication_queue_max >= 0, "datanode.replication_queue_max must be >= 0")
        _require(self.report_timeout_s > 0, "datanode.report_timeout_s must be > 0")
        _require(self.namenode_retry_max_s > 0, "datanode.namenode_retry_max_s must be > 0")
        _require(self.namenode_call_timeout_s > 0, "datanode.namenode_call_timeout_s must be > 0")
        _require(
            self.directory_scan_interval_s > 0, "datanode.directory_scan_interval_s must be > 0"
        )
        _require(
            self.directory_scan_batch_dirs >= 1, "datanode.directory_scan_batch_dirs must be >= 1"
        )
        _require(self.block_recovery_max >= 1, "datanode.block_recovery_max must be >= 1")
        _require(self.capacity_bytes >= 0, "datanode.capacity_bytes must be >= 0")


@dataclass(frozen=True)
class JournalNodeConfig:
    journal_dir: str = setting("", "Where the JournalNode keeps its journals (--journal-dir).")
    rpc_address: str = setting(
        "127.0.0.1:8485", "Where the JournalNode serves (--rpc-address; HDFS's port)."
    )
    secret_file: str = setting(
        "",
        "File holding the journal secret: a JournalNode accepts only callers presenting it "
        "(its writer, tailing readers); every process that talks to JournalNodes reads it "
        "from here. Required by `xdfs journalnode`.",
    )
    recovery_bytes_max: int = setting(
        256 * MiB, "Largest segment an accept_recovery upload may carry."
    )
    read_wait_max_s: float = setting(
        5.0, "Longest a caught-up tailing reader's get_journaled_edits waits for new edits."
    )
    sync_interval_s: float = setting(
        30.0, "How often a JournalNode fetches the finalized segments it misses from a peer."
    )
    read_bytes_max: int = setting(
        1 * MiB,
        "Most record bytes one get_journaled_edits answer carries (below rpc.frame_bytes_max).",
    )
    http_address: str = setting(
        "", "Where the JournalNode serves HTTP (its status page and /metrics), host:port "
        "(HDFS: 8480); empty: no HTTP server."
    )

    def validate(self) -> None:
        _require(self.recovery_bytes_max >= 1 * MiB,
                 "journalnode.recovery_bytes_max must be >= 1 MiB")
        _require(self.read_bytes_max >= 64 * KiB, "journalnode.read_bytes_max must be >= 64 KiB")
        _require(self.sync_interval_s > 0, "journalnode.sync_interval_s must be > 0")
        _require(self.read_wait_max_s >= 0, "journalnode.read_wait_max_s must be >= 0")


@dataclass(frozen=True)
class HaConfig:
    """Automatic failover (``xdfs zkfc``) and the NameNode ids ``xdfs admin`` HA commands
    take. Values are HDFS's defaults where HDFS has one, shortened where noted."""

    nameservice: str = setting(
        "xdfs", "Name of the HA namespace; the controllers' znodes live under "
        "zookeeper_parent/<nameservice>."
    )
    namenodes: dict[str, str] = field(default_factory=dict, metadata={"doc": (
        "NameNode id -> host:port of its RPC server, a TOML table: {nn1 = \"h1:8020\", "
        "nn2 = \"h2:8020\"}; `xdfs admin -getServiceState nn1` and `xdfs zkfc --id nn1` "
        "read it."
    )})
    automatic_failover: bool = setting(
        False, "Controllers (xdfs zkfc) fail over by themselves; manual -transitionToActive/"
        "-transitionToStandby are then refused (HDFS without --forcemanual)."
    )
    zookeeper_quorum: str = setting(
        "", "ZooKeeper servers, host:port[,host:port...] (xdfs zkfc needs it)."
    )
    zookeeper_parent: str = setting("/xdfs-ha", "Parent znode of every nameservice's znodes.")
    zookeeper_session_timeout_s: float = setting(
        5.0, "ZooKeeper session timeout: a controller that died (or was cut off) loses the "
        "election after this long (the server clamps it to [2, 20] of its ticks)."
    )
    zookeeper_connect_timeout_s: float = setting(
        15.0, "How long a controller (or xdfs admin) waits for its first ZooKeeper session."
    )
    health_check_interval_s: float = setting(
        1.0, "A controller asks its NameNode's monitor_health this often."
    )
    health_check_timeout_s: float = setting(
        2.0, "Deadline of one health check (connect included); a paused NameNode fails it."
    )
    health_failures_max: int = setting(
        2, "Consecutive failed health checks (no answer in time) before the NameNode counts "
        "as not responding and its controller leaves the election; an answer saying "
        "unhealthy counts at once."
    )
    graceful_fence_timeout_s: float = setting(
        2.0, "Deadline of a transition_to_standby call: to an old active before it is fenced "
        "by fencing_methods, and to the local NameNode when its controller steps down."
    )
    transition_timeout_s: float = setting(
        60.0, "Deadline of transition_to_active on the local NameNode (journal recovery)."
    )
    fencing_methods: tuple[str, ...] = setting(
        (), "Run when an old active did not step down when asked, in order until one "
        "succeeds: shell(COMMAND) or kill(NAME_DIR). None: rely on the journal epoch."
    )
    fencing_timeout_s: float = setting(30.0, "Deadline of one fencing method.")
    retry_after_failure_s: float = setting(
        1.0, "A controller that failed to fence or to make its NameNode active leaves the "
        "election for this long, so another may try."
    )
    failover_timeout_s: float = setting(
        30.0, "Graceful failover (xdfs admin -failover): how long the old active stays out "
        "of the election and the target waits to win it."
    )
    zkfc_rpc_address: str = setting(
        "127.0.0.1:8019", "Where a controller serves its zkfc RPC (--rpc-address; HDFS's port)."
    )
    zkfc_secret_file: str = setting(
        "", "File holding the controllers' shared secret: controllers and `xdfs admin "
        "-failover` present it to each other. Required by `xdfs zkfc`."
    )
    webhdfs: dict[str, str] = field(default_factory=dict, metadata={"doc": (
        "NameNode id -> host:port of its WebHDFS gateway, a TOML table (`xdfs dev --ha` "
        "writes it): every NameNode serves one, a standby answering StandbyException; "
        "xdfs.client.webhdfs_ha finds the active one."
    )})
    zkfc_http_address: str = setting(
        "", "Where a controller serves HTTP (its status page and /metrics), host:port; "
        "empty: no HTTP server."
    )

    def validate(self) -> None:
        for key in ("zookeeper_session_timeout_s", "zookeeper_connect_timeout_s",
                    "health_check_interval_s", "health_check_timeout_s",
                    "graceful_fence_timeout_s", "transition_timeout_s", "fencing_timeout_s",
                    "failover_timeout_s"):
            _require(getattr(self, key) > 0, f"ha.{key} must be > 0")
        _require(self.retry_after_failure_s >= 0, "ha.retry_after_failure_s must be >= 0")
        _require(self.health_failures_max >= 1, "ha.health_failures_max must be >= 1")
        _require(bool(self.nameservice) and "/" not in self.nameservice,
                 "ha.nameservice must be a non-empty name without '/'")
        _require(self.zookeeper_parent.startswith("/") and not self.zookeeper_parent.endswith("/"),
                 "ha.zookeeper_parent must be an absolute znode path (no trailing '/')")
        for nn_id, address in self.namenodes.items():
            _require(bool(nn_id) and "/" not in nn_id and bool(address),
                     f"ha.namenodes: {nn_id!r} = {address!r} is not id = \"host:port\"")

    def nameservices(self) -> dict[str, list[str]]:
        """``{nameservice: NameNode addresses}`` when ha.namenodes is set (for
        ``xdfs://NAMESERVICE`` URIs), else empty."""
        return {self.nameservice: list(self.namenodes.values())} if self.namenodes else {}

    def default_fs(self) -> str:
        """``xdfs://NAMESERVICE`` when ha.namenodes is set, else empty."""
        return f"xdfs://{self.nameservice}" if self.namenodes else ""


@dataclass(frozen=True)
class HttpConfig:
    auth: str = setting(
        "credentials",
        "How HTTP requests authenticate: credentials (a delegation token, a Bearer token or "
        "HTTP Basic with an xdfs user) or simple (also trust user.name=NAME unchecked: "
        "HDFS's insecure default, for trusted networks only).",
    )
    redirect_token_lifetime_s: float = setting(
        600.0,
        "Lifetime of the token a NameNode puts in a redirect to a DataNode (the DataNode "
        "acts as the user with it, as HDFS's delegation parameter).",
    )
    body_bytes_max: int = setting(
        1 * MiB, "Largest request body read whole (forms, JSON); file data is streamed."
    )
    data_chunk_bytes: int = setting(
        1 * MiB, "Bytes a DataNode moves per step when it streams file data over HTTP."
    )
    password_cache_s: float = setting(
        300.0,
        "HTTP Basic credentials checked once are trusted this long without a new scrypt "
        "check (kept in memory, HMAC-keyed; a password change ends it). 0: check every time.",
    )
    password_cache_entries_max: int = setting(
        10000, "Most HTTP Basic credentials the NameNode remembers (the oldest go first)."
    )

    def validate(self) -> None:
        from xdfs.http.auth import check_mode

        check_mode(self.auth)
        _require(self.redirect_token_lifetime_s > 0, "http.redirect_token_lifetime_s must be > 0")
        _require(self.body_bytes_max >= 1 * KiB, "http.body_bytes_max must be >= 1 KiB")
        _require(self.data_chunk_bytes >= 4 * KiB, "http.data_chunk_bytes must be >= 4 KiB")
        _require(self.password_cache_s >= 0, "http.password_cache_s must be >= 0")
        _require(self.password_cache_entries_max >= 0,
                 "http.password_cache_entries_max must be >= 0")


@dataclass(frozen=True)
class ClientConfig:
    fs: str = setting("", "File system URI, xdfs://host:port[,host:port...] (or XDFS_FS).")
    user: str = setting("", "User name to log in as (or XDFS_USER).")
    password: str = setting("", "Password of user (or XDFS_PASSWORD).")
    token: str = setting("", "A token from a previous login, used instead of a password.")
    block_write_tries: int = setting(
        3, "Times a block is sent to fresh targets when every target of it failed."
    )
    replace_failed_target: bool = setting(
        True, "Ask the NameNode for a replacement when one target of a block fails mid-write."
    )
    read_rounds: int = setting(
        3, "Rounds over a block's replicas (refetching locations) before a read fails."
    )
    recover_lease_retry_interval_s: float = setting(
        5.0, "`xdfs debug -recoverLease -retries N` waits this long between its calls."
    )
    webhdfs: str = setting(
        "", "host:port of the cluster's WebHDFS gateway (for REST tools; `xdfs dev` sets it)."
    )
    logservice: str = setting(
        "", "Log service instances, host:port[,host:port...] (`xdfs log`, LogClient)."
    )
    logservice_password: str = setting(
        "", "The log service secret (its logservice.secret_file's contents)."
    )
    failover_probe_after_s: float = setting(
        2.0, "With several NameNode addresses: a call unanswered this long makes the client "
        "ask every NameNode for its HA state (each ask has this deadline, repeated this "
        "often); when another one has become active, the call is repeated there at once "
        "instead of waiting for rpc.call_timeout_s (a paused active). 0: never ask."
    )

    def validate(self) -> None:
        _require(self.failover_probe_after_s >= 0, "client.failover_probe_after_s must be >= 0")


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
    logservice_only: bool = setting(
        False, "Start the log service alone (ZooKeeper, 3 storage nodes, an instance), no "
        "file system (--logservice-only)."
    )


@dataclass(frozen=True)
class LogServiceConfig:
    zookeeper_quorum: str = setting(
        "", "ZooKeeper host:port[,host:port...] holding the logs' metadata (seeds 002, 004)."
    )
    zookeeper_root: str = setting("/xdfs-log", "Parent znode of every log's metadata.")
    zookeeper_session_timeout_s: float = setting(
        10.0, "ZooKeeper session timeout of a log writer (its writer lock lives that long)."
    )
    storage_nodes: tuple[str, ...] = setting(
        (), "JournalNodes (host:port) whose `ledger` service stores the logs' ledgers."
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
        _require(1 <= a <= w == e, "logservice: need 1 <= ack_quorum <= write_quorum "
                 "= ensemble_size")
        _require(self.ledger_entries_max >= 1 and self.ledger_bytes_max >= 1
                 and self.ledger_age_max_s > 0, "logservice: ledger bounds must be positive")
        for name in ("zookeeper_session_timeout_s", "add_timeout_s", "call_timeout_s",
                     "reclaim_interval_s", "keeper_interval_s", "heartbeat_interval_s",
                     "node_dead_after_s", "copy_timeout_s"):
            _require(getattr(self, name) > 0, f"logservice.{name} must be > 0")
        _require(self.read_wait_max_s >= 0, "logservice.read_wait_max_s must be >= 0")
        _require(self.read_bytes_max >= 1, "logservice.read_bytes_max must be >= 1")


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
        _require(0 < self.threshold_percent < 100, "balancer.threshold_percent in (0, 100)")
        _require(self.bandwidth_bytes_per_s > 0, "balancer.bandwidth_bytes_per_s must be > 0")
        _require(self.moves_in_flight_max >= 1, "balancer.moves_in_flight_max must be >= 1")
        _require(self.moves_per_node_max >= 1, "balancer.moves_per_node_max must be >= 1")
        _require(self.iteration_bytes_max > 0, "balancer.iteration_bytes_max must be > 0")
        _require(self.iteration_wait_s >= 0, "balancer.iteration_wait_s must be >= 0")
        _require(self.idle_iterations_max >= 1, "balancer.idle_iterations_max must be >= 1")
        _require(self.lock_renew_interval_s > 0, "balancer.lock_renew_interval_s must be > 0")


@dataclass(frozen=True)
class XdfsConfig:
    rpc: RpcConfig = field(default_factory=RpcConfig)
    namenode: NameNodeConfig = field(default_factory=NameNodeConfig)
    datanode: DataNodeConfig = field(default_factory=DataNodeConfig)
    backupnode: BackupNodeConfig = field(default_factory=BackupNodeConfig)
    journalnode: JournalNodeConfig = field(default_factory=JournalNodeConfig)
    ha: HaConfig = field(default_factory=HaConfig)
    client: ClientConfig = field(default_factory=ClientConfig)
    dev: DevConfig = field(default_factory=DevConfig)
    http: HttpConfig = field(default_factory=HttpConfig)
    logservice: LogServiceConfig = field(default_factory=LogServiceConfig)
    balancer: BalancerConfig = field(default_factory=BalancerConfig)

    def validate(self) -> XdfsConfig:
        self.rpc.validate()
        self.namenode.validate()
        self.datanode.validate()
        self.backupnode.validate()
        self.journalnode.validate()
        self.ha.validate()
        self.http.validate()
        self.logservice.validate()
        self.client.validate()
        self.balancer.validate()
        return self


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def _sections() -> dict[str, type[Any]]:
    """Section name -> its dataclass, read off XdfsConfig so there is one list of sections."""
    defaults = XdfsConfig()
    return {f.name: type(getattr(defaults, f.name)) for f in dataclasses.fields(XdfsConfig)}


def _parse_scalar(text: str) -> Any:
    """Parse a -D value as a TOML scalar (number, boolean, quoted string); else a string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def parse_overrides(items: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Turn ``["rpc.call_timeout_s=5", ...]`` into ``{"rpc": {"call_timeout_s": 5}}``."""
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        section, dot, name = key.strip().partition(".")
        if not sep or not dot or not section or not name:
            raise ConfigError(f"override {item!r} is not of the form section.key=value")
        out.setdefault(section, {})[name] = _parse_scalar(value.strip())
    return out


def build_config(layers: Iterable[Mapping[str, Any]]) -> XdfsConfig:
    """Merge mappings (earliest first) over the defaults and validate the result."""
    sections = _sections()
    merged: dict[str, dict[str, Any]] = {}
    for layer in layers:
        for section, values in layer.items():
            cls = sections.get(section)
            if cls is None:
                raise ConfigError(f"unknown config section [{section}]")
            if not isinstance(values, Mapping):
                raise ConfigError(f"config section [{section}] must be a table")
            known = {f.name for f in dataclasses.fields(cls)}
            for key in values:
                if key not in known:
                    raise ConfigError(f"unknown config key {section}.{key}")
            merged.setdefault(section, {}).update(values)
    built: dict[str, Any] = {}
    for section, values in merged.items():
        try:
            built[section] = msgspec.convert(values, sections[section], strict=False)
        except msgspec.ValidationError as exc:
            raise ConfigError(f"config [{section}]: {exc}") from None
    return XdfsConfig(**built).validate()


def read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path}: {exc}") from None


def load_config(
    conf_path: str | os.PathLike[str] | None = None,
    overrides: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
) -> XdfsConfig:
    """The effective configuration: defaults < TOML file < environment < ``-D`` overrides."""
    env = os.environ if env is None else env
    layers: list[Mapping[str, Any]] = []
    path = conf_path or env.get(CONF_ENV)
    if path:
        layers.append(read_toml(path))
    client_env = {
        key: env[var]
        for key, var in (("fs", "XDFS_FS"), ("user", "XDFS_USER"), ("password", "XDFS_PASSWORD"))
        if env.get(var)
    }
    if client_env:
        layers.append({"client": client_env})
    layers.append(parse_overrides(overrides))
    return build_config(layers)


def config_as_dict(config: XdfsConfig) -> dict[str, dict[str, Any]]:
    return {f.name: dataclasses.asdict(getattr(config, f.name)) for f in dataclasses.fields(config)}


def config_as_toml(config: XdfsConfig) -> str:
    import tomli_w

    return tomli_w.dumps(config_as_dict(config))


def config_reference_markdown() -> str:
    """The table of every key, default and meaning (the source of docs/configuration.md)."""
    lines = ["| key | default | meaning |", "|---|---|---|"]
    defaults = XdfsConfig()
    for section_field in dataclasses.fields(XdfsConfig):
        section = getattr(defaults, section_field.name)
        for f in dataclasses.fields(section):
            value = getattr(section, f.name)
            shown = _toml_literal(value)
            lines.append(f"| `{section_field.name}.{f.name}` | `{shown}` | {f.metadata['doc']} |")
    return "\n".join(lines) + "\n"


def _toml_literal(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def write_toml(path: Path, data: Mapping[str, Any]) -> None:
    """Write a small TOML file atomically and durably (temp file, fsync, rename, fsync of
    the directory): ``xdfs dev`` keeps its superuser's password in one."""
    import tomli_w

    from xdfs.common.files import atomic_write

    atomic_write(path, tomli_w.dumps(dict(data)).encode())
