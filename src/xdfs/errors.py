"""The one exception hierarchy of xdfs, with stable wire codes.

Every expected failure is an ``XdfsError`` subclass carrying a ``code`` that never changes
meaning. Servers send ``(code, message)``; clients turn the code back into the same class
with :func:`error_from_code`, so ``except NotFound`` works across the network exactly as it
does in-process. File-system errors also derive from the matching builtin ``OSError``
subclass so callers such as fsspec and pandas see the exceptions they expect.

Codes are grouped: 1xx protocol/transport, 2xx security, 3xx namespace, 4xx cluster state,
5xx data path, 6xx log service, 9xx internal. Never reuse or renumber a code.
"""

from __future__ import annotations

from typing import ClassVar

_BY_CODE: dict[int, type[XdfsError]] = {}


class XdfsError(Exception):
    """Base of every expected xdfs failure."""

    code: ClassVar[int] = 900
    #: True when the same call may succeed if simply sent again (possibly elsewhere).
    retriable: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        code = cls.__dict__.get("code")
        if code is not None:
            other = _BY_CODE.get(code)
            assert other is None, f"error code {code} used by {other} and {cls}"
            _BY_CODE[code] = cls

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else self.__class__.__name__


_BY_CODE[XdfsError.code] = XdfsError


class InternalError(XdfsError):
    """A bug or an unexpected condition on the server; the message says where."""

    code = 901


class ConfigError(XdfsError):
    """Invalid configuration (unknown key, wrong type, impossible value)."""

    code = 902


class StorageError(XdfsError):
    """A local storage directory is missing, locked, corrupt or unwritable."""

    code = 903


# --- 1xx: protocol and transport -------------------------------------------------------


class RpcError(XdfsError):
    """Base of protocol and transport failures."""

    code = 100


class ProtocolError(RpcError):
    """The peer broke the wire protocol (bad frame, bad envelope, out-of-order message)."""

    code = 101


class FrameTooLarge(ProtocolError):
    """A frame's length prefix exceeds the configured limit."""

    code = 102


class BadRequest(RpcError):
    """The request body did not decode as the method's request type."""

    code = 103


class UnknownMethod(RpcError):
    """The server has no method of that name."""

    code = 104


class VersionMismatch(RpcError):
    """Client and server speak incompatible protocol versions."""

    code = 105


class WrongCluster(RpcError):
    """The peer belongs to another cluster (cluster ids differ)."""

    code = 106


class Unavailable(RpcError):
    """No server could be reached, or the connection was lost before an answer."""

    code = 107
    retriable = True


class ConnectionLost(Unavailable):
    """The connection closed while the call was in flight; it may or may not have run."""

    code = 108


class RpcTimeout(RpcError):
    """The call did not complete within its deadline; it may or may not have run."""

    code = 109
    retriable = True


class Superseded(RpcTimeout):
    """The server a call waited for stopped answering and another one became active: the
    call was abandoned (it may or may not have run there) and, being neither idempotent
    nor at most once, not repeated."""

    code = 695
    retriable = False


class Overloaded(RpcError):
    """The server refuses more work right now; try again later."""

    code = 110
    retriable = True


class StreamError(RpcError):
    """A bulk-data stream was cut, cancelled or violated its framing."""

    code = 111


class ChecksumError(StreamError):
    """Data failed its CRC32C check."""

    code = 112


class Cancelled(RpcError):
    """The peer cancelled the call."""

    code = 113


class NotActive(RpcError):
    """This server is not the active one (standby, backup, fenced); ask the next address."""

    code = 114
    retriable = True


class Standby(NotActive):
    """This NameNode is the standby of an HA pair: ask the other (clients move on at once)."""

    code = 409


# --- 2xx: security ---------------------------------------------------------------------


class SecurityError(XdfsError):
    """Base of authentication and authorisation failures."""

    code = 200


class NotAuthenticated(SecurityError):
    """A call arrived before a successful handshake."""

    code = 201


class AuthenticationFailed(SecurityError):
    """Wrong user name, password or token (the message never says which)."""

    code = 202


class TokenExpired(AuthenticationFailed):
    """The token was valid but has expired; log in again."""

    code = 203


class ServerNotAuthenticated(AuthenticationFailed):
    """The server did not prove that it knows the password or secret the client logged in
    with (a bad or missing SCRAM server signature): it may be an impersonator, and the
    client sends it nothing more."""

    code = 207


class AccessDenied(SecurityError, PermissionError):
    """The authenticated user lacks the permission the operation needs."""

    code = 204


class LoginThrottled(SecurityError):
    """Too many failed logins for this user or from this host: wait before trying again
    (the message says how long). No password was checked."""

    code = 205


