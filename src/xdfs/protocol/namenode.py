"""The NameNode's client and admin services: every request/response type and method."""

from __future__ import annotations

from typing import Final

import msgspec

from xdfs.protocol.blocks import BlockRecord
from xdfs.protocol.datanode import BadReplicasRequest
from xdfs.rpc.messages import Empty
from xdfs.rpc.service import Method, MethodKind, Req, Resp, Service


class FileStatus(msgspec.Struct, array_like=True, gc=False):
    """What ``stat``/``list`` return for one inode (like HDFS's HdfsFileStatus)."""

    path: str
    is_dir: bool
    length: int  # bytes of a file (sum of its blocks); 0 for directories
    replication: int  # 0 for directories
    block_size: int  # 0 for directories
    mtime_ms: int
    atime_ms: int
    mode: int  # permission bits incl. sticky (0o1777 max)
    owner: str
    group: str
    inode_id: int
    children: int = 0  # number of entries of a directory
    under_construction: bool = False


class ContentSummary(msgspec.Struct, gc=False):
    """``du``/``count``: totals over a subtree (a file counts itself)."""

    length: int  # logical bytes
    file_count: int
    directory_count: int  # includes the path itself when it is a directory
    space_consumed: int  # bytes times each file's replication
    ns_quota: int = -1  # the path's name quota (dfs -count -q); -1: none
    ds_quota: int = -1  # the path's space quota, bytes; -1: none


# --- requests and responses --------------------------------------------------------------


#: Mode value meaning "the default for this kind of inode".
DEFAULT_MODE: Final = -1


class LoginRequest(msgspec.Struct):
    user: str
    password: str
    lifetime_s: float = 0.0  # 0: the server's default token lifetime


class LoginResponse(msgspec.Struct):
    user: str
    token: str
    expires_ms: int


class PathRequest(msgspec.Struct, array_like=True):
    path: str


class MkdirsRequest(msgspec.Struct):
    path: str
    mode: int = DEFAULT_MODE
    parents: bool = True


class CreateRequest(msgspec.Struct):
    path: str
    client: str  # the writer's name: it holds the lease until complete
    mode: int = DEFAULT_MODE
    replication: int = 0  # 0: the server's default
    block_size: int = 0  # 0: the server's default
    overwrite: bool = False
    create_parents: bool = True


class LocatedBlock(msgspec.Struct, array_like=True):
    block: BlockRecord
    offset: int  # of the block's first byte in the file
    locations: list[str]  # DataNode addresses holding (or to receive) it
    token: str = ""  # block token for the DataNodes


class CreateBlockResponse(msgspec.Struct):
    """``create_with_block``: the new file and its first block with its targets (None when
    the NameNode left that to ``add_block``: no live target, or quotas to check)."""

    status: FileStatus
    block: LocatedBlock | None = None


class AddBlockRequest(msgspec.Struct):
    path: str
    client: str
    #: The previous block with its final length, so the NameNode learns it before the next.
    previous: BlockRecord | None = None
    #: DataNode addresses the client failed to write to: not chosen again for this block.
    excluded: list[str] = []


class AppendRequest(msgspec.Struct):
    path: str
    client: str  # the writer's name: it holds the lease until complete


class AppendResponse(msgspec.Struct):
    """The reopened file: its blocks (the last with its new genstamp when it was partial)
    and, when it was partial, where its replicas are: the writer continues it there."""

    status: FileStatus
    blocks: list[BlockRecord]
    #: The partial last block reopened (new genstamp, current length); None: the writer
    #: starts a new block.
    last: LocatedBlock | None = None
    #: The genstamp the replicas of ``last`` have on the DataNodes until they reopen it.
    old_genstamp: int = 0


class FsyncRequest(msgspec.Struct):
    """hflush: the last block of the open file holds ``last_block.num_bytes`` bytes that
    every DataNode of it has finalized; new readers see them (HDFS's fsync)."""

    path: str
    client: str
    last_block: BlockRecord


class TruncateRequest(msgspec.Struct):
    path: str
    new_length: int
    client: str = ""  # who asks (HDFS names the client; the NameNode recovers the block)


class TruncateResponse(msgspec.Struct):
    #: True: the file has the new length now; False: its last block is being recovered to
    #: it and the file stays open until that is done (HDFS's truncate result).
    done: bool


class ConcatRequest(msgspec.Struct):
    target: str
    sources: list[str]


