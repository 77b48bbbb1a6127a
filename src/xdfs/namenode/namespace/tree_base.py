"""The core of the NameNode's namespace (:class:`~.tree.Namespace`, see there): its
state, id counters, the dispatch of :meth:`NamespaceBase.apply` to the handler of each op
(registered with :func:`handles` by the tree modules), the block index and the one walk
from the root by name (pure)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, TypeVar

from xdfs.common.paths import join, split_path
from xdfs.errors import InvalidArgument, IsADirectory, LeaseError
from xdfs.namenode.namespace import quota
from xdfs.namenode.namespace.inodes import FIRST_INODE_ID, ROOT_ID, DirInode, FileInode, Inode
from xdfs.namenode.namespace.ops import Op, TokenKeyRecord, UserRecord
from xdfs.namenode.namespace.resolved import INodesInPath
from xdfs.protocol.blocks import BlockRecord

FIRST_BLOCK_ID = 1 << 30  # like HDFS, so block ids never look like small counters
FIRST_GENSTAMP = 1000
FIRST_EPOCH = 1  # a fresh namespace's active epoch; each promotion raises it (NewEpochOp)
ROOT_MODE = 0o755

#: Largest sorted-name cache patched in place (an O(n) list insert/delete, ~0.5 ms at this
#: size); beyond it a change drops the cache and the next listing sorts again.
SORTED_PATCH_MAX = 65536



def file_length(node: FileInode) -> int:
    """The bytes of a file: its blocks' lengths (here, compiled: every stat asks)."""
    length = 0
    for block in node.blocks:
        length += block.num_bytes
    return length


#: A path as text, or as :meth:`Namespace.resolve` made it (then it is not walked again).
PathArg = str | INodesInPath
#: The resolutions an op is applied with (see NamespaceBase.apply).
At = Sequence[INodesInPath]
_OpT = TypeVar("_OpT", bound=Op)
_SelfT = TypeVar("_SelfT", bound="NamespaceBase")
_Handler = Callable[[Any, Any, Sequence[INodesInPath]], tuple[int, ...]]
#: Op type -> the method that applies it (filled by @handles in every tree module).
HANDLERS: Final[dict[type[Op], _Handler]] = {}
_Method = Callable[[_SelfT, _OpT, Sequence[INodesInPath]], tuple[int, ...]]


def handles(op_type: type[_OpT]) -> Callable[[_Method[_SelfT, _OpT]], _Method[_SelfT, _OpT]]:
    """Register a method as the handler of one op type (the dispatch table of apply)."""

    def register(method: _Method[_SelfT, _OpT]) -> _Method[_SelfT, _OpT]:
        HANDLERS[op_type] = method
        return method

    return register


class NamespaceBase:
    """The namespace's state, counters, op dispatch, block index and path resolution."""

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
        #: groups_of's answers, each with the record it was made from: valid while that
        #: record is still the user's (every change of a user replaces its record).
        self.groups_made: dict[str, tuple[UserRecord, frozenset[str]]] = {}
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
        self._ints: dict[int, Any] = {}
        #: Diagnostics: when a list, every path :meth:`resolve` walks is appended to it (the
        #: resolve-once tests count walks with it; a patched method would not see the
        #: calls made inside the compiled build of this class).
        self.walk_log: list[str] | None = None

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
        handler = HANDLERS.get(type(op))
        if handler is None:
            raise InvalidArgument(f"not a namespace op: {type(op).__name__}")
        return handler(self, op, at)

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
            self._blocks[obj(block).block_id] = node  # the block's own int as the key
        self._bump_blocks(blocks)
        return dropped

    def _unindex_blocks(self, block_ids: Iterable[int]) -> None:
        for block_id in block_ids:
            del self._blocks[block_id]

    def _shared_int(self, value: int) -> Any:
        """The one int object of this value (see :func:`obj`)."""
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
        if self.walk_log is not None:
            self.walk_log.append(path)
        node: Inode = self._root
        inodes = [node]
        append = inodes.append
        directory = DirInode  # (compiled: one lookup of the global, not one per name)
        for name in parts:
            if type(node) is not directory:
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


# --- module helpers ------------------------------------------------------------------------


def obj(value: object) -> Any:
    """``value`` typed Any, so that its int attributes are read as the objects they are.
    The namespace shares int objects to save memory per inode (``_shared_int``; atime
    and a parent's mtime are the object of mtime; a dict key is the inode's own id). In the
    mypyc build an expression typed ``int`` is unboxed to a machine integer and boxed
    again, a new 32-byte object each time, where such a value is read and stored: read
    through ``obj(x).field`` it stays the object it was."""
    return value


def check_blocks(blocks: tuple[BlockRecord, ...]) -> None:
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
