"""Name and space quotas of directories, as HDFS's (pure).

A directory with a quota keeps its usage, maintained incrementally by every op that adds or
removes names or bytes below it: an op finds the quotas along its path (the few directories
that have one, looked up by inode id), checks them before anything changes, then adds its
change to each. No op walks a whole tree to count, except the ones HDFS walks too: setting a
quota on a directory that had none, and moving a subtree from under one quota to another
(a nested quota's usage stands in for its subtree, so neither descends below one).

What counts (HDFS's rules):

- names: the directory itself and every file and directory below it;
- space: every file's bytes times its replication; a file being written counts its last
  block at the full block size (``add_block`` charges a whole block times replication
  before the writer sends a byte), and pays back the difference when it closes.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from xdfs.errors import DSQuotaExceeded, NSQuotaExceeded
from xdfs.namenode.namespace.inodes import DirInode, FileInode, Inode
from xdfs.protocol.blocks import BlockRecord

#: A quota value meaning "none".
NO_QUOTA = -1


class Quota(msgspec.Struct, gc=False):
    """The limits of one directory and what its tree uses now."""

    ns_quota: int  # most names, the directory included; NO_QUOTA for none
    ds_quota: int  # most bytes times replication; NO_QUOTA for none
    names: int = 0
    space: int = 0


#: The quotas an op counts against, each with the path that names it (for the error).
Chain = list[tuple[Quota, str]]


def block_space(
    blocks: Sequence[BlockRecord], block_size: int, replication: int, open_: bool
) -> int:
    """What a file's blocks count against space quotas (see the module docstring)."""
    if not blocks:
        return 0
    total = sum(block.num_bytes for block in blocks)
    if open_:
        total += max(0, block_size - blocks[-1].num_bytes)
    return total * replication


def file_space(node: FileInode, open_: bool) -> int:
    return block_space(node.blocks, node.block_size, node.replication, open_)


def check(chain: Chain, names: int, space: int) -> None:
    """Raise NSQuotaExceeded / DSQuotaExceeded if adding ``names`` and ``space`` takes a
    quota of ``chain`` over its limit (HDFS's messages). A decrease always passes."""
    for quota, path in chain:
        if names > 0 and quota.ns_quota != NO_QUOTA and quota.names + names > quota.ns_quota:
            raise NSQuotaExceeded(
                f"The NameSpace quota (directories and files) of directory {path} is "
                f"exceeded: quota={quota.ns_quota} file count={quota.names + names}"
            )
        if space > 0 and quota.ds_quota != NO_QUOTA and quota.space + space > quota.ds_quota:
            used = quota.space + space
            raise DSQuotaExceeded(
                f"The DiskSpace quota of {path} is exceeded: quota = {quota.ds_quota} B = "
                f"{byte_desc(quota.ds_quota)} but diskspace consumed = {used} B = "
                f"{byte_desc(used)}"
            )


def byte_desc(n: int) -> str:
    """``402653184`` -> ``384 MB`` (HDFS's StringUtils.byteDesc: binary units, at most two
    decimals)."""
    value = float(n)
    units = ("B", "KB", "MB", "GB", "TB", "PB", "EB")
    for unit in units:
        if abs(value) < 1024 or unit == units[-1]:
            return f"{value:.2f}".rstrip("0").rstrip(".") + f" {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def add(chain: Chain, names: int, space: int) -> None:
    for quota, _path in chain:
        quota.names += names
        quota.space += space


def usage(
    top: Inode, quotas: dict[int, Quota], is_open: dict[FileInode, str]
) -> tuple[int, int]:
    """(names, space) of ``top``'s tree; a directory below it with a quota answers from
    its usage instead of being walked (``top``'s own is not used: this computes it)."""
    names = space = 0
    stack = [top]
    while stack:
        node = stack.pop()
        if isinstance(node, DirInode):
            known = quotas.get(node.id) if node is not top else None
            if known is not None:
                names += known.names
                space += known.space
                continue
            names += 1
            stack.extend(node.children.values())
        else:
            assert isinstance(node, FileInode)
            names += 1
            space += file_space(node, node in is_open)
    return names, space
