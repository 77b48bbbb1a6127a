"""Block health reports: ``fsck`` of a subtree and the DataNode report (``admin -report``).

Read-only walks over the namespace and the block manager; fsck is a step generator that
the NameNode runs in rate-limited slices (``namenode.walk_slice_inodes``,
``namenode.fsck_rate_inodes_per_s``), serving other calls in between. A block's status, worst last:

* ``healthy``: at least the file's replication in good replicas (or the last block of a
  file being written: not judged until the writer completes it);
* ``under_replicated``: some good replicas, fewer than the file wants;
* ``corrupt``: replicas exist but every one is corrupt;
* ``missing``: no replica at all on a live DataNode.

A subtree is HEALTHY unless one of its blocks is corrupt or missing (as HDFS's fsck).
Independently of its status a block is *mis-replicated* when every replica is on one rack
while the cluster has more than one (counted and flagged, not unhealthy; the replication
monitor moves one replica to another rack).
"""

from __future__ import annotations

from xdfs.common import paths
from xdfs.config import NameNodeConfig
from xdfs.namenode.blocks import placement
from xdfs.namenode.blocks.admin_states import DECOMMISSIONED, DECOMMISSIONING, MAINTENANCE_STATES
from xdfs.namenode.blocks.block_state import block_state
from xdfs.namenode.blocks.manager import BlockManager
from xdfs.namenode.namespace.inodes import FileInode
from xdfs.namenode.namespace.steps import Steps, drain
from xdfs.namenode.namespace.tree import Namespace
from xdfs.namenode.namespace.tree_base import file_length
from xdfs.protocol.blocks import BlockRecord
from xdfs.protocol.namenode import (
    DataNodeInfo,
    DataNodeReport,
    FsckBlock,
    FsckFile,
    FsckReport,
    RefreshNodesResponse,
)

HEALTHY, UNDER_REPLICATED, CORRUPT, MISSING = (
    "healthy", "under_replicated", "corrupt", "missing",
)
_SEVERITY = {HEALTHY: 0, UNDER_REPLICATED: 1, CORRUPT: 2, MISSING: 3}
R, X = 4, 1


def fsck(
    ns: Namespace,
    blocks: BlockManager,
    config: NameNodeConfig,
    user: str,
    path: str,
    *,
    files: bool = False,
    with_blocks: bool = False,
    locations: bool = False,
) -> FsckReport:
    """Health of every block under ``path``, at once (see :func:`fsck_steps`)."""
    return drain(fsck_steps(ns, blocks, config, user, path, files=files,
                            with_blocks=with_blocks, locations=locations))


def fsck_steps(
    ns: Namespace,
    blocks: BlockManager,
    config: NameNodeConfig,
    user: str,
    path: str,
    *,
    files: bool = False,
    with_blocks: bool = False,
    locations: bool = False,
) -> Steps[FsckReport]:
    """Health of every block under ``path``, one inode per step (the NameNode runs it in
    rate-limited slices: :mod:`xdfs.namenode.namespace.steps` says what a walk sees of
    changes made meanwhile). The caller needs read access to it (and read+execute on every
    directory beneath, as for ``du``: the answer names files)."""
    path = paths.normalize(path)
    if ns.is_dir(path):
        ns.check_access(user, path, access=R | X)
        yield from ns.subtree_access_steps(user, path, R | X)
    else:
        ns.check_access(user, path, access=R)
    counts = dict.fromkeys(_SEVERITY, 0)
    racks = blocks.datanodes.rack_count()
    mis_replicated = 0
    file_count = dir_count = total_bytes = 0
    listed: list[FsckFile] = []
    truncated = False
    for file_path, node in ns.walk(path):
        yield
        if not isinstance(node, FileInode):
            dir_count += 1
            continue
        file_count += 1
        total_bytes += file_length(node)
        checked = [_check_block(ns, blocks, b, locations, racks) for b in node.blocks]
        for block in checked:
            counts[block.status] += 1
            mis_replicated += block.mis_replicated
        status = max((b.status for b in checked), key=_SEVERITY.__getitem__, default=HEALTHY)
        if not files and status == HEALTHY:
            continue
        if len(listed) >= config.fsck_list_max:
            truncated = True
            continue
        listed.append(FsckFile(
            file_path, file_length(node), node.replication, status,
            checked if with_blocks or locations else [],
        ))
    return FsckReport(
        path=path,
        healthy=counts[CORRUPT] == counts[MISSING] == 0,
        files=file_count,
        directories=dir_count,
        total_bytes=total_bytes,
        total_blocks=sum(counts.values()),
        healthy_blocks=counts[HEALTHY],
        under_replicated_blocks=counts[UNDER_REPLICATED],
        corrupt_blocks=counts[CORRUPT],
        missing_blocks=counts[MISSING],
        live_datanodes=blocks.datanodes.live_count(),
        default_replication=config.default_replication,
        listed=listed,
        truncated=truncated,
        future_blocks=blocks.future_block_count(),
        mis_replicated_blocks=mis_replicated,
        racks=racks,
    )


