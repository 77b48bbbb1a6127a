"""POSIX permission bits and HDFS-style denial messages (pure helpers for the namespace).

An access request is a 3-bit set like one class of a mode: 4 = read, 2 = write,
1 = execute. The class of a mode that applies to a user is chosen as POSIX and HDFS's
FSPermissionChecker do: owner bits if the user owns the inode, else group bits if the
inode's group is one of the user's groups, else the other bits. The first matching class
decides, even when a later class would grant more.

:class:`AccessCheck` walks one path for one user with these rules (the namespace hands it
the inodes along the path, so it never looks anything up itself).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Final

from xdfs.common.paths import join
from xdfs.errors import AccessDenied, InvalidArgument, NotADirectory, NotFound
from xdfs.namenode.namespace.inodes import DirInode, Inode
from xdfs.namenode.namespace.steps import Steps, drain

# Final: the compiled build uses the values, not a lookup in the module's dict each time.
READ: Final = 4
WRITE: Final = 2
EXECUTE: Final = 1
ALL: Final = READ | WRITE | EXECUTE

STICKY: Final = 0o1000
MODE_MASK: Final = 0o7777

# Indexed by the 3-bit access set; the names of HDFS's FsAction, which its messages use.
_ACTION_NAMES = (
    "NONE", "EXECUTE", "WRITE", "WRITE_EXECUTE", "READ", "READ_EXECUTE", "READ_WRITE", "ALL",
)


def action_name(bits: int) -> str:
    assert 0 <= bits <= ALL, bits
    return _ACTION_NAMES[bits]


def check_bits(name: str, bits: int) -> None:
    if not 0 <= bits <= ALL:
        raise InvalidArgument(f"{name} must be a 3-bit access set (0..7), got {bits}")


def mode_class(mode: int, *, is_owner: bool, in_group: bool) -> int:
    """The 3 bits of ``mode`` that apply to a user (first matching class wins)."""
    if is_owner:
        return (mode >> 6) & ALL
    if in_group:
        return (mode >> 3) & ALL
    return mode & ALL


def mode_string(mode: int, *, is_dir: bool) -> str:
    """``drwxr-xr-x``; the sticky bit shows as ``t`` (``T`` without other-execute), as in
    HDFS's FsPermission (setuid/setgid are stored but not shown, HDFS ignores them too)."""
    chars = ["d" if is_dir else "-"]
    for shift in (6, 3, 0):
        bits = (mode >> shift) & ALL
        chars.append("r" if bits & READ else "-")
        chars.append("w" if bits & WRITE else "-")
        chars.append("x" if bits & EXECUTE else "-")
    if mode & STICKY:
        chars[-1] = "t" if mode & EXECUTE else "T"
    return "".join(chars)


def describe_inode(path: str, owner: str, group: str, mode: int, *, is_dir: bool) -> str:
    """``"/a/b":bob:supergroup:drwxr-xr-x`` as HDFS prints an inode in denials."""
    return f'"{path}":{owner}:{group}:{mode_string(mode, is_dir=is_dir)}'


def denied_message(user: str, bits: int, inode: str) -> str:
    return f"Permission denied: user={user}, access={action_name(bits)}, inode={inode}"


#: Execute for owner, group and others: a directory anyone may search.
_SEARCHABLE_BY_ALL: Final = EXECUTE << 6 | EXECUTE << 3 | EXECUTE


def may_traverse(user: str, groups: frozenset[str], chain: list[Inode], depth: int) -> bool:
    """Whether ``user`` may search (execute) every directory among the first ``depth``
    inodes of ``chain`` (:meth:`AccessCheck.traverse` without building a checker or a
    message: the common case of every call, so it is one loop with nothing called)."""
    directory = DirInode  # (compiled: one lookup of the global, not one per inode)
    for i in range(min(depth, len(chain))):  # (no slice: one list fewer per call)
        node = chain[i]
        if type(node) is not directory:
            return True  # traverse stops at a file: what lies below it is NotADirectory
        mode = node.mode
        if mode & _SEARCHABLE_BY_ALL == _SEARCHABLE_BY_ALL:
            continue  # (0o755 and the like) whoever asks: owner and group not read
        if user == node.owner:
            mode >>= 6
        elif node.group in groups:
            mode >>= 3
        if not mode & EXECUTE:
            return False
    return True


