"""Edit-log operations and fsimage records: the durable vocabulary of the namespace.

Every namespace mutation is exactly one op (a typed struct) with a txid. Ops carry every
value the mutation needs (inode ids, block ids, timestamps in ms, owners, modes), chosen by
the NameNode *before* logging, so replay is deterministic: applying the same ops to the same
image always yields the same namespace. Ops are encoded as msgpack arrays (``array_like``)
without a tag; the record header carries :attr:`OPCODE`, which selects the type on decode.

Opcodes and field order are part of the on-disk format (``LAYOUT_VERSION``): append new
fields at the end with defaults, never reuse an opcode.

The ops an at-most-once call logs last (mkdir, add_file, close_file, delete, rename,
concat, append) end
with the call's retry-cache key, ``rpc_client_id`` and ``rpc_call``
(:mod:`xdfs.namenode.retry_cache`): appended fields, so records written before the key
existed load with an empty one (no key: nothing to remember).
"""

from __future__ import annotations

from typing import ClassVar, Final

import msgspec

from xdfs.protocol.blocks import BlockRecord

#: On-disk layout of edits segments and images; bumped on incompatible change.
LAYOUT_VERSION = 1


class Op(msgspec.Struct, array_like=True, gc=False):
    OPCODE: ClassVar[int] = 0
    NAME: ClassVar[str] = ""


# --- namespace ---------------------------------------------------------------------------


class MkdirOp(Op):
    """Create one directory (``mkdir -p`` logs one op per directory it creates)."""

    OPCODE = 1
    NAME = "mkdir"
    path: str
    inode_id: int
    mode: int
    owner: str
    group: str
    mtime_ms: int
    #: The retry-cache key of the call that logged this op (empty: none).
    rpc_client_id: bytes = b""
    rpc_call: int = 0


class AddFileOp(Op):
    """Create (or, with ``overwrite``, replace) a file, under construction by ``client``."""

    OPCODE = 2
    NAME = "add_file"
    path: str
    inode_id: int
    mode: int
    owner: str
    group: str
    mtime_ms: int
    replication: int
    block_size: int
    client: str
    overwrite: bool = False
    #: The retry-cache key of the call that logged this op (empty: none).
    rpc_client_id: bytes = b""
    rpc_call: int = 0


class AddBlockOp(Op):
    """Append a new (empty) block to a file under construction."""

    OPCODE = 3
    NAME = "add_block"
    path: str
    block: BlockRecord


class UpdateBlocksOp(Op):
    """Replace the block list of a file under construction (lengths known, block abandoned)."""

    OPCODE = 4
    NAME = "update_blocks"
    path: str
    blocks: tuple[BlockRecord, ...]


class CloseFileOp(Op):
    """Complete a file: final blocks, times; the lease is released."""

    OPCODE = 5
    NAME = "close_file"
    path: str
    mtime_ms: int
    atime_ms: int
    blocks: tuple[BlockRecord, ...]
    #: The retry-cache key of the call that logged this op (empty: none).
    rpc_client_id: bytes = b""
    rpc_call: int = 0


class DeleteOp(Op):
    """Delete a file or a whole directory tree."""

    OPCODE = 6
    NAME = "delete"
    path: str
    mtime_ms: int
    #: The retry-cache key of the call that logged this op (empty: none).
    rpc_client_id: bytes = b""
    rpc_call: int = 0


class RenameOp(Op):
    """Move ``src`` to exactly ``dst`` (resolved by the NameNode before logging)."""

    OPCODE = 7
    NAME = "rename"
    src: str
    dst: str
    mtime_ms: int
    #: The retry-cache key of the call that logged this op (empty: none).
    rpc_client_id: bytes = b""
    rpc_call: int = 0


class SetPermissionOp(Op):
    OPCODE = 8
    NAME = "set_permission"
    path: str
    mode: int


class SetOwnerOp(Op):
    """Change owner and/or group (an empty string leaves that one unchanged)."""

    OPCODE = 9
    NAME = "set_owner"
    path: str
    owner: str
    group: str


class SetReplicationOp(Op):
    OPCODE = 10
    NAME = "set_replication"
    path: str
    replication: int


class SetTimesOp(Op):
    """Set mtime/atime (-1 leaves that one unchanged)."""

    OPCODE = 11
    NAME = "set_times"
    path: str
    mtime_ms: int
    atime_ms: int


