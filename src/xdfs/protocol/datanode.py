"""The data path's wire vocabulary.

Two services:

* ``namenode.datanode`` (served by the NameNode, called by DataNodes): register, full block
  reports in batches, heartbeats, incremental reports and the end of a block recovery
  (``commit_block_synchronization``). The NameNode talks to DataNodes only through the
  replies: replicate, delete and recover commands, fresh block-token keys, and
  :class:`~xdfs.errors.UnknownDataNode` when a node must register and report again.
  Register and heartbeat answers carry the NameNode's active epoch: a DataNode obeys no
  NameNode whose epoch is below the highest it has seen (a NameNode fenced by a takeover).
  In HA they also carry its state (``ha_state``): a DataNode reports to every NameNode of
  ``ha.namenodes`` and obeys only the one it believes active, the last to claim
  ``active`` at the highest epoch; a standby answers with no command at all.
  A DataNode authenticates as ``dn/<node id>`` (:data:`DATANODE_USER_PREFIX`; no user name
  can contain ``/``) with the cluster's DataNode secret as its password (the NameNode writes
  it to ``DIR/datanode.secret`` in each name dir); that identity serves this service and
  bad-replica reports only, never a client call. A superuser may also call this service.
* ``datanode`` (served by each DataNode, called by clients and other DataNodes): block
  writes (upload streams) and reads (download streams), and the two steps of a block
  recovery a primary DataNode asks of each replica's holder (HDFS's InterDatanodeProtocol),
  each authorised by a block token the NameNode issued for that block
  (``xdfs.common.tokens``).

Replica states: *finalized* (complete, in ``finalized/``) and *rbw* (being written, or kept
in ``rbw/`` after the writer's stream broke, waiting for a block recovery). Reports carry
the two in separate lists.
"""

from __future__ import annotations

import msgspec

from xdfs.common.tokens import BlockKey
from xdfs.protocol.blocks import BlockRecord
from xdfs.rpc.messages import Empty
from xdfs.rpc.service import Method, MethodKind, Service

#: The user name of a DataNode is this prefix and its node id (a name no user can have).
DATANODE_USER_PREFIX = "dn/"

# --- DataNode -> NameNode ---------------------------------------------------------------


class StorageReport(msgspec.Struct, array_like=True):
    capacity_bytes: int  # size of the file system holding the data dir
    used_bytes: int  # bytes of block data and checksum files stored by this DataNode
    free_bytes: int  # what xdfs may still use (free space minus the reserve)


class RegisterRequest(msgspec.Struct):
    node_id: str  # stable across restarts (kept in the data dir's VERSION)
    address: str  # host:port where the DataNode serves the ``datanode`` service
    storage: StorageReport
    software_version: str = ""
    #: host:port of its HTTP server (WebHDFS data part); "": none.
    http_address: str = ""


class RegisterResponse(msgspec.Struct):
    cluster_id: str
    namespace_id: int
    heartbeat_interval_s: float
    block_report_batch_max: int  # entries per block-report call (seed 003: 100)
    full_report_interval_s: float
    block_keys: list[BlockKey]
    #: The NameNode's active epoch: a DataNode that has seen a higher one ignores this
    #: NameNode (never obeys it) and tries its next address. 0: a NameNode without epochs.
    epoch: int = 0
    #: "active" or "standby" (xdfs.protocol.ha ROLE_*); "": a NameNode without HA (active).
    ha_state: str = ""


class BlockReportRequest(msgspec.Struct):
    """One batch of a full block report; the NameNode reconciles after the last batch."""

    node_id: str
    report_id: int  # fresh per full report; batches of one report share it
    batch_index: int  # 0-based
    batch_count: int
    blocks: list[BlockRecord]  # finalized replicas, with their stored lengths
    #: Replicas in state rbw (being written, or kept after a broken write), with the
    #: length their checksums cover.
    rbw: list[BlockRecord] = []


class HeartbeatRequest(msgspec.Struct):
    node_id: str
    storage: StorageReport
    transfers_in_progress: int = 0  # block writes/reads/replications running now


class ReplicateTask(msgspec.Struct, array_like=True):
    """Copy the local replica of ``block`` to each of ``targets`` (with ``token``)."""

    block: BlockRecord
    targets: list[str]
    token: str


class RecoverBlockTask(msgspec.Struct, array_like=True):
    """Be the primary of a block recovery (HDFS): ask every holder in ``targets`` for its
    replica, agree on a length, have the replicas truncated to it and finalized with
    ``recovery_genstamp``, then ``commit_block_synchronization``."""

    block: BlockRecord  # id and the namespace's genstamp (num_bytes unused)
    recovery_genstamp: int  # the new generation stamp of the recovered block
    targets: list[str]  # addresses of the DataNodes that may hold a replica (self included)
    token: str  # block token (write scope) for the calls to the targets
    #: A truncate's recovery: the block's new length (every participant cuts to it); -1:
    #: a lease recovery, which agrees on what the holders have.
    new_length: int = -1


class HeartbeatResponse(msgspec.Struct):
    replicate: list[ReplicateTask] = []
    delete: list[int] = []  # block ids whose local replicas must go
    #: The current block-token keys (the DataNode replaces its set); empty: unchanged.
    block_keys: list[BlockKey] = []
    #: True asks for a full block report now (after the NameNode restarted, for example).
    send_full_report: bool = False
    epoch: int = 0  # the NameNode's active epoch, as in RegisterResponse
    recover: list[RecoverBlockTask] = []
    ha_state: str = ""  # as in RegisterResponse