class AccessCheck:
    """One permission check of one user on one path (the state HDFS's checker carries)."""

    def __init__(
        self,
        user: str,
        groups: frozenset[str],
        parts: tuple[str, ...],
        chain: list[Inode],
        walk: Callable[[Inode, str], Iterator[tuple[str, Inode]]],
    ) -> None:
        """``chain``: the existing inodes along ``parts``, root first (one longer than
        ``parts`` iff the path exists); ``walk``: every (path, inode) of a subtree."""
        self.user = user
        self.groups = groups
        self.parts = parts
        self.chain = chain
        self.walk = walk
        self.exists = len(chain) == len(parts) + 1

    def _require(self, node: Inode, depth: int, bits: int, path: str | None = None) -> None:
        granted = mode_class(
            node.mode, is_owner=self.user == node.owner, in_group=node.group in self.groups
        )
        if granted & bits != bits:
            where = path if path is not None else join(self.parts[:depth])
            inode = describe_inode(
                where, node.owner, node.group, node.mode, is_dir=isinstance(node, DirInode)
            )
            raise AccessDenied(denied_message(self.user, bits, inode))

    def traverse(self) -> None:
        # Every existing ancestor directory needs execute: index < len(parts).
        for depth, node in enumerate(self.chain[: len(self.parts)]):
            if not isinstance(node, DirInode):
                break
            self._require(node, depth, EXECUTE)

    def sticky(self) -> None:
        if not self.exists or not self.parts:
            return
        parent, node = self.chain[-2], self.chain[-1]
        if not parent.mode & STICKY or self.user in (parent.owner, node.owner):
            return
        depth = len(self.parts)
        raise AccessDenied(
            f"Permission denied by sticky bit: user={self.user}, path="
            + describe_inode(join(self.parts), node.owner, node.group, node.mode,
                                  is_dir=isinstance(node, DirInode))
            + ", parent="
            + describe_inode(join(self.parts[: depth - 1]), parent.owner, parent.group,
                                  parent.mode, is_dir=True)
        )

    def ancestor(self, bits: int) -> None:
        ancestors = self.chain[: len(self.parts)]
        if self.parts:
            self._require(ancestors[-1], len(ancestors) - 1, bits)

    def parent(self, bits: int) -> None:
        depth = len(self.parts) - 1
        if depth < 0:
            return
        if len(self.chain) <= depth:
            last = self.chain[-1]
            if not isinstance(last, DirInode):
                raise NotADirectory("Parent path is not a directory: "
                                    + join(self.parts[: len(self.chain) - 1]))
            raise NotFound(f"Parent directory doesn't exist: {join(self.parts[:depth])}")
        parent = self.chain[depth]
        if not isinstance(parent, DirInode):
            raise NotADirectory(f"Parent path is not a directory: {join(self.parts[:depth])}")
        self._require(parent, depth, bits)

    def self_(self, bits: int) -> None:
        if self.exists:
            self._require(self.chain[-1], len(self.parts), bits)

    def subtree(self, bits: int) -> None:
        drain(self.subtree_steps(bits))

    def subtree_steps(self, bits: int) -> Steps[None]:
        """:meth:`subtree`, one inode per step (see :mod:`.steps`)."""
        if not self.exists or not isinstance(self.chain[-1], DirInode):
            return
        for path, node in self.walk(self.chain[-1], join(self.parts)):
            if isinstance(node, DirInode):
                self._require(node, 0, bits, path)
            yield

    def owner(self) -> None:
        path = join(self.parts)
        if not self.exists:
            raise NotFound(f"File does not exist: {path}")
        if self.chain[-1].owner != self.user:
            raise AccessDenied(
                f'Permission denied: user={self.user} is not the owner of inode="{path}"'
            )