def _check_block(
    ns: Namespace, blocks: BlockManager, record: BlockRecord, locations: bool, racks: int
) -> FsckBlock:
    state = block_state(ns, record.block_id)
    assert state is not None, "a block of a file is in the block index"
    replicas = blocks.map.replicas(record.block_id)
    good = [r.node_id for r in replicas if not r.flags]
    corrupt = [r.node_id for r in replicas if r.flags]
    expected = state.file.replication
    if not state.complete or len(good) >= expected:
        status = HEALTHY
    elif good:
        status = UNDER_REPLICATED
    else:
        status = CORRUPT if corrupt else MISSING
    counts = blocks.replication.counts(record.block_id, expected)
    replica_racks = [
        node.rack
        for node in map(blocks.datanodes.get, counts.normal + counts.maintenance)
        if node is not None
    ]
    mis = state.complete and placement.mis_replicated(replica_racks, racks, expected)
    block = FsckBlock(record, status, len(good), expected, mis_replicated=mis)
    if locations:
        block.locations = [blocks.address(node_id) for node_id in good]
        block.corrupt_locations = [blocks.address(node_id) for node_id in corrupt]
    return block


def datanode_report(ns: Namespace, blocks: BlockManager) -> DataNodeReport:
    """Every DataNode, live and dead (totals over live ones, as dfsadmin -report), and the
    cluster's block counts."""
    now_s = blocks.clock()
    nodes = sorted(blocks.datanodes, key=lambda node: (not node.live, node.address))
    infos = [
        DataNodeInfo(
            node_id=node.node_id,
            address=node.address,
            state="live" if node.live else "dead",
            capacity_bytes=node.storage.capacity_bytes,
            used_bytes=node.storage.used_bytes,
            free_bytes=node.storage.free_bytes,
            blocks=blocks.map.node_block_count(node.node_id),
            last_contact_s=max(0.0, now_s - node.last_heartbeat_s),
            transfers_in_progress=node.transfers_in_progress,
            registered_ms=int(node.registered_s * 1000),
            rack=node.rack,
            admin_state=node.admin_state,
            decommission_blocks_left=node.admin_blocks_left,
            maintenance_expiry_ms=int(node.maintenance_expiry_s * 1000),
        )
        for node in nodes
    ]
    live = [node for node in nodes if node.live]
    monitor = blocks.replication
    return DataNodeReport(
        nodes=infos,
        capacity_bytes=sum(node.storage.capacity_bytes for node in live),
        used_bytes=sum(node.storage.used_bytes for node in live),
        free_bytes=sum(node.storage.free_bytes for node in live),
        blocks=ns.block_count(),
        under_replicated=monitor.under_replicated_count(),
        corrupt_blocks=blocks.map.corrupt_block_count(),
        missing_blocks=len(monitor.missing),
        pending_replication=len(monitor.pending.blocks()),
        pending_deletion=blocks.pending_deletion_count(),
        safe_mode=blocks.safe_mode.on,
        future_blocks=blocks.future_block_count(),
    )


def admin_summary(blocks: BlockManager, refused: list[str]) -> RefreshNodesResponse:
    """Nodes by admin state after ``admin -refreshNodes`` (addresses, sorted)."""
    def having(*states: str) -> list[str]:
        return sorted(node.address for node in blocks.datanodes if node.admin_state in states)

    return RefreshNodesResponse(
        decommissioning=having(DECOMMISSIONING),
        decommissioned=having(DECOMMISSIONED),
        maintenance=having(*MAINTENANCE_STATES),
        refused=sorted(refused),
    )
