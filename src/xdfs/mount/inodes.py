"""The inode table of a mount (pure): FUSE inode numbers <-> xdfs paths.

A FUSE inode is the xdfs inode id (the NameNode's, stable across renames), except the
root, which FUSE numbers 1. Each known inode remembers its parent and name, so a rename
is one update and a path is a walk up. The kernel's lookup counts decide when an inode
is forgotten (it then holds no reference to it).

A file created through the mount is written under a hidden temporary name in its
directory (:func:`temp_name`) and renamed to its real name when closed; until then the
table answers for the real name itself (:meth:`InodeTable.pending`).
"""

from __future__ import annotations

import posixpath
import re
import uuid
from dataclasses import dataclass

ROOT_INODE = 1

_TEMP = re.compile(r"^\..*\.xdfs-part-[0-9a-f]{12}$")
_NAME_MAX = 255


def temp_name(name: str) -> str:
    """The hidden name a new file is written under (unique, at most 255 bytes)."""
    suffix = f".xdfs-part-{uuid.uuid4().hex[:12]}"
    keep = _NAME_MAX - len(suffix) - 1
    stem = name.encode()[:keep].decode(errors="ignore")
    return f".{stem}{suffix}"


def is_temp_name(name: str) -> bool:
    """A file being written by some mount (hidden from listings)."""
    return bool(_TEMP.match(name))


@dataclass
class Node:
    parent: int
    name: str
    lookups: int = 0
    #: The xdfs name while the file is written under a temporary one.
    temp: str = ""
    #: (mtime_ms, length) when a handle was last opened: unchanged means the kernel may
    #: keep its cached pages.
    seen: tuple[int, int] | None = None
    #: (mtime_ms, length) of the attributes last given to the kernel.
    last: tuple[int, int] | None = None


class InodeTable:
    def __init__(self, root_path: str, root_id: int) -> None:
        self.root_path = root_path.rstrip("/") or "/"
        self.root_id = root_id
        self.nodes: dict[int, Node] = {ROOT_INODE: Node(0, "", lookups=1)}
        self.entries: dict[tuple[int, str], int] = {}

    # -- numbering --------------------------------------------------------------------

    def inode_of(self, xdfs_id: int) -> int:
        return ROOT_INODE if xdfs_id == self.root_id else xdfs_id

    # -- paths ------------------------------------------------------------------------

    def path(self, ino: int) -> str:
        """The xdfs path of a known inode (KeyError when the kernel forgot it)."""
        names: list[str] = []
        while ino != ROOT_INODE:
            node = self.nodes[ino]
            names.append(node.temp or node.name)
            ino = node.parent
        return posixpath.join(self.root_path, *reversed(names))

    def child_path(self, parent: int, name: str) -> str:
        return posixpath.join(self.path(parent), name)

    def pending(self, parent: int, name: str) -> int | None:
        """The inode being written under a temporary name for ``name`` in ``parent``."""
        ino = self.entries.get((parent, name))
        if ino is not None and self.nodes[ino].temp:
            return ino
        return None

    # -- the kernel's references ------------------------------------------------------

    def remember(self, parent: int, name: str, xdfs_id: int, temp: str = "") -> int:
        """One more kernel reference to the entry ``name`` of ``parent``; a known inode
        found under another name (renamed elsewhere) moves there."""
        ino = self.inode_of(xdfs_id)
        if ino == ROOT_INODE:
            return ino
        node = self.nodes.get(ino)
        if node is None:
            node = self.nodes[ino] = Node(parent, name)
        elif (node.parent, node.name) != (parent, name):
            self._unlink_entry(ino)
            node.parent, node.name = parent, name
        if temp:
            node.temp = temp
        node.lookups += 1
        self.entries[(parent, name)] = ino
        return ino

    def forget(self, ino: int, count: int) -> None:
        node = self.nodes.get(ino)
        if node is None or ino == ROOT_INODE:
            return
        node.lookups -= count
        if node.lookups <= 0:
            self._unlink_entry(ino)
            del self.nodes[ino]

    # -- namespace changes made through this mount ------------------------------------

    def moved(self, parent: int, name: str, new_parent: int, new_name: str) -> None:
        ino = self.entries.pop((parent, name), None)
        displaced = self.entries.pop((new_parent, new_name), None)
        if displaced is not None and displaced in self.nodes:
            self.nodes[displaced].parent = -1  # replaced: unreachable by name
        if ino is not None:
            node = self.nodes[ino]
            node.parent, node.name = new_parent, new_name
            self.entries[(new_parent, new_name)] = ino

    def removed(self, parent: int, name: str) -> None:
        self.entries.pop((parent, name), None)

    def committed(self, ino: int) -> None:
        """The temporary file of ``ino`` now has its real name."""
        node = self.nodes.get(ino)
        if node is not None:
            node.temp = ""

    def _unlink_entry(self, ino: int) -> None:
        node = self.nodes[ino]
        if self.entries.get((node.parent, node.name)) == ino:
            del self.entries[(node.parent, node.name)]
