"""A path resolved against the tree once: its components and the inodes along it (HDFS's
``INodesInPath``).

An operation resolves its path once (:meth:`Namespace.resolve
<xdfs.namenode.namespace.tree.Namespace.resolve>`) and hands the result to the permission
checks, to its planning and to :meth:`~xdfs.namenode.namespace.tree.Namespace.apply`, so no
step splits and walks the path again. ``inodes`` holds the existing inodes from the root
down: one more than ``parts`` when the path exists, fewer when it stops at the first missing
component (or right after a file that has components below it).

A resolution is only good for the tree it was made on: it carries the namespace's
``version`` (bumped by every op that links or unlinks an inode), and the namespace walks
again rather than trust one that is out of date. An op applied *with* a resolution updates
it in place (a directory made, a file created, a path deleted or renamed), so the next op of
the same plan, and the answer read after it, still need no walk.
"""

from __future__ import annotations

from xdfs.common.paths import join
from xdfs.errors import AlreadyExists, NotADirectory, NotFound
from xdfs.namenode.namespace.inodes import DirInode, Inode

Parts = tuple[str, ...]


class INodesInPath:
    __slots__ = ("inodes", "parts", "path", "version")

    def __init__(self, path: str, parts: Parts, inodes: list[Inode], version: int) -> None:
        self.path = path  # normalised
        self.parts = parts
        self.inodes = inodes
        self.version = version

    def __repr__(self) -> str:
        return f"INodesInPath({self.path!r}, {len(self.inodes) - 1} of {len(self.parts)} found)"

    @property
    def exists(self) -> bool:
        return len(self.inodes) > len(self.parts)

    @property
    def last(self) -> Inode | None:
        """The inode the path names, None when it does not exist."""
        return self.inodes[-1] if len(self.inodes) > len(self.parts) else None

    def get(self) -> Inode:
        """The inode the path names; NotFound when there is none."""
        if len(self.inodes) <= len(self.parts):
            raise NotFound(f"File does not exist: {self.path}")  # HDFS's words
        return self.inodes[-1]

    def parent_dir(self, depth: int | None = None) -> DirInode:
        """The existing directory that holds (or would hold) the component at ``depth``
        (default: the last); NotFound or NotADirectory naming the first component on the
        way that is missing or a file."""
        depth = len(self.parts) if depth is None else depth
        assert 1 <= depth <= len(self.parts), (depth, self.parts)
        found = len(self.inodes)
        if depth - 1 < found:
            parent = self.inodes[depth - 1]
            if not isinstance(parent, DirInode):
                raise NotADirectory(f"Parent path is not a directory: {self.prefix(depth - 1)}")
            return parent
        # the walk stopped above the parent: at a file, or at a missing component
        if not isinstance(self.inodes[-1], DirInode):
            raise NotADirectory(f"Parent path is not a directory: {self.prefix(found - 1)}")
        raise NotFound(f"Parent directory doesn't exist: {self.prefix(found)}")

    def missing(self, depth: int | None = None) -> list[str]:
        """The directories ``mkdir -p`` of the path's first ``depth`` components (default:
        all) would create, top-down. NotADirectory if a file sits on the way; AlreadyExists
        if the path itself is a file (``mkdir -p`` must not succeed silently on it)."""
        depth = len(self.parts) if depth is None else depth
        found = len(self.inodes)
        stop = min(found, depth + 1)
        for index in range(1, stop):
            if not isinstance(self.inodes[index], DirInode):
                if index == depth:
                    raise AlreadyExists(f"{self.prefix(depth)} exists and is not a directory")
                raise NotADirectory(f"Parent path is not a directory: {self.prefix(index)}")
        return [self.prefix(end) for end in range(found, depth + 1)]

    def prefix(self, depth: int) -> str:
        """The path of the first ``depth`` components."""
        return self.path if depth == len(self.parts) else join(self.parts[:depth])


# --- how a change of the tree updates a resolution (see Namespace.apply) ----------------------
# Each brings ``iip`` up to date after one change and says whether it now is: False leaves it
# out of date (it is walked again). Plain functions: apply calls them on its hot path.


def linked(iip: INodesInPath, depth: int, parent: DirInode, name: str, node: Inode) -> bool:
    """``node`` became child ``name`` of ``parent``, at ``depth``."""
    inodes = iip.inodes
    if (len(inodes) == depth <= len(iip.parts) and inodes[-1] is parent
            and iip.parts[depth - 1] == name):
        inodes.append(node)  # it stopped where the new inode now is
    return True


def replaced(iip: INodesInPath, depth: int, old: Inode, node: Inode) -> bool:
    """File ``old`` at ``depth`` was replaced by file ``node`` (an overwrite)."""
    if len(iip.inodes) > depth and iip.inodes[depth] is old:
        iip.inodes[depth] = node
    return True


def unlinked(iip: INodesInPath, depth: int, node: Inode) -> bool:
    """``node`` at ``depth`` left the tree with its subtree."""
    if len(iip.inodes) > depth and iip.inodes[depth] is node:
        del iip.inodes[depth:]
    return True


def moved(
    iip: INodesInPath, src_depth: int, node: Inode, depth: int, parent: DirInode, name: str
) -> bool:
    """``node`` moved from ``src_depth`` to child ``name`` of ``parent`` at ``depth``."""
    inodes = iip.inodes
    if len(inodes) > src_depth and inodes[src_depth] is node:
        del inodes[src_depth:]
        return True
    if len(inodes) == depth and len(iip.parts) > depth:
        # a path below the new place: what lies there is the moved subtree's to say
        return not (inodes[-1] is parent and iip.parts[depth - 1] == name)
    return linked(iip, depth, parent, name, node)