class AbandonBlockRequest(msgspec.Struct):
    """Drop the file's last block (every target failed); the client asks for a new one."""

    path: str
    client: str
    block_id: int


class AdditionalDataNodeRequest(msgspec.Struct):
    """One more target for the block being written, replacing a failed one."""

    path: str
    client: str
    block: BlockRecord
    existing: list[str]  # targets still in use
    excluded: list[str] = []  # targets that failed


class CompleteRequest(msgspec.Struct):
    path: str
    client: str
    blocks: list[BlockRecord]  # every block with its final length, in order


class LocatedBlocks(msgspec.Struct):
    file_length: int
    blocks: list[LocatedBlock]
    under_construction: bool


class BlockLocationsRequest(msgspec.Struct):
    path: str
    offset: int = 0
    length: int = -1  # -1: to the end
    #: A file-read token (a WebHDFS read URL's): the call reads ``path`` as its user,
    #: whoever the connection is; empty: as the connection's user.
    ticket: str = ""


class WebHdfsWriteRequest(msgspec.Struct):
    """A DataNode's exchange of a WebHDFS write URL's token (xdfs.namenode.webhdfs)."""

    ticket: str  # the file-write token of the URL
    op: str  # CREATE or APPEND: the URL's op
    path: str  # the URL's path


class ListRequest(msgspec.Struct):
    path: str
    start_after: str = ""
    limit: int = 1000


class Listing(msgspec.Struct):
    entries: list[FileStatus]
    remaining: int


class DeleteRequest(msgspec.Struct):
    path: str
    recursive: bool = False
    skip_trash: bool = False


class DeleteResponse(msgspec.Struct):
    deleted: bool
    #: Where the entry went when it was moved to the trash; "" when deleted for good.
    trash_path: str = ""


class RenameRequest(msgspec.Struct):
    src: str
    dst: str


class RenameResponse(msgspec.Struct):
    dst: str  # the final path (inside dst when dst was an existing directory)


class SetPermissionRequest(msgspec.Struct):
    path: str
    mode: int


class SetOwnerRequest(msgspec.Struct):
    path: str
    owner: str = ""
    group: str = ""


class SetReplicationRequest(msgspec.Struct):
    path: str
    replication: int


class SetTimesRequest(msgspec.Struct):
    path: str
    mtime_ms: int = -1
    atime_ms: int = -1


class RenewLeaseRequest(msgspec.Struct):
    client: str


class RecoverLeaseRequest(msgspec.Struct):
    path: str


class RecoverLeaseResponse(msgspec.Struct):
    closed: bool  # False: recovery started (or under way); ask again later


class RestoreRequest(msgspec.Struct):
    trash_path: str


class RestoreResponse(msgspec.Struct):
    path: str


class ExpungeRequest(msgspec.Struct):
    #: True deletes the caller's whole trash now; False checkpoints Current and deletes
    #: checkpoints older than the trash interval (hdfs dfs -expunge).
    immediate: bool = False


class SafeModeRequest(msgspec.Struct):
    action: str  # "get" | "enter" | "leave"


class SafeModeStatus(msgspec.Struct):
    on: bool
    reason: str


class TxidResponse(msgspec.Struct):
    txid: int


class AccessRequest(msgspec.Struct):
    """Whether the caller may access ``path`` so (HDFS's ``checkAccess``)."""

    path: str
    access: int  # permission bits wanted: 4 read, 2 write, 1 execute (any sum)


class SetQuotaRequest(msgspec.Struct):
    """``admin -setQuota`` and friends: None leaves that quota as it is, -1 clears it."""

    path: str
    ns_quota: int | None = None  # most names (files and directories, itself included)
    ds_quota: int | None = None  # most bytes, counted times replication


class UserRequest(msgspec.Struct):
    name: str
    password: str = ""
    groups: list[str] = []


class DataNodeInfo(msgspec.Struct):
    node_id: str
    address: str
    state: str  # "live" | "dead"
    capacity_bytes: int
    used_bytes: int
    free_bytes: int
    blocks: int  # replicas the NameNode knows on this node
    last_contact_s: float  # seconds since its last heartbeat
    transfers_in_progress: int
    registered_ms: int
    rack: str = "/default-rack"
    #: normal | decommissioning | decommissioned | entering_maintenance | in_maintenance
    admin_state: str = "normal"
    #: Blocks it holds still lacking replication elsewhere (while decommissioning or
    #: entering maintenance; as of the last progress check).
    decommission_blocks_left: int = 0
    maintenance_expiry_ms: int = 0  # when its maintenance ends (0: not in maintenance)


