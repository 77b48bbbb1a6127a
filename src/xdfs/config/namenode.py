"""Sections of the metadata servers: ``[namenode]`` and ``[backupnode]``."""

from __future__ import annotations

from dataclasses import dataclass

from xdfs.config.base import KiB, MiB, require, setting


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
        "Failed logins (per user and client host, and per client host) after which each next "
        "attempt must wait login_throttle_delay_s, doubling with every further failure "
        "(LoginThrottled).",
    )
    login_throttle_delay_s: float = setting(1.0, "The first wait of a throttled login.")
    login_failures_lockout: int = setting(
        30, "Failed logins after which the user on that host, or the host, is locked out "
        "(LockedOut)."
    )
    login_failures_user_lockout: int = setting(
        300, "Failed logins of one user from all hosts after which the user is locked out "
        "on every host but the ones it logged in from within login_known_host_s."
    )
    login_known_host_s: float = setting(
        604800.0, "A host a user logged in from with its password stays one of its known "
        "hosts this long (failures from other hosts never lock it out there)."
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
    journal_lag_max_s: float = setting(
        2.0, "A JournalNode still not done with a batch this long after it was sent (while a "
        "majority went on) is left out of the quorum until the next segment: a slow or hung "
        "disk there never holds the writer, nor builds a backlog."
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
    password_cache_s: float = setting(
        300.0,
        "A user's password checked once at a handshake or login is trusted this long "
        "without a new scrypt check (kept in memory, HMAC-keyed; a wrong password, a "
        "password change or a removed user misses). 0: check every time.",
    )
    password_cache_entries_max: int = setting(
        10000, "Most checked passwords the NameNode remembers (the oldest go first)."
    )

    def validate(self) -> None:
        require(self.heartbeat_interval_s > 0, "namenode.heartbeat_interval_s must be > 0")
        require(self.walk_slice_inodes >= 1, "namenode.walk_slice_inodes must be >= 1")
        require(self.image_writer_timeout_s > 0, "namenode.image_writer_timeout_s must be > 0")
        require(self.fsck_rate_inodes_per_s >= 0,
                 "namenode.fsck_rate_inodes_per_s must be >= 0")
        require(self.retry_cache_expiry_s > 0, "namenode.retry_cache_expiry_s must be > 0")
        require(self.password_cache_s >= 0, "namenode.password_cache_s must be >= 0")
        require(self.password_cache_entries_max >= 0,
                 "namenode.password_cache_entries_max must be >= 0")
        require(self.retry_cache_entries_max > 0, "namenode.retry_cache_entries_max must be > 0")
        require(self.heartbeat_misses_dead >= 1, "namenode.heartbeat_misses_dead must be >= 1")
        require(self.block_report_batch_max >= 1, "namenode.block_report_batch_max must be >= 1")
        require(self.min_replication >= 1, "namenode.min_replication must be >= 1")
        require(
            0.0 <= self.safe_mode_threshold <= 1.0,
            "namenode.safe_mode_threshold must be in [0, 1]",
        )
        require(self.edits_buffer_bytes >= 4 * KiB, "namenode.edits_buffer_bytes >= 4 KiB")
        require(self.images_retained >= 1, "namenode.images_retained must be >= 1")
        require(
            1 <= self.default_replication <= self.replication_max,
            "namenode.default_replication must be in [1, replication_max]",
        )
        require(
            self.default_block_size_bytes >= self.block_size_min_bytes,
            "namenode.default_block_size_bytes below block_size_min_bytes",
        )
        require(
            self.lease_soft_limit_s <= self.lease_hard_limit_s,
            "namenode.lease_soft_limit_s must not exceed lease_hard_limit_s",
        )
        require(0 <= self.umask <= 0o777, "namenode.umask must be in [0, 0o777]")
        require(self.edits_fetch_bytes_max >= 64 * KiB,
                 "namenode.edits_fetch_bytes_max must be >= 64 KiB")
        require(self.edits_fetch_wait_max_s >= 0, "namenode.edits_fetch_wait_max_s must be >= 0")
        require(self.peer_check_timeout_s > 0, "namenode.peer_check_timeout_s must be > 0")
        require(self.resource_free_bytes_min >= 0,
                 "namenode.resource_free_bytes_min must be >= 0")
        require(self.resource_check_interval_s > 0,
                 "namenode.resource_check_interval_s must be > 0")
        require(self.password_checks_max >= 1, "namenode.password_checks_max must be >= 1")
        require(self.password_checks_per_peer_max >= 1,
                 "namenode.password_checks_per_peer_max must be >= 1")
        require(
            1 <= self.login_failures_throttle <= self.login_failures_lockout,
            "namenode.login_failures_throttle must be in [1, login_failures_lockout]",
        )
        require(self.login_failures_user_lockout >= self.login_failures_lockout,
                 "namenode.login_failures_user_lockout must be >= login_failures_lockout")
        require(self.login_known_host_s >= 0, "namenode.login_known_host_s must be >= 0")
        require(self.login_throttle_delay_s > 0, "namenode.login_throttle_delay_s must be > 0")
        require(self.login_lockout_s >= 0, "namenode.login_lockout_s must be >= 0")
        require(self.block_recovery_timeout_s > 0, "namenode.block_recovery_timeout_s must be > 0")
        require(self.journal_lag_max_s > 0, "namenode.journal_lag_max_s must be > 0")
        require(0 < self.standby_tail_wait_s < self.journal_call_timeout_s,
                 "namenode.standby_tail_wait_s must be in (0, journal_call_timeout_s)")
        require(self.standby_tail_txns_max >= 1, "namenode.standby_tail_txns_max must be >= 1")
        require(self.failover_safe_mode_extension_s >= 0,
                 "namenode.failover_safe_mode_extension_s must be >= 0")
        require(self.topology_script_timeout_s > 0,
                 "namenode.topology_script_timeout_s must be > 0")
        require(self.maintenance_min_replicas >= 1,
                 "namenode.maintenance_min_replicas must be >= 1")
        require(self.decommission_check_interval_s > 0,
                 "namenode.decommission_check_interval_s must be > 0")
        require(self.balancer_move_timeout_s > 0, "namenode.balancer_move_timeout_s must be > 0")


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
        require(self.fetch_batch_max >= 1, "backupnode.fetch_batch_max must be >= 1")
        require(self.fetch_wait_s >= 0, "backupnode.fetch_wait_s must be >= 0")
        require(self.fetch_retry_max_s > 0, "backupnode.fetch_retry_max_s must be > 0")
        require(self.checkpoint_txns >= 1, "backupnode.checkpoint_txns must be >= 1")
        require(self.images_retained >= 1, "backupnode.images_retained must be >= 1")
        require(self.fencing_timeout_s > 0, "backupnode.fencing_timeout_s must be > 0")

