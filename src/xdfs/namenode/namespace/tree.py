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
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from xdfs.errors import (
    AlreadyExists,
    InvalidArgument,
    IsADirectory,
    LeaseError,
    NotADirectory,
    NotFound,
)
from xdfs.namenode.namespace import image_codec
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
    CloseFileOp,
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
    SetReplicationOp,
    SetTimesOp,
    TokenKeyRecord,
    UpdateBlocksOp,
    UserRecord,
)
from xdfs.namenode.namespace.paths import join, split_path
from xdfs.protocol.blocks import BlockRecord
from xdfs.protocol.namenode import ContentSummary, FileStatus

FIRST_BLOCK_ID = 1 << 30  # like HDFS, so block ids never look like small counters
FIRST_GENSTAMP = 1000
FIRST_EPOCH = 1  # a fresh namespace's active epoch; each promotion raises it (NewEpochOp)
ROOT_MODE = 0o755

#: Largest sorted-name cache patched in place (an O(n) list insert/delete, ~0.5 ms at this
#: size); beyond it a change drops the cache and the next listing sorts again.
SORTED_PATCH_MAX = 65536

Parts = tuple[str, ...]
_OpT = TypeVar("_OpT", bound=Op)
_Handler = Callable[["Namespace", Any], tuple[int, ...]]
_HANDLERS: dict[type[Op], _Handler] = {}
_Method = Callable[["Namespace", _OpT], tuple[int, ...]]


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
        self._root = DirInode(
            ROOT_ID, 0, "", ROOT_MODE, self.superuser, self.supergroup,
            root_mtime_ms, root_mtime_ms, {},
        )
        # Every directory by id: the way up the tree (inodes only point down, see inodes.py).
        self._dirs: dict[int, DirInode] = {ROOT_ID: self._root}
        # Files under construction -> lease holder (client name).
        self._uc: dict[FileInode, str] = {}
        # Every block id -> the file holding it: the block manager's way from a reported
        # replica to its expected replication and committed length. Rename keeps it valid
        # (inodes move, they are not copied); each op below that adds or drops a block
        # keeps it exact, and so does image loading.
        self._blocks: dict[int, FileInode] = {}
        self._inode_count = 1
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

    def apply(self, op: Op) -> tuple[int, ...]:
        """Validate ``op`` completely, then apply it; returns the ids of blocks that left the
        namespace (delete, overwrite, update_blocks/close_file dropping blocks)."""
        handler = _HANDLERS.get(type(op))
        if handler is None:
            raise InvalidArgument(f"not a namespace op: {type(op).__name__}")
        return handler(self, op)

    @_handles(MkdirOp)
    def _mkdir(self, op: MkdirOp) -> tuple[int, ...]:
        parts = split_path(op.path)
        if not parts:
            raise AlreadyExists("/ already exists")
        self._check_new_inode(op.inode_id, op.mode, op.owner, op.group)
        parent = self._parent_dir(parts)
        if parts[-1] in parent.children:
            raise AlreadyExists(f"{join(parts)} already exists")
        # --- validated; mutate
        mtime = op.mtime_ms
        node = DirInode(
            op.inode_id, parent.id, parts[-1], self._shared_int(op.mode & perm.MODE_MASK),
            sys.intern(op.owner), sys.intern(op.group), mtime, mtime, {},
        )
        link(parent, node, SORTED_PATCH_MAX)
        self._dirs[node.id] = node
        parent.mtime_ms = mtime
        self._inode_count += 1
        self._bump_inode_id(op.inode_id)
        return ()

    @_handles(AddFileOp)
    def _add_file(self, op: AddFileOp) -> tuple[int, ...]:
        parts = split_path(op.path)
        if not parts:
            raise IsADirectory("/ is a directory")
        self._check_new_inode(op.inode_id, op.mode, op.owner, op.group)
        if op.replication < 1 or op.block_size < 1:
            raise InvalidArgument("replication and block size must be >= 1")
        if not op.client:
            raise InvalidArgument("a file under construction needs a client name")
        parent = self._parent_dir(parts)
        name = parts[-1]
        old = parent.children.get(name)
        if isinstance(old, DirInode):
            raise IsADirectory(f"{join(parts)} is a directory")
        if old is not None and not op.overwrite:
            raise AlreadyExists(f"{join(parts)} already exists")
        # --- validated; mutate
        mtime = op.mtime_ms
        node = FileInode(
            op.inode_id, parent.id, name, self._shared_int(op.mode & perm.MODE_MASK),
            sys.intern(op.owner), sys.intern(op.group), mtime, mtime,
            op.replication, self._shared_int(op.block_size), (),
        )
        dropped: tuple[int, ...] = ()
        if old is None:
            link(parent, node, SORTED_PATCH_MAX)
            self._inode_count += 1
        else:
            assert isinstance(old, FileInode)
            dropped = tuple(block.block_id for block in old.blocks)
            self._unindex_blocks(dropped)
            self._uc.pop(old, None)
            parent.children[name] = node  # same name: the sorted-name cache stays valid
        self._uc[node] = op.client
        parent.mtime_ms = mtime
        self._bump_inode_id(op.inode_id)
        return dropped

    @_handles(AddBlockOp)
    def _add_block(self, op: AddBlockOp) -> tuple[int, ...]:
        node = self._file_under_construction(op.path)
        _check_blocks((*node.blocks, op.block))
        self._check_block_owner(node, (op.block,))
        node.blocks = (*node.blocks, op.block)
        self._blocks[op.block.block_id] = node
        self._bump_blocks((op.block,))
        return ()

    @_handles(UpdateBlocksOp)
    def _update_blocks(self, op: UpdateBlocksOp) -> tuple[int, ...]:
        node = self._file_under_construction(op.path)
        _check_blocks(op.blocks)
        self._check_block_owner(node, op.blocks)
        return self._replace_blocks(node, op.blocks)

    @_handles(CloseFileOp)
    def _close_file(self, op: CloseFileOp) -> tuple[int, ...]:
        node = self._file_under_construction(op.path)
        _check_blocks(op.blocks)
        self._check_block_owner(node, op.blocks)
        dropped = self._replace_blocks(node, op.blocks)
        node.mtime_ms = op.mtime_ms
        node.atime_ms = op.mtime_ms if op.atime_ms == op.mtime_ms else op.atime_ms
        del self._uc[node]
        return dropped

    @_handles(DeleteOp)
    def _delete(self, op: DeleteOp) -> tuple[int, ...]:
        parts = split_path(op.path)
        if not parts:
            raise InvalidArgument("cannot delete the root directory")
        parent, node = self._get_with_parent(parts)
        # --- validated; mutate
        unlink(parent, node.name, SORTED_PATCH_MAX)
        parent.mtime_ms = op.mtime_ms
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
                stack.extend(node.children.values())
            else:
                assert isinstance(node, FileInode)
                block_ids.extend(block.block_id for block in node.blocks)
                self._uc.pop(node, None)
        assert self._inode_count >= 1
        self._unindex_blocks(block_ids)
        return tuple(block_ids)

    @_handles(RenameOp)
    def _rename(self, op: RenameOp) -> tuple[int, ...]:
        src, dst = split_path(op.src), split_path(op.dst)
        if not src:
            raise InvalidArgument("cannot rename the root directory")
        src_parent, node = self._get_with_parent(src)
        if src == dst:
            return ()
        if dst[: len(src)] == src:
            raise InvalidArgument(
                f"cannot move a directory into itself: {join(src)} -> {join(dst)}"
            )
        if not dst:
            raise AlreadyExists("/ already exists")
        dst_parent = self._parent_dir(dst)
        if dst[-1] in dst_parent.children:
            raise AlreadyExists(f"{join(dst)} already exists")
        # --- validated; mutate
        unlink(src_parent, node.name, SORTED_PATCH_MAX)
        node.name = dst[-1]
        node.parent = dst_parent.id
        link(dst_parent, node, SORTED_PATCH_MAX)
        src_parent.mtime_ms = op.mtime_ms
        dst_parent.mtime_ms = op.mtime_ms
        return ()

    @_handles(SetPermissionOp)
    def _set_permission(self, op: SetPermissionOp) -> tuple[int, ...]:
        node = self._get(split_path(op.path))
        if op.mode < 0:
            raise InvalidArgument(f"negative mode: {op.mode}")
        node.mode = self._shared_int(op.mode & perm.MODE_MASK)
        return ()

    @_handles(SetOwnerOp)
    def _set_owner(self, op: SetOwnerOp) -> tuple[int, ...]:
        node = self._get(split_path(op.path))
        if op.owner:
            node.owner = sys.intern(op.owner)
        if op.group:
            node.group = sys.intern(op.group)
        return ()

    @_handles(SetReplicationOp)
    def _set_replication(self, op: SetReplicationOp) -> tuple[int, ...]:
        parts = split_path(op.path)
        node = self._get(parts)
        if not isinstance(node, FileInode):
            raise IsADirectory(f"{join(parts)} is a directory; replication is per file")
        if op.replication < 1:
            raise InvalidArgument(f"replication must be >= 1, got {op.replication}")
        node.replication = op.replication
        return ()

    @_handles(SetTimesOp)
    def _set_times(self, op: SetTimesOp) -> tuple[int, ...]:
        node = self._get(split_path(op.path))
        if op.mtime_ms < -1 or op.atime_ms < -1:
            raise InvalidArgument("times must be >= 0, or -1 for unchanged")
        if op.mtime_ms != -1:
            node.mtime_ms = op.mtime_ms
        if op.atime_ms != -1:
            # share the int object with mtime when equal: one 32-byte int less per inode
            node.atime_ms = node.mtime_ms if op.atime_ms == node.mtime_ms else op.atime_ms
        return ()

    @_handles(ReassignLeaseOp)
    def _reassign_lease(self, op: ReassignLeaseOp) -> tuple[int, ...]:
        node = self._file_under_construction(op.path)
        if not op.client:
            raise InvalidArgument("a lease needs a client name")
        if op.recovery_genstamp < 0:
            raise InvalidArgument(f"negative recovery genstamp {op.recovery_genstamp}")
        self._uc[node] = op.client
        self.next_genstamp = max(self.next_genstamp, op.recovery_genstamp + 1)
        return ()

    @_handles(AddUserOp)
    def _add_user(self, op: AddUserOp) -> tuple[int, ...]:
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
    def _remove_user(self, op: RemoveUserOp) -> tuple[int, ...]:
        if op.name not in self.users:
            raise NotFound(f"no such user: {op.name}")
        del self.users[op.name]
        return ()

    @_handles(SetPasswordOp)
    def _set_password(self, op: SetPasswordOp) -> tuple[int, ...]:
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
    def _set_datanode_secret(self, op: SetDataNodeSecretOp) -> tuple[int, ...]:
        if len(op.secret) < 16:
            raise InvalidArgument("the DataNode secret must be at least 16 bytes")
        self.datanode_secret = op.secret
        return ()

    @_handles(AddTokenKeyOp)
    def _add_token_key(self, op: AddTokenKeyOp) -> tuple[int, ...]:
        # Refused rather than replaced: two secrets under one id would make tokens signed
        # with the first fail verification after a restart.
        if op.key_id in self.token_keys:
            raise AlreadyExists(f"token key {op.key_id} already exists")
        self.token_keys[op.key_id] = TokenKeyRecord(op.key_id, op.secret, op.expires_ms)
        return ()

    @_handles(RemoveTokenKeyOp)
    def _remove_token_key(self, op: RemoveTokenKeyOp) -> tuple[int, ...]:
        if op.key_id not in self.token_keys:
            raise NotFound(f"no token key {op.key_id}")
        del self.token_keys[op.key_id]
        return ()

    @_handles(NewEpochOp)
    def _new_epoch(self, op: NewEpochOp) -> tuple[int, ...]:
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

    def _file_under_construction(self, path: str) -> FileInode:
        parts = split_path(path)
        node = self._get(parts)
        if not isinstance(node, FileInode):
            raise IsADirectory(f"{join(parts)} is a directory")
        if node not in self._uc:
            raise LeaseError(f"{join(parts)} is not under construction")
        return node

    # --- lookups -------------------------------------------------------------------------

    def _lookup(self, parts: Parts) -> Inode | None:
        node: Inode = self._root
        for name in parts:
            if not isinstance(node, DirInode):
                return None
            child = node.children.get(name)
            if child is None:
                return None
            node = child
        return node

    def _get(self, parts: Parts) -> Inode:
        node = self._lookup(parts)
        if node is None:
            raise NotFound(f"{join(parts)}: no such file or directory")
        return node

    def _get_with_parent(self, parts: Parts) -> tuple[DirInode, Inode]:
        assert parts
        parent = self._lookup(parts[:-1])
        node = parent.children.get(parts[-1]) if isinstance(parent, DirInode) else None
        if node is None:
            raise NotFound(f"{join(parts)}: no such file or directory")
        assert isinstance(parent, DirInode)
        return parent, node

    def _parent_dir(self, parts: Parts) -> DirInode:
        """The existing directory that would hold ``parts``; NotFound / NotADirectory."""
        assert parts
        node: DirInode = self._root
        for depth, name in enumerate(parts[:-1], start=1):
            child = node.children.get(name)
            if child is None:
                raise NotFound(f"parent directory does not exist: {join(parts[:depth])}")
            if not isinstance(child, DirInode):
                raise NotADirectory(f"parent is not a directory: {join(parts[:depth])}")
            node = child
        return node

    def _chain(self, parts: Parts) -> list[Inode]:
        """The existing inodes along ``parts``, root first; one longer than ``parts`` iff
        the path exists. Stops after a file that has more components below it."""
        chain: list[Inode] = [self._root]
        node: Inode = self._root
        for name in parts:
            if not isinstance(node, DirInode):
                break
            child = node.children.get(name)
            if child is None:
                break
            chain.append(child)
            node = child
        return chain

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

    def exists(self, path: str) -> bool:
        return self._lookup(split_path(path)) is not None

    def is_dir(self, path: str) -> bool:
        return isinstance(self._get(split_path(path)), DirInode)

    def stat(self, path: str) -> FileStatus:
        parts = split_path(path)
        return self._status(self._get(parts), join(parts))

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
        self, path: str, start_after: str = "", limit: int = 1000
    ) -> tuple[list[FileStatus], int]:
        """One page of entries sorted by name, strictly after ``start_after``; also how many
        entries remain after it. A file lists itself."""
        if limit < 1:
            raise InvalidArgument(f"limit must be >= 1, got {limit}")
        parts = split_path(path)
        node = self._get(parts)
        base = join(parts)
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

    def get_blocks(self, path: str) -> tuple[BlockRecord, ...]:
        parts = split_path(path)
        node = self._get(parts)
        if not isinstance(node, FileInode):
            raise IsADirectory(f"{join(parts)} is a directory")
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

    def walk(self, path: str) -> Iterator[tuple[str, Inode]]:
        """(path, inode) of ``path`` and everything beneath it, parents first, siblings by
        name. Raises NotFound at once."""
        parts = split_path(path)
        return self._walk_sorted(self._get(parts), join(parts))

    def subtree_extent(self, path: str) -> tuple[int, int]:
        """How far below ``path`` its subtree reaches: the most components and the most
        UTF-8 bytes (``/name`` each) any path in it adds to ``path`` (0, 0 for a file).
        Walks the whole subtree."""
        node = self._get(split_path(path))
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

    def content_summary(self, path: str) -> ContentSummary:
        node = self._get(split_path(path))
        length = files = dirs = consumed = 0
        stack = [node]
        while stack:
            current = stack.pop()
            if isinstance(current, DirInode):
                dirs += 1
                stack.extend(current.children.values())
            else:
                assert isinstance(current, FileInode)
                size = file_length(current)
                files += 1
                length += size
                consumed += size * current.replication
        return ContentSummary(length, files, dirs, consumed)

    def lease_holder(self, path: str) -> str:
        node = self._get(split_path(path))
        return self._uc.get(node, "") if isinstance(node, FileInode) else ""

    def lease_holders(self) -> list[tuple[str, str]]:
        """(client, owner) of every file under construction (no path is built or checked)."""
        return [(client, node.owner) for node, client in self._uc.items()]

    def files_under_construction(self) -> list[tuple[str, str]]:
        """(path, client) of every file under construction, sorted by path."""
        return sorted((self.path_of(node), client) for node, client in self._uc.items())

    def missing_ancestors(self, path: str) -> list[str]:
        """The directories ``mkdir -p path`` would create, top-down (``path`` included when
        absent). NotADirectory if a file sits on the way; AlreadyExists if ``path`` is a
        file (``mkdir -p`` must not succeed silently on it)."""
        parts = split_path(path)
        node: Inode = self._root
        for depth, name in enumerate(parts, start=1):
            assert isinstance(node, DirInode)
            child = node.children.get(name)
            if child is None:
                return [join(parts[:end]) for end in range(depth, len(parts) + 1)]
            if not isinstance(child, DirInode):
                if depth == len(parts):
                    raise AlreadyExists(f"{join(parts)} exists and is not a directory")
                raise NotADirectory(f"not a directory: {join(parts[:depth])}")
            node = child
        return []

    def resolve_rename_target(self, src: str, dst: str) -> str:
        """``mv`` semantics: into ``dst`` when it is an existing directory, else onto it."""
        src_parts, dst_parts = split_path(src), split_path(dst)
        if src_parts and isinstance(self._lookup(dst_parts), DirInode):
            return join((*dst_parts, src_parts[-1]))
        return join(dst_parts)

    def inode_count(self) -> int:
        return self._inode_count

    def subtree_paths(self, path: str) -> Iterator[str]:
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
        path: str,
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
        parts = split_path(path)
        for name, bits in (("access", access), ("parent_access", parent_access),
                           ("ancestor_access", ancestor_access), ("sub_access", sub_access)):
            perm.check_bits(name, bits)
        if self.is_superuser(user):
            return
        checker = perm.AccessCheck(
            user, self.groups_of(user), parts, self._chain(parts), self._walk_sorted
        )
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