class ReassignLeaseOp(Op):
    """Lease recovery: the file under construction now belongs to ``client``. A block
    recovery logs the generation stamp it gives the last block (HDFS's set_genstamp): the
    namespace never hands that stamp out again, even if the NameNode restarts before the
    recovery commits."""

    OPCODE = 12
    NAME = "reassign_lease"
    path: str
    client: str
    recovery_genstamp: int = 0  # 0: no block recovery


class AppendOp(Op):
    """Reopen a closed file for appending by ``client`` (HDFS's OP_APPEND). A partial last
    block is reopened with a new generation stamp (``last_block``: its record with that
    stamp); None when the file is empty or its last block is full (the writer adds one)."""

    OPCODE = 13
    NAME = "append"
    path: str
    client: str
    last_block: BlockRecord | None = None
    #: The reopened last block's stamp before the append (0: none reopened): part of the
    #: append's answer, so a retry answered from the edits gets it too.
    old_genstamp: int = 0
    #: The retry-cache key of the call that logged this op (empty: none).
    rpc_client_id: bytes = b""
    rpc_call: int = 0


class TruncateOp(Op):
    """Cut a closed file to ``new_length`` (HDFS's OP_TRUNCATE): ``blocks`` are the blocks
    it keeps. At a block boundary the file stays closed; otherwise its last block keeps
    the id and old stamp with the new length, and the file is held by ``client`` (the
    NameNode's recovery holder) until a block recovery with ``recovery_genstamp`` cuts the
    replicas and commits."""

    OPCODE = 14
    NAME = "truncate"
    path: str
    new_length: int
    mtime_ms: int
    blocks: tuple[BlockRecord, ...]
    client: str = ""
    recovery_genstamp: int = 0  # 0: at a block boundary, nothing to recover


class ConcatOp(Op):
    """Move the blocks of ``sources`` (in order) to the end of ``target`` and delete the
    sources (HDFS's OP_CONCAT_DELETE)."""

    OPCODE = 15
    NAME = "concat"
    target: str
    sources: tuple[str, ...]
    mtime_ms: int
    rpc_client_id: bytes = b""
    rpc_call: int = 0
# --- quotas (opcodes 40-49) -----------------------------------------------------------------


class SetQuotaOp(Op):
    """A directory's name and space quotas, as they are from now on (-1: none; both -1
    clears them). Usage is not logged: it follows from the tree."""

    OPCODE = 40
    NAME = "set_quota"
    path: str
    ns_quota: int
    ds_quota: int


# --- security ----------------------------------------------------------------------------


class AddUserOp(Op):
    """Create or replace a user. The password is never in clear: its SCRAM credentials
    (``stored_key``, ``server_key``, ``iterations``, with ``salt``: see
    :mod:`xdfs.namenode.security.passwords`); ops of older namespaces carry a scrypt
    ``password_hash`` instead, converted when applied."""

    OPCODE = 20
    NAME = "add_user"
    name: str
    password_hash: bytes
    salt: bytes
    groups: tuple[str, ...]
    created_ms: int
    stored_key: bytes = b""
    server_key: bytes = b""
    iterations: int = 0


class RemoveUserOp(Op):
    OPCODE = 21
    NAME = "remove_user"
    name: str


class SetPasswordOp(Op):
    OPCODE = 22
    NAME = "set_password"
    name: str
    password_hash: bytes  # as AddUserOp's
    salt: bytes
    stored_key: bytes = b""
    server_key: bytes = b""
    iterations: int = 0


class AddTokenKeyOp(Op):
    """A token-signing key (HMAC): kept in the namespace so any NameNode that loads it can
    verify tokens (seed 003's token "broadcast"). Keys expire; old ones are purged."""

    OPCODE = 23
    NAME = "add_token_key"
    key_id: int
    secret: bytes
    expires_ms: int


class RemoveTokenKeyOp(Op):
    OPCODE = 24
    NAME = "remove_token_key"
    key_id: int


# --- high availability -------------------------------------------------------------------


class NewEpochOp(Op):
    """A promotion: the namespace's active epoch becomes ``epoch`` (always higher than
    before). Logged first by a NameNode that takes over, before it answers anyone, so every
    image, edits log and follower that holds later ops also holds the new epoch; DataNodes
    obey only the highest epoch they have seen (docs/operations.md, "Fencing")."""

    OPCODE = 30
    NAME = "new_epoch"
    epoch: int


class SetDataNodeSecretOp(Op):
    """The cluster's DataNode secret: DataNodes authenticate with it instead of a user's
    password (kept in the namespace so a promoted BackupNode accepts them too)."""

    OPCODE = 25
    NAME = "set_datanode_secret"
    secret: bytes


