"""Sections of the wire and of clients: ``[rpc]`` (frames, calls, retries), ``[http]``
(the HTTP servers) and ``[client]`` (what ``xdfs`` commands connect to)."""

from __future__ import annotations

from dataclasses import dataclass

from xdfs.config.base import KiB, MiB, require, setting


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
    gc_young_objects: int = setting(
        20_000,
        "A server process's young garbage collection runs after this many new container "
        "objects (Python's default is 700, which made the collector a quarter of a "
        "NameNode's CPU on creates); 0 keeps Python's default.",
    )
    server_malloc_keep_bytes: int = setting(
        256 * MiB,
        "Freed memory a server process's C allocator (glibc) keeps for reuse instead of "
        "handing it back to the kernel (a fresh page costs a page fault: see "
        "xdfs.common.memory); 0 keeps glibc's defaults. Clients are never changed.",
    )
    frames_per_turn: int = setting(
        8,
        "Frames of one read a server hands on in one event-loop turn; the rest wait for "
        "the next turn, reading paused meanwhile (0: all at once). A busy client's read "
        "can bring dozens of calls: handled in one go, they kept an edits flush's "
        "completion, and every other connection, waiting behind them.",
    )
    request_batch_bytes: int = setting(
        1 * KiB,
        "A client's requests made in one loop turn (callers woken by one batch of answers) "
        "are written as soon as this many bytes wait, the rest after them: the server "
        "starts on the first part while the client makes the next, instead of the two "
        "ends taking turns; 0 writes them all at the end of the turn. (A server writes "
        "the replies to one read together.)",
    )

    def validate(self) -> None:
        require(self.frame_bytes_max >= 64 * KiB, "rpc.frame_bytes_max must be >= 64 KiB")
        require(
            self.stream_chunk_bytes + 1 * KiB <= self.frame_bytes_max,
            "rpc.stream_chunk_bytes must leave 1 KiB of room under rpc.frame_bytes_max",
        )
        require(self.stream_window_chunks >= 1, "rpc.stream_window_chunks must be >= 1")
        require(self.server_malloc_keep_bytes >= 0, "rpc.server_malloc_keep_bytes must be >= 0")
        require(
            1 * KiB <= self.unauthenticated_frame_bytes_max <= self.frame_bytes_max,
            "rpc.unauthenticated_frame_bytes_max must be in [1 KiB, rpc.frame_bytes_max]",
        )
        require(self.unauthenticated_idle_timeout_s > 0,
                 "rpc.unauthenticated_idle_timeout_s must be > 0")
        require(self.partial_frame_timeout_s > 0, "rpc.partial_frame_timeout_s must be > 0")
        require(self.tries_per_address >= 1, "rpc.tries_per_address must be >= 1")
        require(self.inflight_per_connection_max >= 1, "rpc.inflight_per_connection_max >= 1")
        require(
            bool(self.tls_cert_file) == bool(self.tls_key_file),
            "rpc.tls_cert_file and rpc.tls_key_file go together",
        )
        require(self.slow_call_s > 0, "rpc.slow_call_s must be > 0")
        require(self.slow_calls_kept >= 0, "rpc.slow_calls_kept must be >= 0")
        require(self.loop_lag_interval_s > 0, "rpc.loop_lag_interval_s must be > 0")
        require(self.gc_young_objects >= 0, "rpc.gc_young_objects must be >= 0")
        require(self.request_batch_bytes >= 0, "rpc.request_batch_bytes must be >= 0")
        require(self.frames_per_turn >= 0, "rpc.frames_per_turn must be >= 0")


#: Values of ``http.auth`` (what they admit: :mod:`xdfs.http.auth`).
AUTH_CREDENTIALS = "credentials"
AUTH_SIMPLE = "simple"
AUTH_MODES = (AUTH_CREDENTIALS, AUTH_SIMPLE)