class DataNodeReport(msgspec.Struct):
    nodes: list[DataNodeInfo]
    capacity_bytes: int  # live nodes only, as hdfs dfsadmin -report
    used_bytes: int
    free_bytes: int
    blocks: int  # blocks in the namespace
    under_replicated: int
    corrupt_blocks: int  # blocks with at least one corrupt replica
    missing_blocks: int  # blocks with no live, good replica
    pending_replication: int
    pending_deletion: int
    safe_mode: bool
    #: Blocks whose id or genstamp this NameNode never allocated (a newer NameNode did),
    #: held by live DataNodes: kept, never deleted (see docs/operations.md).
    future_blocks: int = 0


class FsckRequest(msgspec.Struct):
    path: str
    files: bool = False  # list every file, not only unhealthy ones
    blocks: bool = False  # with each listed file's blocks
    locations: bool = False  # with each block's replica addresses


class FsckBlock(msgspec.Struct):
    block: BlockRecord
    status: str  # "healthy" | "under_replicated" | "corrupt" | "missing"
    live_replicas: int
    expected_replicas: int
    locations: list[str] = []
    corrupt_locations: list[str] = []
    #: Every replica on one rack while the cluster has more (placement policy violated).
    mis_replicated: bool = False


class FsckFile(msgspec.Struct):
    path: str
    length: int
    replication: int
    status: str  # worst status of its blocks ("healthy" when it has none)
    blocks: list[FsckBlock] = []


class FsckReport(msgspec.Struct):
    path: str
    healthy: bool  # no missing or corrupt-only block
    files: int
    directories: int
    total_bytes: int
    total_blocks: int
    healthy_blocks: int
    under_replicated_blocks: int
    corrupt_blocks: int
    missing_blocks: int
    live_datanodes: int
    default_replication: int
    listed: list[FsckFile]  # unhealthy files (every file with FsckRequest.files)
    truncated: bool  # listed stopped at the server's limit
    future_blocks: int = 0  # cluster-wide, as DataNodeReport.future_blocks
    mis_replicated_blocks: int = 0  # see FsckBlock.mis_replicated
    racks: int = 1  # racks with a live in-service DataNode


class BackupInfo(msgspec.Struct):
    """A BackupNode as its NameNode sees it (from its fetches)."""

    address: str
    synced_txid: int  # what the backup acknowledged with its last fetch
    lag_txns: int  # the NameNode's synced txid minus the backup's
    last_fetch_ms: int


class NameNodeStatus(msgspec.Struct):
    cluster_id: str
    namespace_id: int
    last_txid: int
    synced_txid: int
    image_txid: int
    segment_start_txid: int
    safe_mode: bool
    inodes: int
    files_under_construction: int
    name_dirs: list[str]
    started_at_ms: int
    backups: list[BackupInfo] = []
    safe_mode_reason: str = ""
    #: Free bytes on each name dir (same order as name_dirs), as last read.
    name_dir_free_bytes: list[int] = []


class RefreshNodesResponse(msgspec.Struct):
    """What ``admin -refreshNodes`` applied (nodes named by address)."""

    decommissioning: list[str]
    decommissioned: list[str]
    maintenance: list[str]  # entering or in maintenance
    refused: list[str]  # live nodes no longer in the include file (declared dead)


class BalancerBlocksRequest(msgspec.Struct):
    """A balancer asks for blocks to move off ``node_id`` (HDFS getBlocks)."""

    node_id: str
    bytes_max: int  # stop listing once the blocks add up to this many bytes


class BalancerBlock(msgspec.Struct, array_like=True):
    block_id: int
    num_bytes: int
    holders: list[str]  # node ids of its good replicas


class BalancerBlocksResponse(msgspec.Struct):
    blocks: list[BalancerBlock]


class MoveReplicaRequest(msgspec.Struct):
    """Copy ``block_id`` from ``source`` to ``target`` (node ids); once the target reports
    the copy, the surplus replica goes, the source's by preference."""

    block_id: int
    source: str
    target: str


class MoveReplicaResponse(msgspec.Struct):
    moved: bool  # the target reported its copy in time
    detail: str = ""


