"""Leases of open files: renewal, the monitor's recovery of abandoned ones, HDFS's
recoverLease, and the commit of a block recovery that closes the file
(blocks/recovery.py decides how each is recovered)."""

from __future__ import annotations

from dataclasses import dataclass

from xdfs.errors import AlreadyExists, InvalidArgument, IsADirectory
from xdfs.namenode.blocks.recovery import RECOVERY_HOLDER, Attempt, CloseNow
from xdfs.namenode.fs_core import NamesystemCore, Plan
from xdfs.namenode.namespace.inodes import DirInode, FileInode
from xdfs.namenode.namespace.ops import CloseFileOp, Op, ReassignLeaseOp
from xdfs.namenode.namespace.permissions import EXECUTE as X
from xdfs.namenode.namespace.permissions import WRITE as W
from xdfs.namenode.namespace.resolved import INodesInPath
from xdfs.protocol.blocks import BlockRecord


@dataclass(frozen=True, slots=True)
class Recovered:
    """What a lease recovery decided: the files closed at once, and the block recoveries
    to start once their stamps are durable."""

    closed: set[str]
    attempts: list[Attempt]


class LeaseOps(NamesystemCore):
    """The lease operations of the namesystem."""

    def renew_lease(self, user: str, client: str) -> None:
        self.leases.renew(client, user, self.clock())

    def due_lease_recoveries(self) -> list[str]:
        """The open files whose lease is due for recovery: their writer went silent past the
        hard limit, or their block recovery's attempt is due again (its primary died or did
        not commit in time, or the NameNode restarted meanwhile)."""
        open_files = self.ns.files_under_construction()
        self.leases.drop_idle({holder for _p, holder in open_files})
        now_s = self.clock()
        return [path for path, holder in open_files if self._lease_due(path, holder, now_s)]

    def _lease_due(self, path: str | INodesInPath, holder: str, now_s: float) -> bool:
        if holder == RECOVERY_HOLDER:
            return self._recovery_due(path)
        return self.leases.is_expired(holder, now_s, self.config.lease_hard_limit_s)

    async def recover_abandoned(self, path: str) -> None:
        """Recover one file for the lease monitor, if it is still due. One file at a time: a
        file that cannot be closed (a path the limits refuse, say) must not hold up the
        others."""
        iip = self.ns.resolve(path)
        holder = self.ns.lease_holder(iip) if iip.exists else ""
        if holder and self._lease_due(iip, holder, self.clock()):
            await self._recover([iip.path])

    def _recovery_due(self, path: str | INodesInPath) -> bool:
        blocks = self.ns.get_blocks(path)
        return not blocks or self.blocks.recovery_due(blocks[-1].block_id)

    async def recover_lease(self, user: str, path: str) -> bool:
        """HDFS's recoverLease: start recovering an open file's lease now, whoever holds
        it; True when the file is closed (already, or by this call)."""
        iip = self.ns.resolve(path)
        self._check_writer(user, iip)
        if isinstance(iip.get(), DirInode):
            raise IsADirectory(f"{iip.path} is a directory")
        holder = self.ns.lease_holder(iip)
        if not holder:
            return True
        if holder == RECOVERY_HOLDER and not self._recovery_due(iip):
            return False  # an attempt is under way
        return iip.path in await self._recover([iip.path])

    async def _recover_if_abandoned(
        self, user: str, client: str, resolved: INodesInPath, overwrite: bool
    ) -> None:
        """``create`` without overwrite of a file whose writer is past the soft limit
        starts its lease recovery (HDFS), then fails: the file exists."""
        iip = self._abandoned_lease(client, resolved, overwrite)
        if iip is None:
            return
        holder = self.ns.lease_holder(iip)
        self.ns.check_access(user, iip, ancestor_access=W | X)
        closed = await self._recover([iip.path])
        raise AlreadyExists(
            f"{iip.path} already exists" + ("" if closed else
            f" (its writer {holder} went silent: lease recovery started, try again later)")
        )

    def _abandoned_lease(
        self, client: str, resolved: INodesInPath, overwrite: bool
    ) -> INodesInPath | None:
        """The file a create without overwrite finds open by another writer past the soft
        limit (its lease is recovered first: :meth:`_recover_if_abandoned`), else None."""
        if overwrite:
            return None
        iip = self.ns.fresh(resolved)
        holder = self.ns.lease_holder(iip) if iip.exists else ""
        if not holder or holder in (client, RECOVERY_HOLDER):
            return None
        if not self.leases.is_expired(holder, self.clock(), self.config.lease_soft_limit_s):
            return None
        return iip

    async def _recover(self, candidates: list[str]) -> set[str]:
        """Recover the leases of these open files (see blocks/recovery.py); returns the
        paths closed at once. Block recoveries start once their stamps are durable."""

        def plan() -> Plan[Recovered]:
            ops: list[Op] = []
            at: list[INodesInPath] = []
            recovered = Recovered(set(), [])
            now = self.now_ms()
            for path in candidates:
                iip = self.ns.resolve(path)
                if not iip.exists or not self.ns.lease_holder(iip):
                    continue  # deleted or closed meanwhile
                at.append(iip)
                node = iip.get()
                assert isinstance(node, FileInode)
                decision = self.blocks.plan_lease_recovery(node.blocks,
                                                           self.ns.is_truncating(node))
                if isinstance(decision, CloseNow):
                    ops.append(CloseFileOp(iip.path, now, now, decision.blocks))
                    recovered.closed.add(iip.path)
                    continue
                if not decision.holders:
                    continue  # acknowledged bytes, nobody to ask yet: the next check tries
                genstamp = self.ns.allocate_genstamp()
                recovered.attempts.append(self.blocks.begin_recovery(decision, genstamp))
                ops.append(ReassignLeaseOp(iip.path, RECOVERY_HOLDER, genstamp))
            return Plan.of(ops, recovered, tuple(at))

        recovered = await self.mutate("recover leases", plan, keyed=False)
        for attempt in recovered.attempts:
            self.blocks.dispatch_recovery(attempt)
        return recovered.closed

    async def commit_block_synchronization(
        self, block: BlockRecord, recovery_genstamp: int, length: int, delete_block: bool
    ) -> None:
        """The primary of a block recovery agreed ``length`` with the holders and finalized
        their replicas with ``recovery_genstamp``: close the file (durably) with it."""
        if length < 0:
            raise InvalidArgument(f"negative length {length}")
        recovered = BlockRecord(block.block_id, recovery_genstamp, length)

        def plan() -> Plan[None]:
            node = self.ns.block_file(block.block_id)
            if node is not None and not self.ns.is_open(node) and recovered in node.blocks:
                return Plan.of((), None)  # committed already: a retried call
            iip = self._under_recovery(block.block_id, recovery_genstamp)
            blocks = list(self.ns.get_blocks(iip))
            file = iip.get()
            assert isinstance(file, FileInode)
            if self.ns.is_truncating(file) and not delete_block and (
                    length != blocks[-1].num_bytes):
                raise InvalidArgument(
                    f"block {block.block_id}: a truncate recovers it to "
                    f"{blocks[-1].num_bytes} bytes, not {length}")
            if delete_block:
                blocks.pop()
            else:
                blocks[-1] = recovered
            now = self.now_ms()
            return Plan.of([CloseFileOp(iip.path, now, now, tuple(blocks))], None, (iip,))

        await self.mutate("commit block synchronization", plan)
        self.blocks.recoveries.finish(block.block_id)

    def _under_recovery(self, block_id: int, recovery_genstamp: int) -> INodesInPath:
        """The open file whose last block the recovery with this genstamp works on;
        InvalidArgument when that recovery is not the one under way."""
        node = self.ns.block_file(block_id)
        attempt = self.blocks.recoveries.current(block_id)
        iip = self.ns.locate(node) if node is not None else None
        if (
            node is None
            or iip is None
            or attempt is None
            or attempt.genstamp != recovery_genstamp
            or node.blocks[-1].block_id != block_id
            or self.ns.lease_holder(iip) != RECOVERY_HOLDER
        ):
            raise InvalidArgument(
                f"block {block_id}: no block recovery with genstamp {recovery_genstamp} "
                "is under way (superseded, or the file is gone)"
            )
        return iip