class LockedOut(LoginThrottled):
    """So many failed logins that this user or host may not log in with a password for a
    while (the message says how long); tokens keep working."""

    code = 206


# --- 3xx: namespace --------------------------------------------------------------------


class NamespaceError(XdfsError):
    """Base of file-system namespace errors."""

    code = 300


class NotFound(NamespaceError, FileNotFoundError):
    code = 301


class AlreadyExists(NamespaceError, FileExistsError):
    code = 302


class NotADirectory(NamespaceError, NotADirectoryError):
    code = 303


class IsADirectory(NamespaceError, IsADirectoryError):
    code = 304


class DirectoryNotEmpty(NamespaceError, OSError):
    code = 305


class InvalidPath(NamespaceError, ValueError):
    """The path is not absolute, has empty or dot components, a NUL, or is too long."""

    code = 306


class InvalidArgument(NamespaceError, ValueError):
    code = 307


class LeaseError(NamespaceError):
    """The file is under construction by another client, or the lease was lost."""

    code = 308


class RecoveryInProgress(LeaseError):
    """The file's last block is being recovered (after a truncate, or a writer that went
    away): append, truncate or concat may succeed once it is closed (HDFS's
    RecoveryInProgressException)."""

    code = 640


# --- 4xx: cluster state ----------------------------------------------------------------


class ClusterStateError(XdfsError):
    code = 400


class SafeModeError(ClusterStateError):
    """The NameNode is in safe mode and refuses changes."""

    code = 401
    retriable = True


class NotEnoughReplicas(ClusterStateError):
    """Too few live DataNodes to place or confirm a block."""

    code = 402
    retriable = True


class UnknownDataNode(ClusterStateError):
    """The NameNode does not know this DataNode; it must register again."""

    code = 403


class Fenced(ClusterStateError):
    """A newer writer epoch exists; this writer must stop."""

    code = 404


class EditsPurged(ClusterStateError):
    """The edits asked for are older than what the NameNode keeps: bootstrap from its image."""

    code = 405


class TakeoverRefused(ClusterStateError):
    """A backup refuses to become active (its NameNode still answers, or it is not ready)."""

    code = 406


class JournalOutOfSync(ClusterStateError):
    """Records that do not follow a journal's last txid (a gap, an overlap, a reordering),
    or a segment call that does not match the journal's segments."""

    code = 407


class NotFormatted(ClusterStateError):
    """A journal (or storage directory) that was never formatted."""

    code = 408


# --- 5xx: data path --------------------------------------------------------------------


class DataError(XdfsError):
    code = 500


class BlockNotFound(DataError):
    code = 501


class CorruptReplica(DataError):
    code = 502


# --- 67x: quotas (hdfs dfs / dfsadmin) ------------------------------------------------


class QuotaExceeded(XdfsError, OSError):
    """An operation would take a directory tree over its quota; nothing changed (HDFS's
    QuotaExceededException)."""

    code = 670


class NSQuotaExceeded(QuotaExceeded):
    """Too many names (files and directories) under a directory with a name quota."""

    code = 671


class DSQuotaExceeded(QuotaExceeded):
    """Too many bytes (length times replication) under a directory with a space quota."""

    code = 672
# --- 63x: the WebHDFS gateway ---------------------------------------------------------


class Unsupported(XdfsError):
    """A WebHDFS operation this server does not provide (yet); nothing was changed.
    Answered as HDFS's UnsupportedOperationException."""

    code = 630
# --- 6xx: the replicated log service (600-629) -------------------------------------------


class LogError(XdfsError):
    """A failure of the replicated log service."""

    code = 600


class LedgerFenced(LogError):
    """The ledger was fenced: a newer writer recovered it, this writer may add no more."""

    code = 601


class LogFenced(LogError):
    """A newer writer opened the log: this writer is stale and must stop (seed 002)."""

    code = 602


class LedgerOutOfOrder(LogError):
    """Entries that do not continue what the storage node holds of the ledger exactly."""

    code = 603


class LsnOutOfRange(LogError):
    """A read from an LSN below the truncation point or past the end of the log."""

    code = 604


class LogNotFound(LogError, FileNotFoundError):
    code = 605


class LogExists(LogError, FileExistsError):
    code = 606


class NotEnoughStorageNodes(LogError):
    """Fewer live storage nodes than a ledger's ensemble or ack quorum needs."""

    code = 607
    retriable = True


class BadRecord(LogError, ValueError):
    """A log record that does not decode (magic, lengths or CRC wrong)."""

    code = 608


class NotLogWriter(LogError):
    """Another log service instance holds this log's writer lock: ask it (the message
    starts with its address, ``writer at HOST:PORT``)."""

    code = 610
    retriable = True

    @property
    def holder(self) -> str:
        return self.message.removeprefix("writer at ").split(" ", 1)[0]


