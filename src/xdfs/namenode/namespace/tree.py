"""The NameNode's namespace: the inode tree, users and token keys, in memory (pure core).

:meth:`Namespace.apply` is the single mutation entry point, used both for live requests
(after the op is logged) and on replay of the edits log. Each op is validated completely
*before* anything changes, so a refused op raises a typed :mod:`xdfs.errors` exception and
leaves the namespace exactly as it was; applying the same ops to the same image always gives
the same namespace. Everything else here is a query or a permission check. Besides the tree,
every block id is indexed to its file, kept exact by apply and by image loading: the block
manager's way from a reported replica to its expected replication and committed length.

Pure: no I/O, no clock (every time comes inside an op), no logging. Not thread-safe: the
server applies and queries from one thread, and must not change the namespace while an
iterator returned from here (:meth:`Namespace.iter_inode_records`,
:meth:`Namespace.subtree_paths`) is in use.
"""

from __future__ import annotations

import bisect
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from xdfs.errors import (
    AlreadyExists,
    InvalidArgument,
    IsADirectory,
    LeaseError,
    NotFound,
)
from xdfs.namenode.namespace import image_codec, quota
from xdfs.namenode.namespace import permissions as perm
from xdfs.namenode.namespace.inodes import (
    FIRST_INODE_ID,
    ROOT_ID,
    DirInode,
    FileInode,
    Inode,
    file_length,
    link,
    unlink,
)
from xdfs.namenode.namespace.ops import (
    ALL_OPS,
    AddBlockOp,
    AddFileOp,
    AddTokenKeyOp,
    AddUserOp,
    AppendOp,
    CloseFileOp,
    ConcatOp,
    DeleteOp,
    ImageHeader,
    InodeRecord,
    MkdirOp,
    NewEpochOp,
    Op,
    ReassignLeaseOp,
    RemoveTokenKeyOp,
    RemoveUserOp,
    RenameOp,
    SetDataNodeSecretOp,
    SetOwnerOp,
    SetPasswordOp,
    SetPermissionOp,
    SetQuotaOp,
    SetReplicationOp,
    SetTimesOp,
    TokenKeyRecord,
    TruncateOp,
    UpdateBlocksOp,
    UserRecord,
)
from xdfs.namenode.namespace.paths import join, split_path
from xdfs.namenode.namespace.resolved import (
    INodesInPath,
    linked,
    moved,
    replaced,
    unlinked,
)
from xdfs.namenode.namespace.steps import Steps, drain
from xdfs.protocol.blocks import BlockRecord
from xdfs.protocol.namenode import ContentSummary, FileStatus

FIRST_BLOCK_ID = 1 << 30  # like HDFS, so block ids never look like small counters
FIRST_GENSTAMP = 1000
FIRST_EPOCH = 1  # a fresh namespace's active epoch; each promotion raises it (NewEpochOp)
ROOT_MODE = 0o755

#: Largest sorted-name cache patched in place (an O(n) list insert/delete, ~0.5 ms at this
#: size); beyond it a change drops the cache and the next listing sorts again.
SORTED_PATCH_MAX = 65536

#: A path as text, or as :meth:`Namespace.resolve` made it (then it is not walked again).
PathArg = str | INodesInPath
#: The resolutions an op is applied with (see Namespace.apply).
At = Sequence[INodesInPath]
_OpT = TypeVar("_OpT", bound=Op)
_Handler = Callable[["Namespace", Any, Sequence[INodesInPath]], tuple[int, ...]]
_HANDLERS: dict[type[Op], _Handler] = {}
_Method = Callable[["Namespace", _OpT, Sequence[INodesInPath]], tuple[int, ...]]


def _handles(op_type: type[_OpT]) -> Callable[[_Method[_OpT]], _Method[_OpT]]:
    """Register a method as the handler of one op type (the dispatch table of apply)."""

    def register(method: _Method[_OpT]) -> _Method[_OpT]:
        _HANDLERS[op_type] = method
        return method

    return register