ALL_OPS: tuple[type[Op], ...] = (
    MkdirOp, AddFileOp, AddBlockOp, UpdateBlocksOp, CloseFileOp, DeleteOp, RenameOp,
    SetPermissionOp, SetOwnerOp, SetReplicationOp, SetTimesOp, ReassignLeaseOp,
    AddUserOp, RemoveUserOp, SetPasswordOp, AddTokenKeyOp, RemoveTokenKeyOp, NewEpochOp,
    SetDataNodeSecretOp, AppendOp, TruncateOp, ConcatOp, SetQuotaOp,
)
OPS_BY_CODE: dict[int, type[Op]] = {op.OPCODE: op for op in ALL_OPS}
assert len(OPS_BY_CODE) == len(ALL_OPS), "duplicate opcode"

#: The encoder of every op's payload (msgpack).
OP_ENCODER: Final = msgspec.msgpack.Encoder()
_DECODERS = {code: msgspec.msgpack.Decoder(cls) for code, cls in OPS_BY_CODE.items()}


def encode_op(op: Op) -> bytes:
    return OP_ENCODER.encode(op)


def decode_op(opcode: int, payload: bytes | memoryview) -> Op:
    """Raises KeyError for an unknown opcode, msgspec errors for a bad payload."""
    return _DECODERS[opcode].decode(payload)


def op_to_dict(op: Op) -> dict[str, object]:
    """A JSON-friendly view (bytes as hex) for ``xdfs oev``."""
    out: dict[str, object] = {"op": op.NAME}
    for field in op.__struct_fields__:
        value = getattr(op, field)
        if field in _RPC_KEY_FIELDS and not value:
            continue  # no retry-cache key: nothing worth a column
        out[field] = _jsonable(value)
    return out


_RPC_KEY_FIELDS = frozenset({"rpc_client_id", "rpc_call"})


def _jsonable(value: object) -> object:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, BlockRecord):
        return {"block_id": value.block_id, "genstamp": value.genstamp, "bytes": value.num_bytes}
    if isinstance(value, tuple):
        return [_jsonable(item) for item in value]
    return value


# --- fsimage records ---------------------------------------------------------------------


class ImageHeader(msgspec.Struct, array_like=True):
    layout_version: int
    namespace_id: int
    cluster_id: str
    txid: int
    next_inode_id: int
    next_block_id: int
    next_genstamp: int
    inode_count: int
    user_count: int
    token_key_count: int
    superuser: str
    supergroup: str
    #: The active epoch (:class:`NewEpochOp`); images written before epochs existed had
    #: only the first one.
    epoch: int = 1
    #: The credential generation the next new user or password change gets (see
    #: UserRecord.generation); images written before it existed load as 1.
    next_generation: int = 1
    datanode_secret: bytes = b""


class InodeRecord(msgspec.Struct, array_like=True, gc=False):
    """One inode; records are written parents before children, so ``parent_id`` is known."""

    inode_id: int
    parent_id: int  # 0 for the root
    name: str  # "" for the root
    is_dir: bool
    mode: int
    owner: str
    group: str
    mtime_ms: int
    atime_ms: int
    replication: int = 0  # files only
    block_size: int = 0
    blocks: tuple[BlockRecord, ...] = ()
    client: str = ""  # lease holder while under construction
    #: Under construction because of a truncate (TruncateOp): its block recovery cuts the
    #: last block to the length the namespace gives it.
    truncating: bool = False
    ns_quota: int = -1  # directories only; -1: no quota (images before quotas: none)
    ds_quota: int = -1


class UserRecord(msgspec.Struct, array_like=True):
    name: str
    #: The scrypt hash of images written before SCRAM logins (b"" since): a namespace
    #: that loads one converts it to the SCRAM credentials below.
    password_hash: bytes
    salt: bytes
    groups: tuple[str, ...]
    created_ms: int
    #: Changes with every password change (and a new user of the same name): tokens and
    #: sessions carry the generation they were issued under and die with it. Unique across
    #: the namespace's history, so a removed and re-added user's old tokens stay dead.
    generation: int = 0
    #: SCRAM-SHA-256 credentials (RFC 5802) of the scrypt-prehashed password, with ``salt``.
    stored_key: bytes = b""
    server_key: bytes = b""
    iterations: int = 0


class TokenKeyRecord(msgspec.Struct, array_like=True):
    key_id: int
    secret: bytes
    expires_ms: int
