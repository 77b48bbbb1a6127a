"""Changes to closed files, with HDFS semantics: append (reopen for a writer), truncate
(at a block boundary at once, else by a block recovery) and concat."""

from __future__ import annotations

from collections.abc import Sequence

from xdfs.errors import (
    InvalidArgument,
    IsADirectory,
    LeaseError,
    NotEnoughReplicas,
    RecoveryInProgress,
)
from xdfs.namenode.blocks.recovery import RECOVERY_HOLDER, Attempt, RecoverBlock
from xdfs.namenode.fs_core import Plan
from xdfs.namenode.fs_write import WriteOps
from xdfs.namenode.namespace.inodes import FileInode
from xdfs.namenode.namespace.ops import AppendOp, ConcatOp, TruncateOp
from xdfs.namenode.namespace.permissions import EXECUTE as X
from xdfs.namenode.namespace.permissions import WRITE as W
from xdfs.namenode.namespace.resolved import INodesInPath
from xdfs.namenode.retry_cache import ReplayedAppend
from xdfs.protocol.blocks import BlockRecord
from xdfs.protocol.namenode import AppendResponse, LocatedBlock


class AppendOps(WriteOps):
    """append, truncate and concat."""

    def _closed_for_change(self, user: str, iip: INodesInPath, what: str) -> FileInode:
        """A closed file ``user`` may write (HDFS: WRITE on the file); a file still open
        is refused with the reason (a writer, or a block recovery, holds it)."""
        self.ns.check_access(user, iip, access=W)
        node = iip.get()
        if not isinstance(node, FileInode):
            raise IsADirectory(f"{iip.path} is a directory")
        holder = self.ns.lease_holder(iip)
        if holder == RECOVERY_HOLDER:
            raise RecoveryInProgress(
                f"cannot {what} {iip.path}: its last block is being recovered; try again later"
            )
        if holder:
            raise LeaseError(
                f"cannot {what} {iip.path}: it is being written by "
                f"{self._holder_text(user, holder)}"
            )
        return node

    async def append(self, user: str, client: str, path: str) -> AppendResponse:
        """Reopen a closed file for ``client`` (HDFS's append): a partial last block gets a
        new generation stamp and is handed back with its replicas' locations. At most once:
        a retry gets the first answer, also from a NameNode that read the append from the
        edits (after a restart or a failover)."""
        answer = await self.at_most_once(lambda: self._append(user, client, path))
        if isinstance(answer, ReplayedAppend):
            return self._replayed_append_answer(user, answer)
        return answer

    def _replayed_append_answer(self, user: str, replayed: ReplayedAppend) -> AppendResponse:
        """The first answer of an append this NameNode read from the edits, with where the
        reopened block's replicas are now and a token to write it."""
        blocks = list(replayed.blocks)
        last: LocatedBlock | None = None
        if replayed.last_block is not None:
            block_id = replayed.last_block.block_id
            last = LocatedBlock(replayed.last_block, sum(b.num_bytes for b in blocks[:-1]),
                                self.blocks.locations(block_id),
                                self.blocks.block_token(user, block_id, "w"))
        return AppendResponse(replayed.status, blocks, last, replayed.old_genstamp)

    async def _append(
        self, user: str, client: str, path: str
    ) -> AppendResponse | ReplayedAppend:
        if client == RECOVERY_HOLDER or not client:
            raise InvalidArgument(f"append needs a client name (not {client!r})")
        resolved = self.ns.resolve(path)

        def plan() -> Plan[AppendResponse]:
            iip = self.ns.fresh(resolved)
            node = self._closed_for_change(user, iip, "append to")
            blocks = list(node.blocks)
            last: LocatedBlock | None = None
            old_genstamp = 0
            reopened: BlockRecord | None = None
            if blocks and blocks[-1].num_bytes < node.block_size:
                old = blocks[-1]
                locations = self.blocks.locations(old.block_id)
                if not locations:
                    raise NotEnoughReplicas(
                        f"cannot append to {iip.path}: no replica of its last block "
                        f"{old.block_id} is known")
                reopened = BlockRecord(old.block_id, self.ns.allocate_genstamp(), old.num_bytes)
                blocks[-1] = reopened
                old_genstamp = old.genstamp
                last = LocatedBlock(reopened, sum(b.num_bytes for b in blocks[:-1]), locations,
                                    self.blocks.block_token(user, old.block_id, "w"))
                self.blocks.expect_holders(old.block_id)
            self.leases.take(client, user, self.clock())
            return Plan(
                [AppendOp(iip.path, client, reopened, old_genstamp)],
                lambda: AppendResponse(self.ns.stat(iip), blocks, last, old_genstamp),
                (iip,),
            )

        answer: AppendResponse | ReplayedAppend = await self.mutate("append", plan)
        return answer

    async def truncate(self, user: str, path: str, new_length: int) -> bool:
        """Cut a closed file to ``new_length`` (HDFS's truncate): True when done at once
        (the cut is at a block boundary); False when the last block is recovered to the
        new length first (the file stays open, held by the NameNode, until it is).

        Idempotent by its arguments, as HDFS's: a repeat (a lost answer, a failover) finds
        the file at ``new_length`` and answers True, or, while the recovery of that very
        cut is under way, False again; nothing is cut twice."""
        resolved = self.ns.resolve(path)
        if new_length < 0:
            raise InvalidArgument(f"cannot truncate to a negative length ({new_length})")

        done: tuple[bool, Attempt | None] = (True, None)

        def plan() -> Plan[tuple[bool, Attempt | None]]:
            iip = self.ns.fresh(resolved)
            if self._being_truncated_to(user, iip, new_length):
                return Plan.of((), (False, None))
            node = self._closed_for_change(user, iip, "truncate")
            length = sum(b.num_bytes for b in node.blocks)
            if new_length > length:
                raise InvalidArgument(
                    f"cannot truncate {iip.path} to {new_length} bytes: it has {length}")
            if new_length == length:
                return Plan.of((), done)
            kept = _kept_blocks(node.blocks, new_length)
            now = self.now_ms()
            if sum(b.num_bytes for b in kept) == new_length:
                return Plan.of([TruncateOp(iip.path, new_length, now, kept)], done, (iip,))
            # inside a block: the block keeps its id and stamp, cut to the new length
            cut = BlockRecord(kept[-1].block_id, kept[-1].genstamp,
                              new_length - sum(b.num_bytes for b in kept[:-1]))
            decision = RecoverBlock(cut, self.blocks.holders(cut))
            if not decision.holders:
                raise NotEnoughReplicas(
                    f"cannot truncate {iip.path}: no live DataNode holds its block "
                    f"{cut.block_id}")
            genstamp = self.ns.allocate_genstamp()
            started: tuple[bool, Attempt | None] = (
                False, self.blocks.begin_recovery(decision, genstamp))
            op = TruncateOp(iip.path, new_length, now, (*kept[:-1], cut), RECOVERY_HOLDER,
                            genstamp)
            return Plan.of([op], started, (iip,))

        finished, attempt = await self.mutate("truncate", plan)
        if attempt is not None:
            self.blocks.dispatch_recovery(attempt)  # its genstamp is durable now
        return finished

    def _being_truncated_to(self, user: str, iip: INodesInPath, new_length: int) -> bool:
        """The file waits for the block recovery of a truncate to ``new_length`` (a repeat
        of that truncate gets the first answer, HDFS's check of the truncate block)."""
        node = iip.get()
        if not (isinstance(node, FileInode) and self.ns.is_truncating(node)
                and sum(b.num_bytes for b in node.blocks) == new_length):
            return False
        self.ns.check_access(user, iip, access=W)
        return True

    async def concat(self, user: str, target: str, sources: Sequence[str]) -> None:
        await self.at_most_once(lambda: self._concat(user, target, sources))

    async def _concat(self, user: str, target: str, sources: Sequence[str]) -> None:
        """Move the blocks of ``sources`` (in order) to the end of ``target`` and delete
        the sources (HDFS's concat): all closed files of one directory and one block size,
        each named once."""
        if not sources:
            raise InvalidArgument("concat needs at least one source")
        resolved_target = self.ns.resolve(target)
        resolved_sources = [self.ns.resolve(source) for source in sources]

        def plan() -> Plan[None]:
            iip = self.ns.fresh(resolved_target)
            node = self._closed_for_change(user, iip, "concat to")
            srcs = [self.ns.fresh(source) for source in resolved_sources]
            paths_seen = {iip.path}
            for src in srcs:
                if src.path in paths_seen:
                    raise InvalidArgument(f"concat: {src.path} is named twice (or is the target)")
                paths_seen.add(src.path)
                if src.prefix(len(src.parts) - 1) != iip.prefix(len(iip.parts) - 1):
                    raise InvalidArgument(
                        f"concat: {src.path} is not in the directory of {iip.path}")
                source = self._closed_for_change(user, src, "concat")
                if source.block_size != node.block_size:
                    raise InvalidArgument(
                        f"concat: {src.path} has block size {source.block_size}, "
                        f"{iip.path} {node.block_size}: they must be the same")
            self.ns.check_access(user, iip, parent_access=W | X)
            op = ConcatOp(iip.path, tuple(src.path for src in srcs), self.now_ms())
            return Plan.of([op], None, (iip, *srcs))

        await self.mutate("concat", plan)


def _kept_blocks(blocks: Sequence[BlockRecord], new_length: int) -> tuple[BlockRecord, ...]:
    """The blocks a file cut to ``new_length`` keeps, whole (the last may hold more)."""
    kept: list[BlockRecord] = []
    position = 0
    for block in blocks:
        if position >= new_length:
            break
        kept.append(block)
        position += block.num_bytes
    return tuple(kept)