class IncrementalReportRequest(msgspec.Struct):
    node_id: str
    received: list[BlockRecord] = []  # replicas just finalized
    deleted: list[int] = []  # block ids just removed (or found missing on disk)
    rbw: list[BlockRecord] = []  # replicas kept in state rbw after a broken write


class CommitBlockSyncRequest(msgspec.Struct):
    """The end of a block recovery (HDFS's commitBlockSynchronization), from its primary."""

    block: BlockRecord  # id and the genstamp before the recovery
    recovery_genstamp: int
    length: int  # the length the replicas were truncated to
    #: True when no holder had a byte of the block: the file closes without it.
    delete_block: bool = False
    nodes: list[str] = []  # addresses of the DataNodes whose replicas were finalized


class BadReplica(msgspec.Struct, array_like=True):
    block_id: int
    address: str  # the DataNode whose replica failed its checksum
    #: A client's read (or write) token for the block: the proof it may report it (a
    #: DataNode, or a superuser, needs none).
    token: str = ""


class BadReplicasRequest(msgspec.Struct):
    replicas: list[BadReplica]


REGISTER_DATANODE = Method(
    "register_datanode", RegisterRequest, RegisterResponse, idempotent=True,
    doc="A DataNode joins (or re-joins) the cluster.",
)
BLOCK_REPORT = Method(
    "block_report", BlockReportRequest, Empty, idempotent=True,
    doc="One batch of a DataNode's full block report.",
)
HEARTBEAT = Method(
    "heartbeat", HeartbeatRequest, HeartbeatResponse, idempotent=False,
    doc="Liveness and space; the reply carries commands.",
)
INCREMENTAL_REPORT = Method(
    "incremental_report", IncrementalReportRequest, Empty, idempotent=True,
    doc="Replicas received, kept in rbw or deleted since the last report.",
)
COMMIT_BLOCK_SYNC = Method(
    "commit_block_synchronization", CommitBlockSyncRequest, Empty, idempotent=True,
    doc="A block recovery's primary: the length agreed; close the file.",
)
DATANODE_PROTOCOL = Service(
    "namenode.datanode",
    (REGISTER_DATANODE, BLOCK_REPORT, HEARTBEAT, INCREMENTAL_REPORT, COMMIT_BLOCK_SYNC),
)

# --- clients and DataNodes -> DataNode --------------------------------------------------


class WriteBlockRequest(msgspec.Struct):
    """Head of a block upload: the payload chunks are the block's bytes, in order."""

    block: BlockRecord  # num_bytes is ignored: the stream's length decides it
    token: str  # block token with write scope for block.block_id
    client: str = ""  # who writes (a client name, or "datanode:<id>" for replication)
    #: Append: the finalized replica this node holds (id, genstamp, length); the stream's
    #: bytes follow it, and the replica takes ``block.genstamp``. None: a new replica.
    append_to: BlockRecord | None = None


class WriteBlockResponse(msgspec.Struct):
    block: BlockRecord  # as finalized: the stored length
    address: str  # of the DataNode that stored it


class ReadBlockRequest(msgspec.Struct):
    block: BlockRecord  # id and genstamp must match the replica; num_bytes is ignored
    token: str  # block token with read (or write) scope
    offset: int = 0
    length: int = -1  # -1: to the end of the replica


class ReadBlockHead(msgspec.Struct):
    block: BlockRecord  # the replica as stored (num_bytes: its full length)
    offset: int
    length: int  # bytes that follow in the stream


class InitReplicaRecoveryRequest(msgspec.Struct):
    """Step 1 of a block recovery, asked of each holder: stop any write of the replica and
    claim it for ``recovery_genstamp`` (a newer recovery wins over an older one)."""

    block: BlockRecord  # id and the namespace's genstamp
    recovery_genstamp: int
    token: str  # block token with write scope


class ReplicaRecoveryInfo(msgspec.Struct):
    block: BlockRecord  # the replica as stored: its genstamp and valid length
    finalized: bool  # False: state rbw


class UpdateReplicaRequest(msgspec.Struct):
    """Step 2: truncate the claimed replica to ``length`` and finalize it with the
    recovery's genstamp (then the holder reports it as received)."""

    block_id: int
    recovery_genstamp: int
    length: int
    token: str  # block token with write scope


class DataNodeInfoResponse(msgspec.Struct):
    node_id: str
    cluster_id: str
    address: str
    storage: StorageReport
    blocks: int
    registered: bool


WRITE_BLOCK = Method(
    "write_block", WriteBlockRequest, WriteBlockResponse, idempotent=False,
    kind=MethodKind.UPLOAD, doc="Store a block (finalized only when the stream completes).",
)
READ_BLOCK = Method(
    "read_block", ReadBlockRequest, ReadBlockHead, idempotent=True,
    kind=MethodKind.DOWNLOAD, doc="Read a byte range of a block, checksums verified.",
)
DATANODE_INFO = Method(
    "datanode_info", Empty, DataNodeInfoResponse, idempotent=True,
    doc="Identity and storage of this DataNode.",
)
INIT_REPLICA_RECOVERY = Method(
    "init_replica_recovery", InitReplicaRecoveryRequest, ReplicaRecoveryInfo, idempotent=True,
    doc="Block recovery, step 1: stop writes, claim the replica, say its state and length.",
)
UPDATE_REPLICA_UNDER_RECOVERY = Method(
    "update_replica_under_recovery", UpdateReplicaRequest, WriteBlockResponse,
    idempotent=False,
    doc="Block recovery, step 2: truncate the replica, finalize it with the new genstamp.",
)
DATANODE_SERVICE = Service(
    "datanode",
    (WRITE_BLOCK, READ_BLOCK, DATANODE_INFO, INIT_REPLICA_RECOVERY, UPDATE_REPLICA_UNDER_RECOVERY),
)
