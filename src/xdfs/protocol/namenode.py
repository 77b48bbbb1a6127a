"""Client-facing types of the NameNode service (the method table is added with the server)."""

from __future__ import annotations

import msgspec


class FileStatus(msgspec.Struct, array_like=True, gc=False):
    """What ``stat``/``list`` return for one inode (like HDFS's HdfsFileStatus)."""

    path: str
    is_dir: bool
    length: int  # bytes of a file (sum of its blocks); 0 for directories
    replication: int  # 0 for directories
    block_size: int  # 0 for directories
    mtime_ms: int
    atime_ms: int
    mode: int  # permission bits incl. sticky (0o1777 max)
    owner: str
    group: str
    inode_id: int
    children: int = 0  # number of entries of a directory
    under_construction: bool = False


class ContentSummary(msgspec.Struct, gc=False):
    """``du``/``count``: totals over a subtree (a file counts itself)."""

    length: int  # logical bytes
    file_count: int
    directory_count: int  # includes the path itself when it is a directory
    space_consumed: int  # bytes times each file's replication