def _m(
    name: str, req: type[Req], resp: type[Resp], idempotent: bool, doc: str
) -> Method[Req, Resp]:
    return Method(name, req, resp, idempotent=idempotent, doc=doc)


def _once(name: str, req: type[Req], resp: type[Resp], doc: str) -> Method[Req, Resp]:
    """A non-idempotent method the NameNode runs at most once per (client id, call number):
    a retry gets the first outcome from its retry cache (xdfs.namenode.retry_cache)."""
    return Method(name, req, resp, idempotent=False, doc=doc, at_most_once=True)


LOGIN = _m("login", LoginRequest, LoginResponse, True, "Password -> expiring token.")
MKDIRS = _once("mkdirs", MkdirsRequest, FileStatus, "Create a directory (and parents).")
CREATE = _once("create", CreateRequest, FileStatus, "Create a file; take its lease.")
ADD_BLOCK = _once("add_block", AddBlockRequest, LocatedBlock, "Allocate the next block.")
CREATE_WITH_BLOCK = _once(
    "create_with_block", CreateRequest, CreateBlockResponse,
    "Create a file and allocate its first block: create and add_block in one call.",
)
COMPLETE = _once("complete", CompleteRequest, FileStatus, "Close a file being written.")
RENEW_LEASE = _m("renew_lease", RenewLeaseRequest, Empty, True, "Keep a writer's leases.")
RECOVER_LEASE = _m(
    "recover_lease", RecoverLeaseRequest, RecoverLeaseResponse, True,
    "Start lease recovery of an open file; whether it is closed now (debug -recoverLease).",
)
APPEND = _once("append", AppendRequest, AppendResponse, "Reopen a file to append; take its lease.")
FSYNC = _m("fsync", FsyncRequest, Empty, True, "hflush: new readers see the open file's bytes.")
TRUNCATE = _m(
    "truncate", TruncateRequest, TruncateResponse, True,
    "Cut a file to a length (idempotent by its arguments: a repeat answers as the first).",
)
CONCAT = _once("concat", ConcatRequest, Empty, "Move the sources' blocks to the target.")
BLOCK_LOCATIONS = _m(
    "block_locations", BlockLocationsRequest, LocatedBlocks, True, "Open: where the blocks are."
)
WEBHDFS_WRITE_LOGIN = _m(
    "webhdfs_write_login", WebHdfsWriteRequest, LoginResponse, True,
    "A DataNode: a WebHDFS write URL's token -> a token of its user, for that write.",
)
STAT = _m("stat", PathRequest, FileStatus, True, "Status of one path.")
LIST = _m("list", ListRequest, Listing, True, "One page of a directory listing.")
DELETE = _once("delete", DeleteRequest, DeleteResponse, "Delete (to the trash by default).")
RENAME = _once("rename", RenameRequest, RenameResponse, "Atomic move of a file or tree.")
SET_PERMISSION = _m("set_permission", SetPermissionRequest, Empty, True, "chmod.")
SET_OWNER = _m("set_owner", SetOwnerRequest, Empty, True, "chown / chgrp.")
SET_REPLICATION = _m("set_replication", SetReplicationRequest, Empty, True, "setrep.")
SET_TIMES = _m("set_times", SetTimesRequest, Empty, True, "touch: mtime/atime.")
CONTENT_SUMMARY = _m("content_summary", PathRequest, ContentSummary, True, "du / count.")
RESTORE = _once("restore", RestoreRequest, RestoreResponse, "Move a trash entry back.")
EXPUNGE = _m("expunge", ExpungeRequest, Empty, False, "Checkpoint / empty the caller's trash.")
SAFE_MODE = _m("safe_mode", SafeModeRequest, SafeModeStatus, True, "Get, enter, leave.")
SAVE_NAMESPACE = _m("save_namespace", Empty, TxidResponse, False, "Write an fsimage now.")
ROLL_EDITS = _m("roll_edits", Empty, TxidResponse, False, "Finalize the edits segment.")
ADD_USER = _m("add_user", UserRequest, Empty, False, "Create a user (superuser only).")
REMOVE_USER = _m("remove_user", UserRequest, Empty, False, "Delete a user (superuser only).")
SET_PASSWORD = _m("set_password", UserRequest, Empty, False, "Change a password.")
STATUS = _m("status", Empty, NameNodeStatus, True, "NameNode state for admin -report.")
ABANDON_BLOCK = _m("abandon_block", AbandonBlockRequest, Empty, False, "Drop a failed last block.")
ADDITIONAL_DATANODE = _m(
    "additional_datanode", AdditionalDataNodeRequest, LocatedBlock, True,
    "A replacement target for a block being written.",
)
REPORT_BAD_REPLICAS = _m(
    "report_bad_replicas", BadReplicasRequest, Empty, True, "Replicas that failed checksums."
)
DATANODE_REPORT = _m("datanode_report", Empty, DataNodeReport, True, "admin -report.")
FSCK = _m("fsck", FsckRequest, FsckReport, True, "Block health of a subtree.")
ACCESS = _m(
    "access", AccessRequest, Empty, True,
    "Check the caller's access to a path: AccessDenied if refused (dfs -test -r/-w).",
)
REFRESH_NODES = _m(
    "refresh_nodes", Empty, RefreshNodesResponse, True,
    "Re-read the include, exclude and maintenance files (superuser only).",
)
BALANCER_BLOCKS = _m(
    "balancer_blocks", BalancerBlocksRequest, BalancerBlocksResponse, True,
    "Movable blocks of one DataNode, for the balancer (superuser only).",
)
MOVE_REPLICA = _m(
    "move_replica", MoveReplicaRequest, MoveReplicaResponse, True,
    "Move one replica between DataNodes; answers once the copy is reported (superuser).",
)
SET_QUOTA = _m(
    "set_quota", SetQuotaRequest, Empty, True,
    "Set or clear a directory's name and space quotas (superuser only).",
)


