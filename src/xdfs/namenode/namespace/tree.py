"""The NameNode's namespace: the inode tree, users and token keys, in memory (pure core).

:meth:`Namespace.apply` is the single mutation entry point, used both for live requests
(after the op is logged) and on replay of the edits log. Each op is validated completely
*before* anything changes, so a refused op raises a typed :mod:`xdfs.errors` exception and
leaves the namespace exactly as it was; applying the same ops to the same image always gives
the same namespace. Everything else here is a query or a permission check. Besides the tree,
every block id is indexed to its file, kept exact by apply and by image loading: the block
manager's way from a reported replica to its expected replication and committed length.

One class in modules by job: :mod:`.tree_base` (state, counters, the op dispatch, the block
index, path resolution), :mod:`.tree_files` (ops on files' blocks: add, update, close,
append, truncate, concat), :mod:`.tree_quota` (quota charges and checks),
:mod:`.tree_users` (users, token keys, the DataNode secret, the epoch); here the ops on
the tree's shape and attributes, the queries and the permission checks.

Pure: no I/O, no clock (every time comes inside an op), no logging. Not thread-safe: the
server applies and queries from one thread, and must not change the namespace while an
iterator returned from here (:meth:`Namespace.iter_inode_records`,
:meth:`Namespace.subtree_paths`) is in use.
"""

from __future__ import annotations

import bisect
import sys
from collections.abc import Iterable, Iterator
from typing import Any

from xdfs.common.paths import split_path
from xdfs.errors import AlreadyExists, InvalidArgument, IsADirectory
from xdfs.namenode.namespace import image_codec, quota
from xdfs.namenode.namespace import permissions as perm
from xdfs.namenode.namespace.children import link, unlink
from xdfs.namenode.namespace.inodes import DirInode, FileInode, Inode
from xdfs.namenode.namespace.ops import (
    ALL_OPS,
    AddFileOp,
    DeleteOp,
    ImageHeader,
    InodeRecord,
    MkdirOp,
    RenameOp,
    SetOwnerOp,
    SetPermissionOp,
    SetReplicationOp,
    SetTimesOp,
    TokenKeyRecord,
    UserRecord,
)
from xdfs.namenode.namespace.resolved import INodesInPath, linked, moved, replaced, unlinked
from xdfs.namenode.namespace.steps import Steps, drain
from xdfs.namenode.namespace.tree_base import (
    FIRST_BLOCK_ID,
    FIRST_EPOCH,
    FIRST_GENSTAMP,
    HANDLERS,
    ROOT_MODE,
    SORTED_PATCH_MAX,
    At,
    PathArg,
    file_length,
    handles,
    obj,
)
from xdfs.namenode.namespace.tree_users import UserOps
from xdfs.protocol.blocks import BlockRecord
from xdfs.protocol.namenode import ContentSummary, FileStatus

__all__ = [
    "FIRST_BLOCK_ID",
    "FIRST_EPOCH",
    "FIRST_GENSTAMP",
    "ROOT_MODE",
    "SORTED_PATCH_MAX",
    "Namespace",
    "PathArg",
]

#: A superuser's groups, as far as a permission check needs them (it passes at once).
_NO_GROUPS: frozenset[str] = frozenset()


