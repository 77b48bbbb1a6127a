"""Sections of high availability: ``[journalnode]`` (the quorum of edits) and ``[ha]``
(automatic failover and NameNode ids)."""

from __future__ import annotations

from dataclasses import dataclass, field

from xdfs.config.base import KiB, MiB, require, setting


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
        require(self.recovery_bytes_max >= 1 * MiB,
                 "journalnode.recovery_bytes_max must be >= 1 MiB")
        require(self.read_bytes_max >= 64 * KiB, "journalnode.read_bytes_max must be >= 64 KiB")
        require(self.sync_interval_s > 0, "journalnode.sync_interval_s must be > 0")
        require(self.read_wait_max_s >= 0, "journalnode.read_wait_max_s must be >= 0")


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
    zookeeper_secret_file: str = setting(
        "", "File holding the ZooKeeper secret (mode 600): controllers and `xdfs admin "
        "-failover` log in to ZooKeeper with it (digest) and every znode they create under "
        "zookeeper_parent carries an ACL giving only its holders any right. Required by "
        "`xdfs zkfc`; the same file for every controller of every nameservice under one "
        "zookeeper_parent."
    )
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
    controllers: dict[str, str] = field(default_factory=dict, metadata={"doc": (
        "NameNode id -> host:port of its controller's zkfc RPC, a TOML table (`xdfs dev --ha` "
        "writes it): `xdfs zkfc --id ID` serves there, and a controller or `xdfs admin "
        "-failover` sends the controllers' secret only to these addresses, never to one "
        "only ZooKeeper names. Graceful failover needs it."
    )})
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
            require(getattr(self, key) > 0, f"ha.{key} must be > 0")
        require(self.retry_after_failure_s >= 0, "ha.retry_after_failure_s must be >= 0")
        require(self.health_failures_max >= 1, "ha.health_failures_max must be >= 1")
        require(bool(self.nameservice) and "/" not in self.nameservice,
                 "ha.nameservice must be a non-empty name without '/'")
        require(self.zookeeper_parent.startswith("/") and not self.zookeeper_parent.endswith("/"),
                 "ha.zookeeper_parent must be an absolute znode path (no trailing '/')")
        for nn_id, address in self.namenodes.items():
            require(bool(nn_id) and "/" not in nn_id and bool(address),
                     f"ha.namenodes: {nn_id!r} = {address!r} is not id = \"host:port\"")
        for nn_id, address in self.controllers.items():
            require(nn_id in self.namenodes and bool(address),
                     f"ha.controllers: {nn_id!r} = {address!r} is not an id of ha.namenodes "
                     "= \"host:port\"")

    def nameservices(self) -> dict[str, list[str]]:
        """``{nameservice: NameNode addresses}`` when ha.namenodes is set (for
        ``xdfs://NAMESERVICE`` URIs), else empty."""
        return {self.nameservice: list(self.namenodes.values())} if self.namenodes else {}

    def default_fs(self) -> str:
        """``xdfs://NAMESERVICE`` when ha.namenodes is set, else empty."""
        return f"xdfs://{self.nameservice}" if self.namenodes else ""