class UnknownStorageNode(LogError):
    """An address that is not one of the configured storage nodes (``logservice.
    storage_nodes``) where a storage node was expected -- a ledger's ensemble or a copy
    source naming it was written by someone else: it is never dialled, no secret goes
    there."""

    code = 612


class NotKeeper(LogError):
    """This log service instance is not the keeper: send heartbeats to the one the message
    names (``keeper at HOST:PORT``; ``keeper at ?`` while none is elected)."""

    code = 611
    retriable = True

    @property
    def holder(self) -> str:
        # "keeper at HOST:PORT: why" (the colon after the address is not part of it)
        return self.message.removeprefix("keeper at ").split(" ", 1)[0].removesuffix(":")


# --- 710-729: DataNode lifecycle (decommission, maintenance, balancer, racks) ---------


class DataNodeAdminError(ClusterStateError):
    """Base of the DataNode lifecycle errors (hosts files, topology, balancer)."""

    code = 710


class DisallowedDataNode(DataNodeAdminError):
    """The DataNode is not in the include file, or was removed from it: it may not
    register (as HDFS's DisallowedDatanodeException)."""

    code = 711


class HostsFileError(DataNodeAdminError):
    """A hosts file (include, exclude, maintenance) or the topology file or script could
    not be read or parsed; nothing was changed."""

    code = 712


class BalancerRunning(DataNodeAdminError):
    """Another balancer holds /system/balancer.id (its lease is alive)."""

    code = 713


class MoveRefused(DataNodeAdminError):
    """A balancer move the NameNode will not schedule (the block changed, the target
    already holds it, the source does not, a move of it is under way ...)."""

    code = 714


# --- 730-739: metadata sharding ----------------------------------------------------


class ShardingError(ClusterStateError):
    """Base of the metadata sharding errors (slot map, routing, cross-shard commits)."""

    code = 730


class WrongShard(ShardingError):
    """This shard does not own the path's slot (Redis Cluster's MOVED): refresh the slot map
    and ask the owner. The message reads ``slot S owned by OWNER at epoch E``."""

    code = 731
    retriable = True

    @classmethod
    def of(cls, slot: int, owner: str, epoch: int) -> WrongShard:
        return cls(f"slot {slot} owned by {owner} at epoch {epoch}")

    def _field(self, index: int) -> str:
        words = self.message.split(" ")
        shaped = len(words) == 8 and words[0] == "slot" and words[6] == "epoch"
        return words[index] if shaped else ""

    @property
    def slot(self) -> int | None:
        text = self._field(1)
        return int(text) if text.isdigit() else None

    @property
    def owner(self) -> str | None:
        return self._field(4) or None

    @property
    def epoch(self) -> int | None:
        text = self._field(7)
        return int(text) if text.isdigit() else None


class SlotMapInvalid(ShardingError):
    """A slot map that does not cover every slot exactly once, or does not decode; it is
    refused whole and nothing uses it."""

    code = 732


class TransactionAborted(ShardingError):
    """A cross-shard change (top-layer change, cross-partition rename) was aborted: a shard
    did not prepare in time, or refused for the reason the message gives; nothing changed."""

    code = 733


class TopLayerChange(ShardingError):
    """A change of a top-layer directory (``/``, ``/user``: above the partition depth,
    present on every shard) asked of one shard: such changes go through the controller as a
    two-phase commit on every shard, which this version does not offer yet; nothing
    changed."""

    code = 734


class CrossShardRename(ShardingError):
    """A rename whose source and destination lie in partitions of different shards: that
    needs the two-phase rename between the shards, which this version does not offer yet;
    nothing changed (a rename within one partition, or between partitions of one shard,
    works)."""

    code = 735


class NotController(ShardingError):
    """This shard is not (or no longer) the controller: its write of the slot map was
    refused by ZooKeeper's check of the controller epoch, so nothing was written."""

    code = 736


class NoSlotMap(ShardingError):
    """The shard has no slot map yet (not every expected shard has registered, or the
    initial map was not written): try again shortly."""

    code = 737
    retriable = True


class ShardNotServed(ShardingError):
    """A DataNode asked to store, copy, read or delete a replica of a block whose shard it
    keeps no block pool for (``datanode.shards``), or a shard's command naming another
    shard's block: refused, nothing changed."""

    code = 739


def error_from_code(code: int, message: str) -> XdfsError:
    """Rebuild the exception a server raised from its wire code (unknown codes stay generic)."""
    cls = _BY_CODE.get(code)
    if cls is None:
        return XdfsError(f"[code {code}] {message}")
    return cls(message)


def known_codes() -> dict[int, type[XdfsError]]:
    """A copy of the code table, for docs and tests."""
    return dict(sorted(_BY_CODE.items()))