class Namespace(UserOps):
    """The inode tree plus users and token keys; see the module docstring."""

    # --- ops on the tree ------------------------------------------------------------------

    @handles(MkdirOp)
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
        mtime = obj(op).mtime_ms  # objects shared as they are (see tree_base.obj)
        node = DirInode(
            obj(op).inode_id, obj(parent).id, name, self._shared_int(op.mode & perm.MODE_MASK),
            sys.intern(op.owner), sys.intern(op.group), mtime, mtime, {},
        )
        link(parent, node, SORTED_PATCH_MAX)
        self._dirs[obj(node).id] = node
        parent.mtime_ms = mtime
        self._inode_count += 1
        self._bump_inode_id(op.inode_id)
        self._reshaped(at, linked, depth, parent, name, node)
        return ()

    @handles(AddFileOp)
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
        if old is not None:  # (isinstance(None, DirInode) would take the slow path)
            if isinstance(old, DirInode):
                raise IsADirectory(f"{iip.path} is a directory")
            if not op.overwrite:
                raise AlreadyExists(f"{iip.path} already exists")
        chain = self._chain(iip, len(iip.parts))
        new_names = 1 if old is None else 0
        quota.check(chain, new_names, 0)
        # --- validated; mutate
        if chain:  # an overwrite frees what the old file used
            freed = quota.file_space(old, old in self._uc) if isinstance(old, FileInode) else 0
            quota.add(chain, new_names, -freed)
        mtime = obj(op).mtime_ms  # objects shared as they are (see tree_base.obj)
        node = FileInode(
            obj(op).inode_id, obj(parent).id, name, self._shared_int(op.mode & perm.MODE_MASK),
            sys.intern(op.owner), sys.intern(op.group), mtime, mtime,
            obj(op).replication, self._shared_int(op.block_size), (),
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

    @handles(DeleteOp)
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

    @handles(RenameOp)
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
        src_parent.mtime_ms = dst_parent.mtime_ms = obj(op).mtime_ms
        self._reshaped(at, moved, len(src), node, len(dst), dst_parent, dst[-1])
        return ()

    @handles(SetPermissionOp)
    def _set_permission(self, op: SetPermissionOp, at: At) -> tuple[int, ...]:
        node = self.resolved(op.path, at).get()
        if op.mode < 0:
            raise InvalidArgument(f"negative mode: {op.mode}")
        node.mode = self._shared_int(op.mode & perm.MODE_MASK)
        return ()

    @handles(SetOwnerOp)
    def _set_owner(self, op: SetOwnerOp, at: At) -> tuple[int, ...]:
        node = self.resolved(op.path, at).get()
        if op.owner:
            node.owner = sys.intern(op.owner)
        if op.group:
            node.group = sys.intern(op.group)
        return ()

    @handles(SetReplicationOp)
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

    @handles(SetTimesOp)
    def _set_times(self, op: SetTimesOp, at: At) -> tuple[int, ...]:
        node = self.resolved(op.path, at).get()
        if op.mtime_ms < -1 or op.atime_ms < -1:
            raise InvalidArgument("times must be >= 0, or -1 for unchanged")
        if op.mtime_ms != -1:
            node.mtime_ms = obj(op).mtime_ms
        if op.atime_ms != -1:
            # share the int object with mtime when equal: one 32-byte int less per inode
            node.atime_ms = obj(node).mtime_ms if op.atime_ms == node.mtime_ms else obj(
                op).atime_ms
        return ()

    # --- queries -------------------------------------------------------------------------

    # A path argument is text (walked here) or what resolve() made of it (walked no more).

    def exists(self, path: PathArg) -> bool:
        return self._at(path).exists

    def is_dir(self, path: PathArg) -> bool:
        return isinstance(self._at(path).get(), DirInode)

    def stat(self, path: PathArg) -> FileStatus:
        iip = self._at(path)
        return self._status(iip.get(), iip.path)

    def stat_as(self, user: str, path: str) -> FileStatus:
        """What ``user`` may see of ``path`` (the walk to it checked): a client's stat in
        one call into this class (compiled, the calls between the steps cost nothing)."""
        iip = self.resolve(path)
        self.check_access(user, iip)
        return self._status(iip.get(), iip.path)

    def _status(self, node: Inode, path: str) -> FileStatus:
        # The fields go from inode to status as the objects they are (read through Any):
        # typed, the compiled build would unbox each int and box it again, a fresh
        # allocation for every large one (times, ids, the block size).
        # isinstance against an inode class that does not match takes the slow path (their
        # metaclass is msgspec's, not type): most statuses are of files.
        same: Any = node
        if type(node) is DirInode:
            return FileStatus(
                path, True, 0, 0, 0, same.mtime_ms, same.atime_ms, same.mode, same.owner,
                same.group, same.id, len(node.children), False,
            )
        assert isinstance(node, FileInode)
        return FileStatus(
            path, False, file_length(node), same.replication, same.block_size, same.mtime_ms,
            same.atime_ms, same.mode, same.owner, same.group, same.id, 0, node in self._uc,
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
        traversed: bool = False,
    ) -> None:
        """POSIX checks in the order of HDFS's FSPermissionChecker; raises AccessDenied
        (or NotFound/NotADirectory when an inode the check needs is missing).
        ``traversed``: the caller checked the traversal of this same ``path`` (an
        INodesInPath) in this same step, with nothing changed since: not walked again."""
        if isinstance(path, str):
            split_path(path)  # a bad path is InvalidPath for every user, superusers too
        asked = access | parent_access | ancestor_access | sub_access
        if asked and (asked & ~perm.ALL or min(
            access, parent_access, ancestor_access, sub_access
        ) < 0):
            for name, bits in (("access", access), ("parent_access", parent_access),
                               ("ancestor_access", ancestor_access), ("sub_access", sub_access)):
                perm.check_bits(name, bits)
        superuser = user == self.superuser
        groups = _NO_GROUPS if superuser else self.groups_of(user)
        if superuser or self.supergroup in groups:  # is_superuser, one lookup
            return
        iip = self._at(path)
        parts, chain = iip.parts, iip.inodes
        may_traverse = traversed or perm.may_traverse(user, groups, chain, len(parts))
        if may_traverse and not (asked or parent_owner_sticky or owner):
            return  # the common case: nothing to check but the walk, and it passed
        checker = perm.AccessCheck(user, groups, parts, chain, self._walk_sorted)
        if not may_traverse:
            checker.traverse()  # raises the denial (with its message)
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
        return image_codec.canonical_dump(self, self.walk("/"))


# Every op of the contract has exactly one handler (a new op must not be silently ignored).
assert set(HANDLERS) == set(ALL_OPS), set(ALL_OPS) ^ set(HANDLERS)