class Namespace:
    """The inode tree plus users and token keys; see the module docstring."""

    def __init__(
        self, superuser: str, supergroup: str = "supergroup", *, root_mtime_ms: int = 0
    ) -> None:
        if not superuser or not supergroup:
            raise InvalidArgument("superuser and supergroup must not be empty")
        self.superuser = sys.intern(superuser)
        self.supergroup = sys.intern(supergroup)
        self.next_inode_id = FIRST_INODE_ID
        self.next_block_id = FIRST_BLOCK_ID
        self.next_genstamp = FIRST_GENSTAMP
        self.epoch = FIRST_EPOCH
        self.users: dict[str, UserRecord] = {}
        self.token_keys: dict[int, TokenKeyRecord] = {}
        #: What the next AddUserOp / SetPasswordOp gives as the user's generation.
        self.next_generation = 1
        #: DataNodes authenticate with this (empty: not set yet, none accepted).
        self.datanode_secret = b""
        #: Bumped by every op that links or unlinks an inode: a resolution made at another
        #: version is out of date (see resolved.py).
        self.version = 0
        self._root = DirInode(
            ROOT_ID, 0, "", ROOT_MODE, self.superuser, self.supergroup,
            root_mtime_ms, root_mtime_ms, {},
        )
        # Every directory by id: the way up the tree (inodes only point down, see inodes.py).
        self._dirs: dict[int, DirInode] = {ROOT_ID: self._root}
        # Files under construction -> lease holder (client name).
        self._uc: dict[FileInode, str] = {}
        # Files under construction because of a truncate (their recovery cuts the last
        # block to the namespace's length; see TruncateOp).
        self._truncating: set[FileInode] = set()
        # Every block id -> the file holding it: the block manager's way from a reported
        # replica to its expected replication and committed length. Rename keeps it valid
        # (inodes move, they are not copied); each op below that adds or drops a block
        # keeps it exact, and so does image loading.
        self._blocks: dict[int, FileInode] = {}
        self._inode_count = 1
        # The directories with a quota, by inode id, with their usage (see quota.py).
        self._quotas: dict[int, quota.Quota] = {}
        # Shared int objects for values repeated on most inodes (mode, block size): ints
        # above 256 are otherwise one 28-byte object per inode.
        self._ints: dict[int, int] = {}

    # --- counters ----------------------------------------------------------------------

    def allocate_inode_id(self) -> int:
        value = self.next_inode_id
        self.next_inode_id += 1
        return value

    def allocate_block_id(self) -> int:
        value = self.next_block_id
        self.next_block_id += 1
        return value

    def allocate_genstamp(self) -> int:
        value = self.next_genstamp
        self.next_genstamp += 1
        return value

    def _bump_inode_id(self, inode_id: int) -> None:
        # Replay must leave the counters ahead of every id seen, or a new file after
        # startup could reuse one.
        if inode_id >= self.next_inode_id:
            self.next_inode_id = inode_id + 1

    def _bump_blocks(self, blocks: Iterable[BlockRecord]) -> None:
        for block in blocks:
            if block.block_id >= self.next_block_id:
                self.next_block_id = block.block_id + 1
            if block.genstamp >= self.next_genstamp:
                self.next_genstamp = block.genstamp + 1

    # --- mutation ----------------------------------------------------------------------

    def apply(self, op: Op, at: Sequence[INodesInPath] = ()) -> tuple[int, ...]:
        """Validate ``op`` completely, then apply it; returns the ids of blocks that left the
        namespace (delete, overwrite, update_blocks/close_file dropping blocks).

        ``at``: the paths the op acts on, resolved by the caller (its plan) on this tree;
        one that is out of date is resolved again, so they only save walks. They are kept
        up to date by the change (see :mod:`.resolved`). Replay passes none."""
        handler = _HANDLERS.get(type(op))
        if handler is None:
            raise InvalidArgument(f"not a namespace op: {type(op).__name__}")
        return handler(self, op, at)

    @_handles(MkdirOp)
    def _mkdir(self, op: MkdirOp, at: At) -> tuple[int, ...]:
        iip, depth = self._to_make(op.path, at)
        if depth == 0:
            raise AlreadyExists("/ already exists")
        self._check_new_inode(op.inode_id, op.mode, op.owner, op.group)
        parent = iip.parent_dir(depth)
        name = iip.parts[depth - 1]
        if name in parent.children:
            raise AlreadyExists(f"{iip.prefix(depth)} already exists")
        chain = self._chain(iip, depth)
        quota.check(chain, 1, 0)
        # --- validated; mutate
        quota.add(chain, 1, 0)
        mtime = op.mtime_ms
        node = DirInode(
            op.inode_id, parent.id, name, self._shared_int(op.mode & perm.MODE_MASK),
            sys.intern(op.owner), sys.intern(op.group), mtime, mtime, {},
        )
        link(parent, node, SORTED_PATCH_MAX)
        self._dirs[node.id] = node
        parent.mtime_ms = mtime
        self._inode_count += 1
        self._bump_inode_id(op.inode_id)
        self._reshaped(at, linked, depth, parent, name, node)
        return ()

    @_handles(AddFileOp)
    def _add_file(self, op: AddFileOp, at: At) -> tuple[int, ...]:
        iip = self.resolved(op.path, at)
        if not iip.parts:
            raise IsADirectory("/ is a directory")
        self._check_new_inode(op.inode_id, op.mode, op.owner, op.group)
        if op.replication < 1 or op.block_size < 1:
            raise InvalidArgument("replication and block size must be >= 1")
        if not op.client:
            raise InvalidArgument("a file under construction needs a client name")
        parent = iip.parent_dir()
        name = iip.parts[-1]
        old = parent.children.get(name)
        if isinstance(old, DirInode):
            raise IsADirectory(f"{iip.path} is a directory")
        if old is not None and not op.overwrite:
            raise AlreadyExists(f"{iip.path} already exists")
        chain = self._chain(iip, len(iip.parts))
        new_names = 1 if old is None else 0
        quota.check(chain, new_names, 0)
        # --- validated; mutate
        if chain:  # an overwrite frees what the old file used
            freed = quota.file_space(old, old in self._uc) if isinstance(old, FileInode) else 0
            quota.add(chain, new_names, -freed)
        mtime = op.mtime_ms
        node = FileInode(
            op.inode_id, parent.id, name, self._shared_int(op.mode & perm.MODE_MASK),
            sys.intern(op.owner), sys.intern(op.group), mtime, mtime,
            op.replication, self._shared_int(op.block_size), (),
        )
        dropped: tuple[int, ...] = ()
        depth = len(iip.parts)
        if old is None:
            link(parent, node, SORTED_PATCH_MAX)
            self._inode_count += 1
            self._reshaped(at, linked, depth, parent, name, node)
        else:
            assert isinstance(old, FileInode)
            dropped = tuple(block.block_id for block in old.blocks)
            self._unindex_blocks(dropped)
            self._uc.pop(old, None)
            self._truncating.discard(old)
            parent.children[name] = node  # same name: the sorted-name cache stays valid
            self._reshaped(at, replaced, depth, old, node)
        self._uc[node] = op.client
        parent.mtime_ms = mtime
        self._bump_inode_id(op.inode_id)
        return dropped

    @_handles(AddBlockOp)
    def _add_block(self, op: AddBlockOp, at: At) -> tuple[int, ...]:
        iip = self.resolved(op.path, at)
        node = self._file_under_construction(iip)
        blocks = (*node.blocks, op.block)
        _check_blocks(blocks)
        self._check_block_owner(node, (op.block,))
        quota.add(*self._blocks_charge(iip, node, blocks, True))
        node.blocks = blocks
        self._blocks[op.block.block_id] = node
        self._bump_blocks((op.block,))
        return ()

    @_handles(UpdateBlocksOp)
    def _update_blocks(self, op: UpdateBlocksOp, at: At) -> tuple[int, ...]:
        iip = self.resolved(op.path, at)
        node = self._file_under_construction(iip)
        _check_blocks(op.blocks)
        self._check_block_owner(node, op.blocks)
        quota.add(*self._blocks_charge(iip, node, op.blocks, True))
        return self._replace_blocks(node, op.blocks)

    @_handles(CloseFileOp)
    def _close_file(self, op: CloseFileOp, at: At) -> tuple[int, ...]:
        iip = self.resolved(op.path, at)
        node = self._file_under_construction(iip)
        _check_blocks(op.blocks)
        self._check_block_owner(node, op.blocks)
        quota.add(*self._blocks_charge(iip, node, op.blocks, False))
        dropped = self._replace_blocks(node, op.blocks)
        node.mtime_ms = op.mtime_ms
        node.atime_ms = op.mtime_ms if op.atime_ms == op.mtime_ms else op.atime_ms
        del self._uc[node]
        self._truncating.discard(node)
        return dropped

    @_handles(AppendOp)
    def _append(self, op: AppendOp, at: At) -> tuple[int, ...]:
        iip = self.resolved(op.path, at)
        node = self._closed_file(iip)
        if not op.client:
            raise InvalidArgument("a file under construction needs a client name")
        last = op.last_block
        if last is not None:
            old = node.blocks[-1] if node.blocks else None
            if old is None or (old.block_id, old.num_bytes) != (last.block_id, last.num_bytes):
                raise InvalidArgument(f"{op.path}: {last} is not its last block")
            if last.genstamp <= old.genstamp:
                raise InvalidArgument(f"{op.path}: append needs a newer genstamp than {old}")
        blocks = node.blocks if last is None else (*node.blocks[:-1], last)
        # open again, its last block counts whole against space quotas (as HDFS)
        charge = self._blocks_charge(iip, node, blocks, True)
        # --- validated; mutate
        if last is not None:
            self._replace_blocks(node, blocks)
        self._uc[node] = op.client
        quota.add(*charge)
        return ()

    @_handles(TruncateOp)
    def _truncate(self, op: TruncateOp, at: At) -> tuple[int, ...]:
        iip = self.resolved(op.path, at)
        node = self._closed_file(iip)
        _check_blocks(op.blocks)
        kept = len(op.blocks)
        if kept and (
            kept > len(node.blocks)
            or op.blocks[:-1] != node.blocks[: kept - 1]
            or op.blocks[-1].block_id != node.blocks[kept - 1].block_id
            or op.blocks[-1].num_bytes > node.blocks[kept - 1].num_bytes
        ):
            raise InvalidArgument(f"{op.path}: truncate keeps blocks it does not have")
        if sum(b.num_bytes for b in op.blocks) != op.new_length or op.new_length < 0:
            raise InvalidArgument(f"{op.path}: blocks do not add up to {op.new_length}")
        if op.recovery_genstamp and not op.client:
            raise InvalidArgument("a truncate under recovery needs a lease holder")
        charge = self._blocks_charge(iip, node, op.blocks, bool(op.recovery_genstamp))
        # --- validated; mutate
        dropped = self._replace_blocks(node, op.blocks)
        quota.add(*charge)
        node.mtime_ms = op.mtime_ms
        if op.recovery_genstamp:
            self._uc[node] = op.client
            self._truncating.add(node)
            self.next_genstamp = max(self.next_genstamp, op.recovery_genstamp + 1)
        return dropped

    @_handles(ConcatOp)
    def _concat(self, op: ConcatOp, at: At) -> tuple[int, ...]:
        target_iip = self.resolved(op.target, at)
        target = self._closed_file(target_iip)
        sources = [self.resolved(path, at) for path in op.sources]
        nodes = [self._closed_file(iip) for iip in sources]
        if len(set(map(id, nodes))) != len(nodes) or target in nodes:
            raise InvalidArgument("concat: a file appears twice")
        if any(iip.inodes[-2] is not target_iip.inodes[-2] for iip in sources):
            raise InvalidArgument("concat: sources must be in the target's directory")
        # the sources' names go; their blocks take the target's replication
        chain = self._chain(target_iip, len(target_iip.parts))
        moved = (*target.blocks, *(b for node in nodes for b in node.blocks))
        space = quota.block_space(moved, target.block_size, target.replication, False) - sum(
            quota.file_space(node, False) for node in (target, *nodes))
        quota.check(chain, 0, space)
        # --- validated; mutate
        quota.add(chain, -len(nodes), space)
        parent = target_iip.parent_dir()
        blocks = list(target.blocks)
        for iip, node in zip(sources, nodes, strict=True):
            blocks.extend(node.blocks)
            unlink(parent, node.name, SORTED_PATCH_MAX)
            self._inode_count -= 1
            self._reshaped(at, unlinked, len(iip.parts), node)
        target.blocks = tuple(blocks)
        for block in blocks:
            self._blocks[block.block_id] = target
        target.mtime_ms = parent.mtime_ms = op.mtime_ms
        return ()

    def _closed_file(self, iip: INodesInPath) -> FileInode:
        node = iip.get()
        if not isinstance(node, FileInode):
            raise IsADirectory(f"{iip.path} is a directory")
        if node in self._uc:
            raise LeaseError(f"{iip.path} is open for writing")
        return node

    @_handles(DeleteOp)
    def _delete(self, op: DeleteOp, at: At) -> tuple[int, ...]:
        iip = self.resolved(op.path, at)
        if not iip.parts:
            raise InvalidArgument("cannot delete the root directory")
        node = iip.get()
        parent = iip.inodes[-2]
        assert isinstance(parent, DirInode)
        # --- validated; mutate
        chain = self._chain(iip, len(iip.parts))
        if chain:
            names, space = self._usage(node)
            quota.add(chain, -names, -space)
        unlink(parent, node.name, SORTED_PATCH_MAX)
        parent.mtime_ms = op.mtime_ms
        self._reshaped(at, unlinked, len(iip.parts), node)
        return self._forget_subtree(node)

    def _forget_subtree(self, top: Inode) -> tuple[int, ...]:
        """Drop a detached subtree from the indexes; returns its block ids."""
        block_ids: list[int] = []
        stack = [top]
        while stack:
            node = stack.pop()
            self._inode_count -= 1
            if isinstance(node, DirInode):
                del self._dirs[node.id]
                self._quotas.pop(node.id, None)
                stack.extend(node.children.values())
            else:
                assert isinstance(node, FileInode)
                block_ids.extend(block.block_id for block in node.blocks)
                self._uc.pop(node, None)
                self._truncating.discard(node)
        assert self._inode_count >= 1
        self._unindex_blocks(block_ids)
        return tuple(block_ids)

    @_handles(RenameOp)
    def _rename(self, op: RenameOp, at: At) -> tuple[int, ...]:
        src_iip, dst_iip = self.resolved(op.src, at), self.resolved(op.dst, at)
        src, dst = src_iip.parts, dst_iip.parts
        if not src:
            raise InvalidArgument("cannot rename the root directory")
        node = src_iip.get()
        src_parent = src_iip.inodes[-2]
        assert isinstance(src_parent, DirInode)
        if src == dst:
            return ()
        if dst[: len(src)] == src:
            raise InvalidArgument(
                f"cannot move a directory into itself: {src_iip.path} -> {dst_iip.path}"
            )
        if not dst:
            raise AlreadyExists("/ already exists")
        dst_parent = dst_iip.parent_dir()
        if dst[-1] in dst_parent.children:
            raise AlreadyExists(f"{dst_iip.path} already exists")
        self._move_charge(node, self._chain(src_iip, len(src)), self._chain(dst_iip, len(dst)))
        # --- validated; mutate (the quotas are, if any changed)
        unlink(src_parent, node.name, SORTED_PATCH_MAX)
        node.name = dst[-1]
        node.parent = dst_parent.id
        link(dst_parent, node, SORTED_PATCH_MAX)
        src_parent.mtime_ms = op.mtime_ms
        dst_parent.mtime_ms = op.mtime_ms
        self._reshaped(at, moved, len(src), node, len(dst), dst_parent, dst[-1])
        return ()

    @_handles(SetPermissionOp)
    def _set_permission(self, op: SetPermissionOp, at: At) -> tuple[int, ...]:
        node = self.resolved(op.path, at).get()
        if op.mode < 0:
            raise InvalidArgument(f"negative mode: {op.mode}")
        node.mode = self._shared_int(op.mode & perm.MODE_MASK)
        return ()

    @_handles(SetOwnerOp)
    def _set_owner(self, op: SetOwnerOp, at: At) -> tuple[int, ...]:
        node = self.resolved(op.path, at).get()
        if op.owner:
            node.owner = sys.intern(op.owner)
        if op.group:
            node.group = sys.intern(op.group)
        return ()

    @_handles(SetReplicationOp)
    def _set_replication(self, op: SetReplicationOp, at: At) -> tuple[int, ...]:
        iip = self.resolved(op.path, at)
        node = iip.get()
        if not isinstance(node, FileInode):
            raise IsADirectory(f"{iip.path} is a directory; replication is per file")
        if op.replication < 1:
            raise InvalidArgument(f"replication must be >= 1, got {op.replication}")
        chain = self._chain(iip, len(iip.parts))
        if chain:
            is_open = node in self._uc
            delta = quota.block_space(
                node.blocks, node.block_size, op.replication, is_open
            ) - quota.file_space(node, is_open)
            quota.check(chain, 0, delta)
            quota.add(chain, 0, delta)
        node.replication = op.replication
        return ()

    @_handles(SetTimesOp)
    def _set_times(self, op: SetTimesOp, at: At) -> tuple[int, ...]:
        node = self.resolved(op.path, at).get()
        if op.mtime_ms < -1 or op.atime_ms < -1:
            raise InvalidArgument("times must be >= 0, or -1 for unchanged")
        if op.mtime_ms != -1:
            node.mtime_ms = op.mtime_ms
        if op.atime_ms != -1:
            # share the int object with mtime when equal: one 32-byte int less per inode
            node.atime_ms = node.mtime_ms if op.atime_ms == node.mtime_ms else op.atime_ms
        return ()

    @_handles(ReassignLeaseOp)
    def _reassign_lease(self, op: ReassignLeaseOp, at: At) -> tuple[int, ...]:
        node = self._file_under_construction(self.resolved(op.path, at))
        if not op.client:
            raise InvalidArgument("a lease needs a client name")
        if op.recovery_genstamp < 0:
            raise InvalidArgument(f"negative recovery genstamp {op.recovery_genstamp}")
        self._uc[node] = op.client
        self.next_genstamp = max(self.next_genstamp, op.recovery_genstamp + 1)
        return ()

    @_handles(SetQuotaOp)
    def _set_quota(self, op: SetQuotaOp, at: At) -> tuple[int, ...]:
        iip = self.resolved(op.path, at)
        node = iip.get()
        if not isinstance(node, DirInode):
            raise InvalidArgument(f"Cannot set quota on a file: {iip.path}")
        if min(op.ns_quota, op.ds_quota) < quota.NO_QUOTA:
            raise InvalidArgument(
                f"Illegal value for nsQuota or ssQuota: {op.ns_quota} and {op.ds_quota}"
            )
        # --- validated; mutate
        if op.ns_quota == op.ds_quota == quota.NO_QUOTA:
            self._quotas.pop(node.id, None)
            return ()
        known = self._quotas.get(node.id)
        if known is None:  # the one walk: usage is kept from now on
            names, space = quota.usage(node, self._quotas, self._uc)
            self._quotas[node.id] = quota.Quota(op.ns_quota, op.ds_quota, names, space)
        else:
            known.ns_quota, known.ds_quota = op.ns_quota, op.ds_quota
        return ()

    @_handles(AddUserOp)
    def _add_user(self, op: AddUserOp, at: At) -> tuple[int, ...]:
        if not op.name:
            raise InvalidArgument("a user needs a name")
        if any(not group for group in op.groups):
            raise InvalidArgument("empty group name")
        groups = tuple(sys.intern(group) for group in op.groups)
        self.users[op.name] = UserRecord(
            op.name, op.password_hash, op.salt, groups, op.created_ms, self._new_generation()
        )
        return ()

    @_handles(RemoveUserOp)
    def _remove_user(self, op: RemoveUserOp, at: At) -> tuple[int, ...]:
        if op.name not in self.users:
            raise NotFound(f"no such user: {op.name}")
        del self.users[op.name]
        return ()

    @_handles(SetPasswordOp)
    def _set_password(self, op: SetPasswordOp, at: At) -> tuple[int, ...]:
        old = self.users.get(op.name)
        if old is None:
            raise NotFound(f"no such user: {op.name}")
        self.users[op.name] = UserRecord(
            old.name, op.password_hash, op.salt, old.groups, old.created_ms,
            self._new_generation(),
        )
        return ()

    def _new_generation(self) -> int:
        # Replay gives every user the same generation again: deterministic, like ids.
        value = self.next_generation
        self.next_generation += 1
        return value

    @_handles(SetDataNodeSecretOp)
    def _set_datanode_secret(self, op: SetDataNodeSecretOp, at: At) -> tuple[int, ...]:
        if len(op.secret) < 16:
            raise InvalidArgument("the DataNode secret must be at least 16 bytes")
        self.datanode_secret = op.secret
        return ()

    @_handles(AddTokenKeyOp)
    def _add_token_key(self, op: AddTokenKeyOp, at: At) -> tuple[int, ...]:
        # Refused rather than replaced: two secrets under one id would make tokens signed
        # with the first fail verification after a restart.
        if op.key_id in self.token_keys:
            raise AlreadyExists(f"token key {op.key_id} already exists")
        self.token_keys[op.key_id] = TokenKeyRecord(op.key_id, op.secret, op.expires_ms)
        return ()

    @_handles(RemoveTokenKeyOp)
    def _remove_token_key(self, op: RemoveTokenKeyOp, at: At) -> tuple[int, ...]:
        if op.key_id not in self.token_keys:
            raise NotFound(f"no token key {op.key_id}")
        del self.token_keys[op.key_id]
        return ()

    @_handles(NewEpochOp)
    def _new_epoch(self, op: NewEpochOp, at: At) -> tuple[int, ...]:
        if op.epoch <= self.epoch:
            raise InvalidArgument(f"epoch {op.epoch} is not above the current {self.epoch}")
        self.epoch = op.epoch
        return ()

    # --- mutation helpers ----------------------------------------------------------------

    def _check_new_inode(self, inode_id: int, mode: int, owner: str, group: str) -> None:
        if inode_id < FIRST_INODE_ID:
            raise InvalidArgument(f"inode id must be >= {FIRST_INODE_ID}, got {inode_id}")
        if inode_id in self._dirs:
            raise InvalidArgument(f"inode id {inode_id} is in use")
        if mode < 0:
            raise InvalidArgument(f"negative mode: {mode}")
        if not owner or not group:
            raise InvalidArgument("owner and group must not be empty")

    def _chain(self, iip: INodesInPath, depth: int) -> quota.Chain:
        """The quotas a change at component ``depth`` of ``iip`` counts against: those of
        the directories above it, root first. Empty (and free) when no directory has one."""
        quotas = self._quotas
        if not quotas:
            return []
        return [
            (found, iip.prefix(index))
            for index, node in enumerate(iip.inodes[:depth])
            if (found := quotas.get(node.id)) is not None
        ]

    def _usage(self, node: Inode) -> tuple[int, int]:
        """(names, space) of ``node``'s tree: a directory with a quota knows it."""
        known = self._quotas.get(node.id) if isinstance(node, DirInode) else None
        if known is not None:
            return known.names, known.space
        return quota.usage(node, self._quotas, self._uc)

    def _blocks_charge(
        self, iip: INodesInPath, node: FileInode, blocks: Sequence[BlockRecord], open_: bool
    ) -> tuple[quota.Chain, int, int]:
        """Check what giving ``node`` these ``blocks`` (and leaving it open or not) changes
        in the quotas above it; the (chain, names, space) to :func:`quota.add` once done."""
        chain = self._chain(iip, len(iip.parts))
        if not chain:
            return chain, 0, 0
        space = quota.block_space(blocks, node.block_size, node.replication, open_)
        delta = space - quota.file_space(node, node in self._uc)
        quota.check(chain, 0, delta)
        return chain, 0, delta

    def _move_charge(self, node: Inode, src: quota.Chain, dst: quota.Chain) -> None:
        """A move of ``node`` from under the quotas ``src`` to under ``dst``: checked
        against the ones it enters, then counted (a quota above both sees no change)."""
        if not src and not dst:
            return
        src_ids = {id(entry[0]) for entry in src}
        dst_ids = {id(entry[0]) for entry in dst}
        leaving = [entry for entry in src if id(entry[0]) not in dst_ids]
        entering = [entry for entry in dst if id(entry[0]) not in src_ids]
        if not leaving and not entering:
            return
        names, space = self._usage(node)
        quota.check(entering, names, space)
        quota.add(leaving, -names, -space)
        quota.add(entering, names, space)

    def _check_block_owner(self, node: FileInode, blocks: Iterable[BlockRecord]) -> None:
        for block in blocks:
            owner = self._blocks.get(block.block_id)
            if owner is not None and owner is not node:
                raise InvalidArgument(f"block {block.block_id} belongs to another file")

    def _replace_blocks(self, node: FileInode, blocks: tuple[BlockRecord, ...]) -> tuple[int, ...]:
        dropped = _dropped_block_ids(node.blocks, blocks)
        self._unindex_blocks(dropped)
        node.blocks = tuple(blocks)
        for block in blocks:
            self._blocks[block.block_id] = node
        self._bump_blocks(blocks)
        return dropped

    def _unindex_blocks(self, block_ids: Iterable[int]) -> None:
        for block_id in block_ids:
            del self._blocks[block_id]

    def _shared_int(self, value: int) -> int:
        return self._ints.setdefault(value, value)

    def _file_under_construction(self, iip: INodesInPath) -> FileInode:
        node = iip.get()
        if not isinstance(node, FileInode):
            raise IsADirectory(f"{iip.path} is a directory")
        if node not in self._uc:
            raise LeaseError(f"{iip.path} is not under construction")
        return node

    # --- resolving paths (the one walk from the root by name) ---------------------------

    def resolve(self, path: str) -> INodesInPath:
        """Split and validate ``path`` (InvalidPath) and walk it from the root: the chain of
        inodes every later step of an operation uses (see :mod:`.resolved`). The only place
        that walks the tree by name."""
        parts = split_path(path)
        node: Inode = self._root
        inodes = [node]
        append = inodes.append
        for name in parts:
            if type(node) is not DirInode:
                break
            child = node.children.get(name)
            if child is None:
                break
            append(child)
            node = child
        normal = path if len(path) == 1 or path[-1] != "/" else join(parts)
        return INodesInPath(normal, parts, inodes, self.version)

    def resolved(self, path: str, at: Sequence[INodesInPath]) -> INodesInPath:
        """``path`` as one of ``at`` resolved it, if that is up to date; else walked now."""
        for iip in at:
            if iip.version == self.version and iip.path == path:
                return iip
        return self.resolve(path)

    def fresh(self, iip: INodesInPath) -> INodesInPath:
        """``iip`` if the tree has not changed shape since it was made, else walked again."""
        return iip if iip.version == self.version else self.resolve(iip.path)

    def _at(self, path: PathArg) -> INodesInPath:
        return self.fresh(path) if isinstance(path, INodesInPath) else self.resolve(path)

    def _to_make(self, path: str, at: Sequence[INodesInPath]) -> tuple[INodesInPath, int]:
        """For a mkdir of ``path``: a resolution and the depth of ``path`` in it. Besides
        ``path`` itself, one of a path below it whose first missing component ``path`` is
        (``mkdir -p`` and the parents of a create make one directory after the other)."""
        for iip in at:
            if iip.version != self.version:
                continue
            if iip.path == path:
                return iip, len(iip.parts)
            depth = len(iip.inodes)
            if depth <= len(iip.parts) and iip.prefix(depth) == path:
                return iip, depth
        iip = self.resolve(path)
        return iip, len(iip.parts)

    def _reshaped(self, at: At, update: Callable[..., bool], *change: object) -> None:
        """The tree's shape changed: every older resolution is out of date, except those of
        ``at`` that ``update(iip, *change)`` brings up to date (see resolved.py)."""
        old = self.version
        self.version = old + 1
        for iip in at:
            if iip.version == old and update(iip, *change):
                iip.version = old + 1

    def child(self, iip: INodesInPath, name: str) -> INodesInPath:
        """``name`` inside the path ``iip`` resolves, without walking from the root again
        (InvalidPath when the longer path breaks a limit)."""
        iip = self._at(iip)
        parts = split_path(f"{iip.path.rstrip('/')}/{name}")
        inodes = list(iip.inodes)
        last = iip.last
        if isinstance(last, DirInode) and (found := last.children.get(name)) is not None:
            inodes.append(found)
        return INodesInPath(join(parts), parts, inodes, self.version)

    def locate(self, node: Inode) -> INodesInPath:
        """The resolution of an inode of the tree, found from the inode up."""
        inodes = [node]
        while node.id != ROOT_ID:
            node = self._dirs[node.parent]
            inodes.append(node)
        inodes.reverse()
        parts = tuple(inode.name for inode in inodes[1:])
        return INodesInPath(join(parts), parts, inodes, self.version)

    def path_of(self, node: Inode) -> str:
        names: list[str] = []
        while node.id != ROOT_ID:
            names.append(node.name)
            node = self._dirs[node.parent]
        names.reverse()
        return join(names)

    def _sorted_names(self, node: DirInode) -> list[str]:
        if node.sorted_names is None:
            node.sorted_names = sorted(node.children)
        assert len(node.sorted_names) == len(node.children)
        return node.sorted_names

    # --- queries -------------------------------------------------------------------------

    # A path argument is text (walked here) or what resolve() made of it (walked no more).

    def exists(self, path: PathArg) -> bool:
        return self._at(path).exists

    def is_dir(self, path: PathArg) -> bool:
        return isinstance(self._at(path).get(), DirInode)

    def stat(self, path: PathArg) -> FileStatus:
        iip = self._at(path)
        return self._status(iip.get(), iip.path)

    def _status(self, node: Inode, path: str) -> FileStatus:
        if isinstance(node, DirInode):
            return FileStatus(
                path, True, 0, 0, 0, node.mtime_ms, node.atime_ms, node.mode, node.owner,
                node.group, node.id, len(node.children), False,
            )
        assert isinstance(node, FileInode)
        return FileStatus(
            path, False, file_length(node), node.replication, node.block_size, node.mtime_ms,
            node.atime_ms, node.mode, node.owner, node.group, node.id, 0, node in self._uc,
        )

    def list_dir(
        self, path: PathArg, start_after: str = "", limit: int = 1000
    ) -> tuple[list[FileStatus], int]:
        """One page of entries sorted by name, strictly after ``start_after``; also how many
        entries remain after it. A file lists itself."""
        if limit < 1:
            raise InvalidArgument(f"limit must be >= 1, got {limit}")
        iip = self._at(path)
        node = iip.get()
        parts, base = iip.parts, iip.path
        if not isinstance(node, DirInode):
            if parts[-1] > start_after:
                return [self._status(node, base)], 0
            return [], 0
        names = self._sorted_names(node)
        start = bisect.bisect_right(names, start_after)
        page = names[start : start + limit]
        prefix = base if parts else ""
        children = node.children
        entries = [self._status(children[name], f"{prefix}/{name}") for name in page]
        return entries, len(names) - start - len(page)

    def get_blocks(self, path: PathArg) -> tuple[BlockRecord, ...]:
        iip = self._at(path)
        node = iip.get()
        if not isinstance(node, FileInode):
            raise IsADirectory(f"{iip.path} is a directory")
        return node.blocks

    # --- blocks (the block manager's view) ----------------------------------------------

    def block_count(self) -> int:
        return len(self._blocks)

    def block_file(self, block_id: int) -> FileInode | None:
        """The file holding ``block_id``, None when no file does."""
        return self._blocks.get(block_id)

    def is_open(self, node: FileInode) -> bool:
        """True while the file is under construction."""
        return node in self._uc

    def open_last_blocks(self) -> list[int]:
        """The last block of every file under construction: being written, its length is
        not known yet (few files are open, so this is cheap)."""
        return [node.blocks[-1].block_id for node in self._uc if node.blocks]

    def walk(self, path: PathArg) -> Iterator[tuple[str, Inode]]:
        """(path, inode) of ``path`` and everything beneath it, parents first, siblings by
        name. Raises NotFound at once."""
        iip = self._at(path)
        return self._walk_sorted(iip.get(), iip.path)

    def subtree_extent(self, path: PathArg) -> tuple[int, int]:
        """How far below ``path`` its subtree reaches: the most components and the most
        UTF-8 bytes (``/name`` each) any path in it adds to ``path`` (0, 0 for a file).
        Walks the whole subtree."""
        node = self._at(path).get()
        depth_max = bytes_max = 0
        stack: list[tuple[Inode, int, int]] = [(node, 0, 0)]
        while stack:
            current, depth, size = stack.pop()
            depth_max = max(depth_max, depth)
            bytes_max = max(bytes_max, size)
            if isinstance(current, DirInode):
                stack.extend(
                    (child, depth + 1, size + 1 + len(name.encode("utf-8", "surrogatepass")))
                    for name, child in current.children.items()
                )
        return depth_max, bytes_max

    def check_name_quota(self, path: PathArg, names: int) -> None:
        """Raise NSQuotaExceeded if ``names`` new names on the way to ``path`` (below its
        deepest existing directory) would take a quota over: what a plan of several ops
        (``mkdir -p``, a create with parents) checks first, so a refusal logs none of them."""
        iip = self._at(path)
        quota.check(self._chain(iip, len(iip.inodes)), names, 0)

    def check_block_quota(self, path: PathArg, blocks: Sequence[BlockRecord]) -> None:
        """Raise DSQuotaExceeded if the open file at ``path`` may not have ``blocks`` (its
        next block included): what ``add_block`` checks before choosing targets, as HDFS."""
        iip = self._at(path)
        node = iip.get()
        if isinstance(node, FileInode):
            self._blocks_charge(iip, node, blocks, True)

    def has_quotas(self) -> bool:
        """Whether any directory has a quota."""
        return bool(self._quotas)

    def quota_of(self, path: PathArg) -> quota.Quota | None:
        """The quota of a directory (with its usage), None when it has none."""
        return self._quotas.get(self._at(path).get().id)

    def content_summary(self, path: PathArg) -> ContentSummary:
        return drain(self.content_summary_steps(path))

    def content_summary_steps(self, path: PathArg) -> Steps[ContentSummary]:
        """:meth:`content_summary`, one inode per step (semantics: :mod:`.steps`)."""
        node = self._at(path).get()
        length = files = dirs = consumed = 0
        stack = [node]
        while stack:
            current = stack.pop()
            if isinstance(current, DirInode):
                dirs += 1
                stack.extend(current.children.values())  # the children as of this step
            else:
                assert isinstance(current, FileInode)
                size = file_length(current)
                files += 1
                length += size
                consumed += size * current.replication
            yield
        limits = self._quotas.get(node.id) if isinstance(node, DirInode) else None
        if limits is None:
            return ContentSummary(length, files, dirs, consumed)
        return ContentSummary(length, files, dirs, consumed, limits.ns_quota, limits.ds_quota)

    def lease_holder(self, path: PathArg) -> str:
        node = self._at(path).get()
        return self._uc.get(node, "") if isinstance(node, FileInode) else ""

    def is_truncating(self, node: FileInode) -> bool:
        """True while the file waits for the block recovery of a truncate (TruncateOp)."""
        return node in self._truncating

    def lease_holders(self) -> list[tuple[str, str]]:
        """(client, owner) of every file under construction (no path is built or checked)."""
        return [(client, node.owner) for node, client in self._uc.items()]

    def files_under_construction(self) -> list[tuple[str, str]]:
        """(path, client) of every file under construction, sorted by path."""
        return sorted((self.path_of(node), client) for node, client in self._uc.items())

    def missing_ancestors(self, path: PathArg) -> list[str]:
        """The directories ``mkdir -p path`` would create, top-down (``path`` included when
        absent). NotADirectory if a file sits on the way; AlreadyExists if ``path`` is a
        file (``mkdir -p`` must not succeed silently on it)."""
        return self._at(path).missing()

    def rename_target(self, src: PathArg, dst: PathArg) -> INodesInPath:
        """``mv`` semantics: into ``dst`` when it is an existing directory, else onto it."""
        src_iip, dst_iip = self._at(src), self._at(dst)
        if src_iip.parts and isinstance(dst_iip.last, DirInode):
            return self.child(dst_iip, src_iip.parts[-1])
        return dst_iip

    def inode_count(self) -> int:
        return self._inode_count

    def subtree_paths(self, path: PathArg) -> Iterator[str]:
        """``path`` and everything beneath it, parents first, siblings by name. Raises
        NotFound at once (not at the first ``next``)."""
        return (item_path for item_path, _ in self.walk(path))

    def _walk_sorted(self, top: Inode, top_path: str) -> Iterator[tuple[str, Inode]]:
        """Pre-order walk, siblings sorted by name. Iterative: depth may reach DEPTH_MAX,
        beyond Python's recursion limit. Does not build sorted-name caches, so a dump or a
        recursive walk leaves no memory behind."""
        yield top_path, top
        if not isinstance(top, DirInode):
            return
        stack: list[tuple[str, DirInode, Iterator[str]]] = [
            (top_path, top, iter(self._names_snapshot(top)))
        ]
        while stack:
            base, directory, names = stack[-1]
            prefix = "" if base == "/" else base
            for name in names:
                child = directory.children.get(name)
                if child is None:  # removed since the snapshot
                    continue
                child_path = f"{prefix}/{name}"
                yield child_path, child
                if isinstance(child, DirInode):
                    stack.append((child_path, child, iter(self._names_snapshot(child))))
                    break
            else:
                stack.pop()

    @staticmethod
    def _names_snapshot(node: DirInode) -> list[str]:
        cached = node.sorted_names
        return list(cached) if cached is not None else sorted(node.children)

    # --- users ---------------------------------------------------------------------------

    def groups_of(self, user: str) -> frozenset[str]:
        record = self.users.get(user)
        groups = frozenset(record.groups) if record is not None else frozenset()
        if user == self.superuser:
            groups |= {self.supergroup}
        return groups

    def is_superuser(self, user: str) -> bool:
        return user == self.superuser or self.supergroup in self.groups_of(user)

    # --- permissions ---------------------------------------------------------------------

    def check_access(
        self,
        user: str,
        path: PathArg,
        *,
        access: int = 0,
        parent_access: int = 0,
        ancestor_access: int = 0,
        sub_access: int = 0,
        owner: bool = False,
        parent_owner_sticky: bool = False,
    ) -> None:
        """POSIX checks in the order of HDFS's FSPermissionChecker; raises AccessDenied
        (or NotFound/NotADirectory when an inode the check needs is missing)."""
        if isinstance(path, str):
            split_path(path)  # a bad path is InvalidPath for every user, superusers too
        if (access | parent_access | ancestor_access | sub_access) & ~perm.ALL or min(
            access, parent_access, ancestor_access, sub_access
        ) < 0:
            for name, bits in (("access", access), ("parent_access", parent_access),
                               ("ancestor_access", ancestor_access), ("sub_access", sub_access)):
                perm.check_bits(name, bits)
        groups = self.groups_of(user)
        if user == self.superuser or self.supergroup in groups:  # is_superuser, one lookup
            return
        iip = self._at(path)
        checker = perm.AccessCheck(user, groups, iip.parts, iip.inodes, self._walk_sorted)
        checker.traverse()
        if parent_owner_sticky:
            checker.sticky()
        if ancestor_access:
            checker.ancestor(ancestor_access)
        if parent_access:
            checker.parent(parent_access)
        if access:
            checker.self_(access)
        if sub_access:
            checker.subtree(sub_access)
        if owner:
            checker.owner()

    def subtree_access_steps(self, user: str, path: PathArg, bits: int) -> Steps[None]:
        """The ``sub_access`` part of :meth:`check_access` alone, one inode per step (the
        rest of the check is the caller's): ``bits`` on every directory under ``path``."""
        if self.is_superuser(user):
            return
        iip = self._at(path)
        checker = perm.AccessCheck(
            user, self.groups_of(user), iip.parts, iip.inodes, self._walk_sorted)
        yield from checker.subtree_steps(bits)

    # --- images --------------------------------------------------------------------------

    def iter_inode_records(self) -> Iterator[InodeRecord]:
        """Every inode, root first, parents before children (see image_codec)."""
        return image_codec.inode_records(self)

    def user_records(self) -> list[UserRecord]:
        return [self.users[name] for name in sorted(self.users)]

    def token_key_records(self) -> list[TokenKeyRecord]:
        return [self.token_keys[key_id] for key_id in sorted(self.token_keys)]

    @classmethod
    def from_image(
        cls,
        header: ImageHeader,
        inodes: Iterable[InodeRecord],
        users: Iterable[UserRecord],
        token_keys: Iterable[TokenKeyRecord],
    ) -> Namespace:
        """Rebuild a namespace exactly; StorageError("corrupt image ...") when the records
        do not form a tree that matches the header."""
        ns = cls(header.superuser, header.supergroup)
        image_codec.load_into(ns, header, inodes, users, token_keys)
        return ns

    # --- equality ------------------------------------------------------------------------

    def canonical_dump(self) -> list[tuple[object, ...]]:
        """Everything that defines this namespace, deterministically ordered: two namespaces
        are equal iff their dumps are. For replay/backup tests, not for large trees."""
        return image_codec.canonical_dump(self)


# Every op of the contract has exactly one handler (a new op must not be silently ignored).
assert set(_HANDLERS) == set(ALL_OPS), set(ALL_OPS) ^ set(_HANDLERS)


# --- module helpers ------------------------------------------------------------------------


def _check_blocks(blocks: tuple[BlockRecord, ...]) -> None:
    ids = {block.block_id for block in blocks}
    if len(ids) != len(blocks):
        raise InvalidArgument("a block appears twice in one file")
    for block in blocks:
        if block.block_id < 0 or block.genstamp < 0 or block.num_bytes < 0:
            raise InvalidArgument(f"negative block id, genstamp or length: {block!r}")


def _dropped_block_ids(
    old: tuple[BlockRecord, ...], new: tuple[BlockRecord, ...]
) -> tuple[int, ...]:
    kept = {block.block_id for block in new}
    return tuple(block.block_id for block in old if block.block_id not in kept)
