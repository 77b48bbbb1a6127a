"""The live block map as rows for ``admin -dumpBlockMap`` (the ``block_map`` download).

The block ids are listed once, when the call starts (one pass over the namespace, in
slices as fsck does); the rows are then built a batch at a time while the stream is sent,
looking every block up again, so the NameNode never holds the whole map as rows and a
block deleted meanwhile is simply left out. Between batches the event loop serves other
calls.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from xdfs.namenode.blocks.block_state import block_state
from xdfs.namenode.blocks.fsck import datanode_report
from xdfs.namenode.blocks.manager import BlockManager
from xdfs.namenode.namespace.inodes import FileInode
from xdfs.namenode.namespace.steps import Steps, drain
from xdfs.namenode.namespace.tree import Namespace
from xdfs.protocol.block_map import encode_frame
from xdfs.protocol.namenode import BlockMapHead, BlockMapRow

#: Rows per msgpack frame of the stream.
ROWS_PER_FRAME = 4096


def snapshot(ns: Namespace, blocks: BlockManager) -> tuple[BlockMapHead, list[int]]:
    """The head (counts, DataNodes) and every block id of the namespace, at once."""
    return drain(snapshot_steps(ns, blocks))


def snapshot_steps(ns: Namespace, blocks: BlockManager) -> Steps[tuple[BlockMapHead, list[int]]]:
    """:func:`snapshot`, one inode per step (what it sees of changes meanwhile:
    :mod:`xdfs.namenode.namespace.steps`)."""
    block_ids: list[int] = []
    for _, node in ns.walk("/"):
        if isinstance(node, FileInode):
            block_ids.extend(block.block_id for block in node.blocks)
        yield
    replicas = sum(len(blocks.map.replicas(block_id)) for block_id in block_ids)
    head = BlockMapHead(
        blocks=len(block_ids), replicas=replicas,
        datanodes=datanode_report(ns, blocks).nodes, generated_ms=int(time.time() * 1000),
    )
    return head, block_ids


def rows_of(ns: Namespace, blocks: BlockManager, block_id: int) -> list[BlockMapRow]:
    """One row per replica of ``block_id`` (one ``missing`` row when it has none); none
    when the block has left the namespace."""
    state = block_state(ns, block_id)
    if state is None:
        return []
    file, record = state.file, state.record
    common = (block_id, file.id, ns.path_of(file), record.num_bytes, record.genstamp,
              file.replication, state.complete)
    replicas = blocks.map.replicas(block_id)
    if not replicas:
        return [BlockMapRow(*common, "", "", "", "missing", 0, 0, 0)]
    rows = []
    for replica in replicas:
        node = blocks.datanodes.get(replica.node_id)
        rows.append(BlockMapRow(
            *common, replica.node_id, node.address if node else "",
            "live" if node is not None and node.live else "dead",
            "corrupt" if replica.corrupt else "good",
            replica.num_bytes, replica.genstamp, replica.flags,
        ))
    return rows


def frames(ns: Namespace, blocks: BlockManager, block_ids: list[int]) -> Iterator[bytes]:
    """The stream's payload: frames of rows (:mod:`xdfs.protocol.block_map`)."""
    for start in range(0, len(block_ids), ROWS_PER_FRAME):
        batch = [
            row
            for block_id in block_ids[start : start + ROWS_PER_FRAME]
            for row in rows_of(ns, blocks, block_id)
        ]
        if batch:
            yield encode_frame(batch)
