"""Ops on the blocks and the construction state of files: add_block, update_blocks,
close_file, reassign_lease, and the ops that change closed files: append, truncate, concat
(each validated completely before it changes anything)."""

from __future__ import annotations

from xdfs.errors import InvalidArgument, IsADirectory, LeaseError
from xdfs.namenode.namespace import quota
from xdfs.namenode.namespace.children import unlink
from xdfs.namenode.namespace.inodes import FileInode
from xdfs.namenode.namespace.ops import (
    AddBlockOp,
    AppendOp,
    CloseFileOp,
    ConcatOp,
    ReassignLeaseOp,
    TruncateOp,
    UpdateBlocksOp,
)
from xdfs.namenode.namespace.resolved import INodesInPath, unlinked
from xdfs.namenode.namespace.tree_base import SORTED_PATCH_MAX, At, check_blocks, handles, obj
from xdfs.namenode.namespace.tree_quota import QuotaTracking


class FileOps(QuotaTracking):
    """The ops on files' blocks and leases."""

    @handles(AddBlockOp)
    def _add_block(self, op: AddBlockOp, at: At) -> tuple[int, ...]:
        iip = self.resolved(op.path, at)
        node = self._file_under_construction(iip)
        blocks = (*node.blocks, op.block)
        check_blocks(blocks)
        self._check_block_owner(node, (op.block,))
        quota.add(*self._blocks_charge(iip, node, blocks, True))
        node.blocks = blocks
        self._blocks[obj(op.block).block_id] = node
        self._bump_blocks((op.block,))
        return ()

    @handles(UpdateBlocksOp)
    def _update_blocks(self, op: UpdateBlocksOp, at: At) -> tuple[int, ...]:
        iip = self.resolved(op.path, at)
        node = self._file_under_construction(iip)
        check_blocks(op.blocks)
        self._check_block_owner(node, op.blocks)
        quota.add(*self._blocks_charge(iip, node, op.blocks, True))
        return self._replace_blocks(node, op.blocks)

    @handles(CloseFileOp)
    def _close_file(self, op: CloseFileOp, at: At) -> tuple[int, ...]:
        iip = self.resolved(op.path, at)
        node = self._file_under_construction(iip)
        check_blocks(op.blocks)
        self._check_block_owner(node, op.blocks)
        quota.add(*self._blocks_charge(iip, node, op.blocks, False))
        dropped = self._replace_blocks(node, op.blocks)
        node.mtime_ms = obj(op).mtime_ms  # objects shared as they are (see tree_base.obj)
        node.atime_ms = obj(op).mtime_ms if op.atime_ms == op.mtime_ms else obj(op).atime_ms
        del self._uc[node]
        self._truncating.discard(node)
        return dropped

    @handles(ReassignLeaseOp)
    def _reassign_lease(self, op: ReassignLeaseOp, at: At) -> tuple[int, ...]:
        node = self._file_under_construction(self.resolved(op.path, at))
        if not op.client:
            raise InvalidArgument("a lease needs a client name")
        if op.recovery_genstamp < 0:
            raise InvalidArgument(f"negative recovery genstamp {op.recovery_genstamp}")
        self._uc[node] = op.client
        self.next_genstamp = max(self.next_genstamp, op.recovery_genstamp + 1)
        return ()

    @handles(AppendOp)
    def _append(self, op: AppendOp, at: At) -> tuple[int, ...]:
        iip = self.resolved(op.path, at)
        node = self._closed_file(iip)
        if not op.client:
            raise InvalidArgument("a file under construction needs a client name")
        last = op.last_block
        if last is not None:
            old = node.blocks[-1] if node.blocks else None
            if old is None or (old.block_id, old.num_bytes) != (last.block_id, last.num_bytes):
                raise InvalidArgument(f"{op.path}: {last} is not its last block")
            if last.genstamp <= old.genstamp:
                raise InvalidArgument(f"{op.path}: append needs a newer genstamp than {old}")
        blocks = node.blocks if last is None else (*node.blocks[:-1], last)
        # open again, its last block counts whole against space quotas (as HDFS)
        charge = self._blocks_charge(iip, node, blocks, True)
        # --- validated; mutate
        if last is not None:
            self._replace_blocks(node, blocks)
        self._uc[node] = op.client
        quota.add(*charge)
        return ()

    @handles(TruncateOp)
    def _truncate(self, op: TruncateOp, at: At) -> tuple[int, ...]:
        iip = self.resolved(op.path, at)
        node = self._closed_file(iip)
        check_blocks(op.blocks)
        kept = len(op.blocks)
        if kept and (
            kept > len(node.blocks)
            or op.blocks[:-1] != node.blocks[: kept - 1]
            or op.blocks[-1].block_id != node.blocks[kept - 1].block_id
            or op.blocks[-1].num_bytes > node.blocks[kept - 1].num_bytes
        ):
            raise InvalidArgument(f"{op.path}: truncate keeps blocks it does not have")
        if sum(b.num_bytes for b in op.blocks) != op.new_length or op.new_length < 0:
            raise InvalidArgument(f"{op.path}: blocks do not add up to {op.new_length}")
        if op.recovery_genstamp and not op.client:
            raise InvalidArgument("a truncate under recovery needs a lease holder")
        charge = self._blocks_charge(iip, node, op.blocks, bool(op.recovery_genstamp))
        # --- validated; mutate
        dropped = self._replace_blocks(node, op.blocks)
        quota.add(*charge)
        node.mtime_ms = op.mtime_ms
        if op.recovery_genstamp:
            self._uc[node] = op.client
            self._truncating.add(node)
            self.next_genstamp = max(self.next_genstamp, op.recovery_genstamp + 1)
        return dropped

    @handles(ConcatOp)
    def _concat(self, op: ConcatOp, at: At) -> tuple[int, ...]:
        target_iip = self.resolved(op.target, at)
        target = self._closed_file(target_iip)
        sources = [self.resolved(path, at) for path in op.sources]
        nodes = [self._closed_file(iip) for iip in sources]
        if len(set(map(id, nodes))) != len(nodes) or target in nodes:
            raise InvalidArgument("concat: a file appears twice")
        if any(iip.inodes[-2] is not target_iip.inodes[-2] for iip in sources):
            raise InvalidArgument("concat: sources must be in the target's directory")
        # the sources' names go; their blocks take the target's replication
        chain = self._chain(target_iip, len(target_iip.parts))
        moved = (*target.blocks, *(b for node in nodes for b in node.blocks))
        space = quota.block_space(moved, target.block_size, target.replication, False) - sum(
            quota.file_space(node, False) for node in (target, *nodes))
        quota.check(chain, 0, space)
        # --- validated; mutate
        quota.add(chain, -len(nodes), space)
        parent = target_iip.parent_dir()
        blocks = list(target.blocks)
        for iip, node in zip(sources, nodes, strict=True):
            blocks.extend(node.blocks)
            unlink(parent, node.name, SORTED_PATCH_MAX)
            self._inode_count -= 1
            self._reshaped(at, unlinked, len(iip.parts), node)
        target.blocks = tuple(blocks)
        for block in blocks:
            self._blocks[obj(block).block_id] = target
        target.mtime_ms = parent.mtime_ms = obj(op).mtime_ms
        return ()

    def _closed_file(self, iip: INodesInPath) -> FileInode:
        node = iip.get()
        if not isinstance(node, FileInode):
            raise IsADirectory(f"{iip.path} is a directory")
        if node in self._uc:
            raise LeaseError(f"{iip.path} is open for writing")
        return node
