"""The write path of the namesystem: create (alone or with the first block), add_block,
additional_datanode, abandon_block, fsync (hflush) and complete, which waits for the
replicas the writer reported."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from xdfs.errors import (
    AlreadyExists,
    InvalidArgument,
    IsADirectory,
    LeaseError,
    NotEnoughReplicas,
    NotFound,
)
from xdfs.namenode.blocks.datanodes import DataNode
from xdfs.namenode.blocks.recovery import RECOVERY_HOLDER
from xdfs.namenode.fs_core import Pending, Plan
from xdfs.namenode.fs_leases import LeaseOps
from xdfs.namenode.namespace.inodes import DirInode, FileInode
from xdfs.namenode.namespace.ops import (
    AddBlockOp,
    AddFileOp,
    CloseFileOp,
    MkdirOp,
    Op,
    UpdateBlocksOp,
)
from xdfs.namenode.namespace.permissions import EXECUTE as X
from xdfs.namenode.namespace.permissions import WRITE as W
from xdfs.namenode.namespace.resolved import INodesInPath
from xdfs.protocol.blocks import BlockRecord
from xdfs.protocol.namenode import DEFAULT_MODE, CreateBlockResponse, FileStatus, LocatedBlock
from xdfs.rpc.handling import CallKey, current_call


def _retried_add_block(blocks: Sequence[BlockRecord], previous: BlockRecord | None) -> bool:
    """Whether an add_block repeats one that already added the file's last block: that
    block is still empty and ``previous`` is the one before it (none: it is the only one).
    A first try names the last block (or none of an empty file), never the one before."""
    if not blocks or blocks[-1].num_bytes != 0:
        return False
    before = blocks[-2].block_id if len(blocks) > 1 else None
    return (previous.block_id if previous is not None else None) == before


class WriteOps(LeaseOps):
    """The write path (a create may first recover an abandoned lease: LeaseOps)."""

    async def create(
        self,
        user: str,
        client: str,
        path: str,
        *,
        mode: int,
        replication: int,
        block_size: int,
        overwrite: bool,
        create_parents: bool,
    ) -> FileStatus:
        status = await self._create_now_or_later(
            user, client, path, mode=mode, replication=replication, block_size=block_size,
            overwrite=overwrite, create_parents=create_parents, first_block=False,
        )
        assert isinstance(status, FileStatus)
        return status

    async def create_with_block(
        self,
        user: str,
        client: str,
        path: str,
        *,
        mode: int,
        replication: int,
        block_size: int,
        overwrite: bool,
        create_parents: bool,
    ) -> CreateBlockResponse:
        """``create`` and the writer's first ``add_block`` in one call and one edits sync.
        The first block is left to ``add_block`` (``block`` None) when no target is live
        or quotas are set (``add_block`` checks them before it allocates anything)."""
        return self.with_block(await self._create_now_or_later(
            user, client, path, mode=mode, replication=replication, block_size=block_size,
            overwrite=overwrite, create_parents=create_parents, first_block=True,
        ))

    async def _create_now_or_later(
        self,
        user: str,
        client: str,
        path: str,
        *,
        mode: int,
        replication: int,
        block_size: int,
        overwrite: bool,
        create_parents: bool,
        first_block: bool,
    ) -> FileStatus | CreateBlockResponse:
        """The create in one step when it can be, else through the retry cache, waiting
        for what it needs first (a lease to recover ...)."""
        pending = self.create_now(
            current_call(), user, client, path, mode=mode, replication=replication,
            block_size=block_size, overwrite=overwrite, create_parents=create_parents,
            first_block=first_block,
        )
        if pending is not None:
            return await self.synced(pending)
        return await self.at_most_once(lambda: self._create(
            user, client, path, mode=mode, replication=replication, block_size=block_size,
            overwrite=overwrite, create_parents=create_parents, first_block=first_block,
        ))

    @staticmethod
    def with_block(answer: FileStatus | CreateBlockResponse) -> CreateBlockResponse:
        """A create_with_block's answer: a retry answered from the edits (replayed after a
        restart or a failover: the key is on the add_file op) is the file's status. The
        block's targets were in memory only: the writer's add_block gets that block
        again, with targets chosen anew (a retried add_block is recognised from the
        file)."""
        if isinstance(answer, FileStatus):
            return CreateBlockResponse(answer)
        return answer

    async def _create(
        self,
        user: str,
        client: str,
        path: str,
        *,
        mode: int,
        replication: int,
        block_size: int,
        overwrite: bool,
        create_parents: bool,
        first_block: bool,
    ) -> FileStatus | CreateBlockResponse:
        """A ``CreateBlockResponse`` when ``first_block``, else the new file's status (the
        answer each call's retry cache keeps, hence one type per call)."""
        resolved, plan = self._create_plan(
            user, client, path, mode, replication, block_size, overwrite, create_parents,
            first_block,
        )
        await self._recover_if_abandoned(user, client, resolved, overwrite)
        return await self.mutate("create", plan)

    def create_now(
        self,
        key: CallKey | None,
        user: str,
        client: str,
        path: str,
        *,
        mode: int,
        replication: int,
        block_size: int,
        overwrite: bool,
        create_parents: bool,
        first_block: bool,
    ) -> Pending[FileStatus | CreateBlockResponse] | None:
        """``create`` (``create_with_block`` when ``first_block``) in one step
        (:meth:`once_now`); None when it must take the async path (an abandoned lease
        to recover first, a full edits buffer, a retry)."""

        def run() -> Pending[FileStatus | CreateBlockResponse] | None:
            resolved, plan = self._create_plan(
                user, client, path, mode, replication, block_size, overwrite,
                create_parents, first_block,
            )
            if self._abandoned_lease(client, resolved, overwrite):
                return None
            return self.apply_now("create", plan, key)

        return self.once_now(key, run)

    def _create_plan(
        self,
        user: str,
        client: str,
        path: str,
        mode: int,
        replication: int,
        block_size: int,
        overwrite: bool,
        create_parents: bool,
        first_block: bool,
    ) -> tuple[INodesInPath, Callable[[], Plan[FileStatus | CreateBlockResponse]]]:
        """The path of a create, checked arguments, and its plan."""
        resolved = self.ns.resolve(path)
        replication = replication or self.config.default_replication
        block_size = block_size or self.config.default_block_size_bytes
        if not 1 <= replication <= self.config.replication_max:
            raise InvalidArgument(
                f"replication {replication} outside [1, {self.config.replication_max}]"
            )
        if block_size < self.config.block_size_min_bytes:
            raise InvalidArgument(
                f"block size {block_size} below {self.config.block_size_min_bytes}"
            )
        if client == RECOVERY_HOLDER:
            raise InvalidArgument(f"client name {client} is reserved for lease recovery")

        def plan() -> Plan[FileStatus | CreateBlockResponse]:
            iip = self.ns.fresh(resolved)
            self.ns.check_access(user, iip)  # traverse first, as mkdirs
            if iip.exists:
                self._check_overwrite(user, client, iip, overwrite)
            depth = len(iip.parts)
            if not create_parents and len(iip.inodes) < depth:
                raise NotFound(f"parent directory {iip.prefix(depth - 1)} does not exist")
            self._check_parent_not_a_file(iip)
            self.ns.check_access(user, iip, ancestor_access=W | X, traversed=True)
            dir_mode = self._default_mode(True, DEFAULT_MODE)
            ops = self._mkdir_ops(iip, depth - 1, user, dir_mode, dir_mode)
            if ops:  # (tested first: isinstance(None, MkdirOp) takes msgspec's slow path)
                first = ops[0]
                assert isinstance(first, MkdirOp)
                group = first.group  # the new parent's
            else:
                group = iip.inodes[depth - 1].group
            ops.append(
                AddFileOp(
                    iip.path,
                    self.ns.allocate_inode_id(),
                    self._default_mode(False, mode),
                    user,
                    group,
                    self.now_ms(),
                    replication,
                    block_size,
                    client,
                    overwrite,
                )
            )
            self.ns.check_name_quota(iip, len(ops) - (1 if iip.exists else 0))
            self.leases.take(client, user, self.clock())
            if first_block:
                located = self._first_block(user, ops)
                return Plan(ops, lambda: CreateBlockResponse(self.ns.stat(iip), located), (iip,))
            return Plan(ops, lambda: self.ns.stat(iip), (iip,))

        return resolved, plan

    def _first_block(self, user: str, ops: list[Op]) -> LocatedBlock | None:
        """The first block of the file ``ops`` end by adding (logged right after it, in
        the same sync), or None to leave it to ``add_block``: no live target, or quotas,
        which only ``add_block`` checks before anything is applied."""
        added = ops[-1]
        assert isinstance(added, AddFileOp)
        if self.ns.has_quotas():
            return None
        try:
            chosen = self.blocks.choose_targets(added.replication, (), added.block_size)
        except NotEnoughReplicas:
            return None
        block = BlockRecord(self.ns.allocate_block_id(), self.ns.allocate_genstamp(), 0)
        ops.append(AddBlockOp(added.path, block))
        self.blocks.expect(block.block_id, (n.node_id for n in chosen))
        return LocatedBlock(block, 0, [n.address for n in chosen],
                            self.blocks.block_token(user, block.block_id, "w"))

    def _check_overwrite(
        self, user: str, client: str, iip: INodesInPath, overwrite: bool
    ) -> None:
        """Overwriting replaces the file (a new inode, owned by ``user``; the old blocks are
        deleted once that is durable, not trashed, as HDFS and POSIX ``O_TRUNC``). As HDFS's
        startFile: WRITE on the file itself, and on its directory (checked by the caller);
        and as for a delete, a sticky directory protects other users' files."""
        if isinstance(iip.last, DirInode):
            raise IsADirectory(f"{iip.path} is a directory")
        if overwrite:
            self.ns.check_access(
                user, iip, access=W, parent_access=W | X, parent_owner_sticky=True
            )
        holder = self.ns.lease_holder(iip)
        if holder == RECOVERY_HOLDER:
            raise LeaseError(f"{iip.path}: lease recovery is in progress; try again later")
        if (
            holder
            and holder != client
            and not self.leases.is_expired(holder, self.clock(), self.config.lease_soft_limit_s)
        ):
            raise LeaseError(f"{iip.path} is being written by {self._holder_text(user, holder)}")
        if not overwrite:
            raise AlreadyExists(f"{iip.path} already exists")

    async def add_block(
        self,
        user: str,
        client: str,
        path: str,
        previous: BlockRecord | None,
        excluded: Sequence[str] = (),
        writer: str = "",
    ) -> LocatedBlock:
        return await self.at_most_once(
            lambda: self._add_block(user, client, path, previous, excluded, writer))

    async def _add_block(
        self,
        user: str,
        client: str,
        path: str,
        previous: BlockRecord | None,
        excluded: Sequence[str],
        writer: str,
    ) -> LocatedBlock:
        """Allocate the next block and its targets (``excluded``: addresses the writer
        failed with; ``writer``: its address, whose DataNode takes the first replica).
        No live target: NotEnoughReplicas before anything is logged.

        A retry whose first try's answer was lost and is not in the retry cache (add_block
        is kept in memory only: its targets are not in the edits, so a restarted or new
        active NameNode does not know them) is recognised as HDFS's onRetryBlock does: the
        file ends in an empty block right after ``previous``. It gets that block again,
        with targets chosen anew, instead of a second block or an error."""
        resolved = self.ns.resolve(path)

        def plan() -> Plan[LocatedBlock]:
            iip = self.ns.fresh(resolved)
            node = self._writable_file(user, client, iip)
            blocks = list(node.blocks)
            if _retried_add_block(blocks, previous):
                offset = sum(b.num_bytes for b in blocks[:-1])
                return Plan.of((), self._locate_new(user, node, blocks[-1], offset, excluded))
            ops: list[Op] = []
            if previous is not None:
                if not blocks or blocks[-1].block_id != previous.block_id:
                    raise InvalidArgument(
                        f"{previous.block_id} is not the last block of {iip.path}")
                blocks[-1] = previous
                ops.append(UpdateBlocksOp(iip.path, tuple(blocks)))
            offset = sum(b.num_bytes for b in blocks)
            # targets first: no live target fails the call before an id is allocated
            # quota first (as HDFS): a refused block allocates nothing and asks no DataNode
            self.ns.check_block_quota(iip, (*blocks, BlockRecord(0, 0, 0)))
            chosen = self.blocks.choose_targets(node.replication, excluded, node.block_size,
                                                writer=writer)
            block = BlockRecord(self.ns.allocate_block_id(), self.ns.allocate_genstamp(), 0)
            ops.append(AddBlockOp(iip.path, block))
            located = self._locate_new(user, node, block, offset, excluded, chosen)
            return Plan.of(ops, located, (iip,))

        return await self.mutate("add a block", plan)

    def _locate_new(
        self,
        user: str,
        node: FileInode,
        block: BlockRecord,
        offset: int,
        excluded: Sequence[str],
        chosen: Sequence[DataNode] | None = None,
    ) -> LocatedBlock:
        """A new block of ``node`` with its write targets (``chosen``, or chosen now), which
        the block map then expects replicas on."""
        if chosen is None:
            chosen = self.blocks.choose_targets(node.replication, excluded, node.block_size)
        self.blocks.expect(block.block_id, (n.node_id for n in chosen))
        return LocatedBlock(block, offset, [n.address for n in chosen],
                            self.blocks.block_token(user, block.block_id, "w"))

    def additional_datanode(
        self,
        user: str,
        client: str,
        path: str,
        block: BlockRecord,
        existing: Sequence[str],
        excluded: Sequence[str],
    ) -> LocatedBlock:
        """One more target for a block being written, replacing a failed one: the answer's
        locations hold only the new target (the writer sends the block to it)."""
        iip = self.ns.resolve(path)
        node = self._writable_file(user, client, iip)
        offset = 0
        for record in node.blocks:
            if record.block_id == block.block_id:
                break
            offset += record.num_bytes
        else:
            raise InvalidArgument(f"block {block.block_id} is not a block of {iip.path}")
        chosen = self.blocks.choose_targets(1, [*existing, *excluded], node.block_size)
        if block.block_id == node.blocks[-1].block_id:
            self.blocks.expect(block.block_id, (n.node_id for n in chosen))
        return LocatedBlock(
            record, offset, [n.address for n in chosen],
            self.blocks.block_token(user, block.block_id, "w"),
        )

    async def abandon_block(self, user: str, client: str, path: str, block_id: int) -> None:
        """Drop the file's last block (every target failed). Idempotent: a block the file
        no longer has is already abandoned; its replicas are deleted once this is durable."""
        resolved = self.ns.resolve(path)

        def plan() -> Plan[None]:
            iip = self.ns.fresh(resolved)
            blocks = self._writable_file(user, client, iip).blocks
            if not blocks or blocks[-1].block_id != block_id:
                if any(b.block_id == block_id for b in blocks):
                    raise InvalidArgument(
                        f"block {block_id} is not the last block of {iip.path}")
                return Plan.of((), None)
            return Plan.of([UpdateBlocksOp(iip.path, blocks[:-1])], None, (iip,))

        await self.mutate("abandon a block", plan)

    async def complete(
        self, user: str, client: str, path: str, blocks: list[BlockRecord]
    ) -> FileStatus:
        pending = self.complete_now(current_call(), user, client, path, blocks)
        if pending is not None:
            return await self.synced(pending)
        return await self.at_most_once(lambda: self._complete(user, client, path, blocks))

    async def _complete(
        self, user: str, client: str, path: str, blocks: list[BlockRecord]
    ) -> FileStatus:
        """Close the file once every block has min_replication replicas of the length the
        writer says (seed 003: an upload is confirmed only when DataNodes have reported)."""
        resolved, node, plan = self._complete_plan(user, client, path, blocks)
        # Waited for before mutate, holding nothing: plan() checks everything again.
        await self._wait_for_replicas(resolved.path, node.replication, blocks)
        return await self.mutate("complete", plan)

    def complete_now(
        self, key: CallKey | None, user: str, client: str, path: str, blocks: list[BlockRecord]
    ) -> Pending[FileStatus] | None:
        """``complete`` in one step (:meth:`once_now`) when every block has its replicas
        reported already; None when it must wait for them (the async path)."""

        def run() -> Pending[FileStatus] | None:
            resolved, node = self._checked_close(user, client, path, blocks)
            needed = min(self.config.min_replication, node.replication)
            if any(self.blocks.replicas_matching(b) < needed for b in blocks):
                return None
            # Checked just now, in this same step: the plan need not check again.
            return self.apply_now("complete", lambda: self._close_plan(resolved, blocks), key)

        return self.once_now(key, run)

    def _complete_plan(
        self, user: str, client: str, path: str, blocks: list[BlockRecord]
    ) -> tuple[INodesInPath, FileInode, Callable[[], Plan[FileStatus]]]:
        """The file a complete closes, checked now, and the plan that checks it again."""
        resolved, node = self._checked_close(user, client, path, blocks)

        # (check is a method, not a closure plan shares: in the compiled build two nested
        # functions that refer to each other make a reference cycle per call, garbage only
        # the cyclic collector frees)
        def plan() -> Plan[FileStatus]:
            iip = self.ns.fresh(resolved)
            self._closable_file(user, client, blocks, iip)
            return self._close_plan(iip, blocks)

        return resolved, node, plan

    def _checked_close(
        self, user: str, client: str, path: str, blocks: list[BlockRecord]
    ) -> tuple[INodesInPath, FileInode]:
        """The file a complete closes, resolved and checked now."""
        resolved = self.ns.resolve(path)
        return resolved, self._closable_file(user, client, blocks, resolved)

    def _close_plan(self, iip: INodesInPath, blocks: list[BlockRecord]) -> Plan[FileStatus]:
        """The plan of a complete whose file :meth:`_closable_file` has just checked."""
        now = self.now_ms()
        return Plan([CloseFileOp(iip.path, now, now, tuple(blocks))],
                    lambda: self.ns.stat(iip), (iip,))

    def _closable_file(
        self, user: str, client: str, blocks: list[BlockRecord], iip: INodesInPath
    ) -> FileInode:
        """The file ``complete`` closes, if ``client`` may close it with ``blocks``."""
        node = self._writable_file(user, client, iip)
        if [b.block_id for b in blocks] != [b.block_id for b in node.blocks]:
            raise InvalidArgument(
                f"complete {iip.path}: block list differs from the NameNode's")
        if any(b.num_bytes < 0 for b in blocks):
            raise InvalidArgument("block lengths must be >= 0")
        return node

    async def _wait_for_replicas(
        self, path: str, replication: int, blocks: list[BlockRecord]
    ) -> None:
        """Until each block has enough replicas reported (woken by each report of one of
        them, no polling), at most complete_wait_s; then NotEnoughReplicas."""
        if not blocks:
            return  # an empty file: nothing to wait for (and no event to make)
        needed = min(self.config.min_replication, replication)
        wake = asyncio.Event()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.complete_wait_s
        # The deadline is a timer that wakes the wait, not asyncio.timeout_at, which needs
        # a task: complete starts eagerly, outside any task, in its request's loop turn.
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            wake.set()

        timer: asyncio.TimerHandle | None = None
        try:
            for block in blocks:
                self.blocks.watch(block.block_id, wake.set)
                try:
                    while (have := self.blocks.replicas_matching(block)) < needed:
                        if expired:
                            raise NotEnoughReplicas(
                                f"complete {path}: block {block.block_id} has {have} of the "
                                f"{needed} replica(s) it needs reported after "
                                f"{self.config.complete_wait_s:g} s "
                                f"(length {block.num_bytes})"
                            )
                        if timer is None:
                            timer = loop.call_at(deadline, expire)
                        wake.clear()
                        await wake.wait()
                finally:
                    self.blocks.unwatch(block.block_id, wake.set)
        finally:
            if timer is not None:
                timer.cancel()

    async def fsync(self, user: str, client: str, path: str, last_block: BlockRecord) -> None:
        """hflush: every target finalized the open file's last block at this length; new
        readers see it (HDFS's fsync with the last block's length)."""
        resolved = self.ns.resolve(path)
        if last_block.num_bytes < 0:
            raise InvalidArgument("block lengths must be >= 0")

        def plan() -> Plan[None]:
            iip = self.ns.fresh(resolved)
            blocks = list(self._writable_file(user, client, iip).blocks)
            if not blocks or (blocks[-1].block_id, blocks[-1].genstamp) != (
                    last_block.block_id, last_block.genstamp):
                raise InvalidArgument(f"{last_block} is not the last block of {iip.path}")
            if blocks[-1] == last_block:
                return Plan.of((), None)
            blocks[-1] = last_block
            return Plan.of([UpdateBlocksOp(iip.path, tuple(blocks))], None, (iip,))

        await self.mutate("fsync", plan)
