"""Bytes per inode of the NameNode's in-memory namespace, measured on a real image.

The first ``max_inodes`` inodes of the image (parents come first, so any prefix is a tree)
are loaded into :class:`xdfs.namenode.namespace.tree.Namespace` -- the structures a NameNode
keeps -- with ``tracemalloc`` counting every allocation; bytes allocated and still held,
divided by the inodes loaded, is the figure. That includes each file's blocks and the block
index, so it is the cost per inode of *this* namespace's mix of files, directories and
blocks. Not counted: the interpreter itself and the block map (replica locations).
"""

from __future__ import annotations

import gc
import itertools
import os
import tracemalloc
from dataclasses import dataclass

import msgspec

from xdfs.namenode.image.fsimage import ImageReader
from xdfs.namenode.namespace.tree import Namespace

MEASURE_INODES_MAX = 200_000


@dataclass(frozen=True)
class InodeCost:
    bytes_per_inode: float
    inodes_measured: int
    method: str


def measure_bytes_per_inode(
    image: str | os.PathLike[str], max_inodes: int = MEASURE_INODES_MAX
) -> InodeCost:
    with ImageReader(image, verify="none") as reader:
        header = reader.read_header()
        count = min(header.inode_count, max_inodes)
        partial = msgspec.structs.replace(header, inode_count=count, user_count=0,
                                          token_key_count=0)
        records = itertools.islice(reader.inodes(header), count)
        gc.collect()
        tracemalloc.start()
        try:
            before, _ = tracemalloc.get_traced_memory()
            ns = Namespace.from_image(partial, records, [], [])
            # the reader's current frame is not part of the namespace: drop it first
            del records
            gc.collect()
            after, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        del ns
    method = (f"tracemalloc while loading {count} of {header.inode_count} inodes of "
              f"{os.fspath(image)} into the NameNode's Namespace")
    return InodeCost((after - before) / count if count else 0.0, count, method)
