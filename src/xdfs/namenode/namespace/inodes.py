"""Inode objects of the in-memory namespace tree (pure data; :mod:`.children` keeps a
directory's sorted-name cache in step with its children).

Memory is the point of this module: a NameNode holds every inode of the file system, so the
bytes per inode are a tracked figure (docs/benchmarks.md). Hence:

- inodes are ``msgspec.Struct`` with ``gc=False``: fixed slots like ``__slots__`` but with no
  16-byte GC header, and the cyclic collector never walks millions of them;
- because untracked objects must never form reference cycles, the tree only points
  downwards (a directory's ``children`` dict). The way up is ``parent``, the parent's inode
  *id* (the same int object as the parent's ``id``, so it costs one pointer), resolved
  through the namespace's map of directories;
- ``eq=False`` gives identity equality and hashing, so inodes can key dicts (leases) and
  nobody compares two trees field by field by accident;
- the lease holder is *not* a field: few files are under construction, so the namespace
  keeps them in a dict instead of spending a pointer on every file.

Times are int milliseconds. Owner and group strings are interned by the namespace and small
ints (mode, block size) shared, so a million files refer to the same few objects.
"""

from __future__ import annotations

from typing import Final

import msgspec

from xdfs.protocol.blocks import BlockRecord

ROOT_ID: Final = 1
FIRST_INODE_ID: Final = 2


class Inode(msgspec.Struct, gc=False, eq=False):
    """Attributes common to files and directories."""

    id: int
    parent: int  # the parent directory's inode id; 0 for the root
    name: str  # "" for the root; the same str object as the key in the parent's children
    mode: int  # permission bits incl. sticky, & 0o7777
    owner: str
    group: str
    mtime_ms: int
    atime_ms: int


class FileInode(Inode, gc=False, eq=False):
    replication: int
    block_size: int
    blocks: tuple[BlockRecord, ...]


class DirInode(Inode, gc=False, eq=False):
    children: dict[str, Inode]
    # Names of ``children`` in sorted order, built on the first listing and kept until a
    # change makes patching it too costly; None when not built. Paging a directory of 1M
    # entries must not sort it on every page.
    sorted_names: list[str] | None = None