class BlockMapHead(msgspec.Struct):
    """Head of the ``block_map`` download. The chunks are a byte stream of frames of
    :class:`BlockMapRow` (:mod:`xdfs.protocol.block_map`). The counts are those of the moment the
    call started; the rows are read batch by batch, so a change meanwhile may show."""

    blocks: int  # blocks of the namespace
    replicas: int  # replicas the NameNode knows of them
    datanodes: list[DataNodeInfo]
    generated_ms: int


class BlockMapRow(msgspec.Struct, array_like=True, gc=False):
    """One replica of a block (or the block alone, ``replica_state="missing"``)."""

    block_id: int
    inode_id: int
    path: str
    block_bytes: int  # the namespace's length (of a block being written: so far)
    genstamp: int
    expected_replication: int
    complete: bool  # False for the last block of a file being written
    node_id: str  # "" when the block has no replica
    address: str
    node_state: str  # "live" | "dead" | ""
    replica_state: str  # "good" | "corrupt" | "missing"
    replica_bytes: int
    replica_genstamp: int
    corrupt_flags: int  # xdfs.namenode.blocks.blockmap BAD_GENSTAMP | BAD_LENGTH | REPORTED_BAD


BLOCK_MAP = Method(
    "block_map", Empty, BlockMapHead, idempotent=True, kind=MethodKind.DOWNLOAD,
    doc="The live block map: every replica, its DataNode and state (superuser only).",
)

CLIENT_SERVICE = Service(
    "namenode.client",
    (
        LOGIN,
        MKDIRS,
        CREATE,
        ADD_BLOCK,
        COMPLETE,
        RENEW_LEASE,
        RECOVER_LEASE,
        BLOCK_LOCATIONS,
        WEBHDFS_WRITE_LOGIN,
        STAT,
        LIST,
        DELETE,
        RENAME,
        SET_PERMISSION,
        SET_OWNER,
        SET_REPLICATION,
        SET_TIMES,
        CONTENT_SUMMARY,
        RESTORE,
        EXPUNGE,
        ABANDON_BLOCK,
        ADDITIONAL_DATANODE,
        REPORT_BAD_REPLICAS,
        APPEND,
        FSYNC,
        TRUNCATE,
        CONCAT,
        ACCESS,
        CREATE_WITH_BLOCK,
    ),
)
ADMIN_SERVICE = Service(
    "namenode.admin",
    (
        SAFE_MODE,
        SAVE_NAMESPACE,
        ROLL_EDITS,
        ADD_USER,
        REMOVE_USER,
        SET_PASSWORD,
        STATUS,
        DATANODE_REPORT,
        FSCK,
        BLOCK_MAP,
        SET_QUOTA,
        REFRESH_NODES,
        BALANCER_BLOCKS,
        MOVE_REPLICA,
    ),
)
