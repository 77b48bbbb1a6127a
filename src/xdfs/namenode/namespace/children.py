"""Linking an inode under a directory and unlinking it: the two changes of a directory's
``children`` that must keep its sorted-name cache (``DirInode.sorted_names``) in step.

Compiled with mypyc (xdfs.common.native), apart from the inodes themselves (msgspec
structs): every create, mkdir, rename and delete runs one of them.
"""

from __future__ import annotations

import bisect

from xdfs.namenode.namespace.inodes import DirInode, Inode


def link(parent: DirInode, node: Inode, patch_max: int) -> None:
    """Add ``node`` under ``parent``; a sorted-name cache longer than ``patch_max`` is
    dropped rather than patched (the next listing sorts again)."""
    name = node.name
    assert name not in parent.children, name
    parent.children[name] = node
    names = parent.sorted_names
    if names is None:
        return
    if not names or name > names[-1]:
        names.append(name)  # the common case of files created in name order
    elif len(names) <= patch_max:
        bisect.insort(names, name)
    else:
        parent.sorted_names = None


def unlink(parent: DirInode, name: str, patch_max: int) -> None:
    """Remove ``name`` from ``parent`` (the cache rule of :func:`link`)."""
    del parent.children[name]
    names = parent.sorted_names
    if names is None:
        return
    if names[-1] == name:
        names.pop()
    elif len(names) <= patch_max:
        index = bisect.bisect_left(names, name)
        assert names[index] == name, name
        del names[index]
    else:
        parent.sorted_names = None