@dataclass(frozen=True)
class HttpConfig:
    auth: str = setting(
        AUTH_CREDENTIALS,
        "How HTTP requests authenticate: credentials (a delegation token, a Bearer token or "
        "HTTP Basic with an xdfs user) or simple (also trust user.name=NAME unchecked: "
        "HDFS's insecure default, for trusted networks only).",
    )
    redirect_token_lifetime_s: float = setting(
        600.0,
        "Lifetime of the token in the URL of a WebHDFS CREATE or APPEND redirect: good for "
        "that write of that file through a DataNode, which exchanges it for a token of the "
        "user that expires with it.",
    )
    read_url_lifetime_s: float = setting(
        120.0,
        "Lifetime of the token in the URL of a WebHDFS OPEN or GETFILECHECKSUM redirect and "
        "of the web UI's Download link: it reads that one file and serves nothing else.",
    )
    connections_max: int = setting(
        1024, "Most HTTP connections one server holds open; more are closed at once."
    )
    connections_per_address_max: int = setting(
        128, "Most HTTP connections one source address holds open on one server."
    )
    header_timeout_s: float = setting(
        10.0, "An HTTP request whose headers have not all arrived this long after the "
        "connection opened (or the previous request ended) is dropped (slowloris).",
    )
    body_idle_timeout_s: float = setting(
        60.0, "An HTTP connection that sends no byte of a request body for this long is "
        "dropped (aiohttp's read timeout).",
    )
    heavy_calls_per_user_max: int = setting(
        2, "WebHDFS listings (LISTSTATUS, LISTSTATUS_BATCH) one user runs at once on the "
        "NameNode; more wait their turn.",
    )
    list_batch_entries: int = setting(
        100, "Entries a WebHDFS LISTSTATUS builds and sends per step before it lets other "
        "requests run.",
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
        require(self.auth in AUTH_MODES,
                f"http.auth must be one of {', '.join(AUTH_MODES)}, not {self.auth!r}")
        require(self.redirect_token_lifetime_s > 0, "http.redirect_token_lifetime_s must be > 0")
        require(self.read_url_lifetime_s > 0, "http.read_url_lifetime_s must be > 0")
        require(self.connections_max >= 1, "http.connections_max must be >= 1")
        require(self.connections_per_address_max >= 1,
                "http.connections_per_address_max must be >= 1")
        require(self.header_timeout_s > 0, "http.header_timeout_s must be > 0")
        require(self.body_idle_timeout_s > 0, "http.body_idle_timeout_s must be > 0")
        require(self.heavy_calls_per_user_max >= 1, "http.heavy_calls_per_user_max must be >= 1")
        require(self.list_batch_entries >= 1, "http.list_batch_entries must be >= 1")
        require(self.body_bytes_max >= 1 * KiB, "http.body_bytes_max must be >= 1 KiB")
        require(self.data_chunk_bytes >= 4 * KiB, "http.data_chunk_bytes must be >= 4 KiB")
        require(self.password_cache_s >= 0, "http.password_cache_s must be >= 0")
        require(self.password_cache_entries_max >= 0,
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
    inline_calls: bool = setting(
        True, "The synchronous client (Client, fsspec) makes its metadata calls from the "
        "calling thread, without a hop to its event loop's thread and back, over blocking "
        "connections it keeps for that (as many per NameNode as calls were ever made at "
        "once); a small file written whole at close (one stream chunk) is uploaded to its "
        "DataNodes the same way. false: every call through the event loop's one connection "
        "(fewer connections, for a process with very many threads calling at once)."
    )
    inline_create_complete: bool = setting(
        True, "With inline_calls: a small file's create and complete are also made from "
        "the calling thread (two hops to the event loop's thread fewer per file). false: "
        "they go over the loop's one connection, where the NameNode reads the requests of "
        "many threads at once (fewer NameNode connections)."
    )

    def validate(self) -> None:
        require(self.failover_probe_after_s >= 0, "client.failover_probe_after_s must be >= 0")

