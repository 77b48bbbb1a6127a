"""Quotas in the namespace: the quotas a change counts against, what a change of
blocks or a move charges them, the set_quota op, and the checks plans make first
(semantics and usage counting: :mod:`.quota`)."""

from __future__ import annotations

from collections.abc import Sequence

from xdfs.errors import InvalidArgument
from xdfs.namenode.namespace import quota
from xdfs.namenode.namespace.inodes import DirInode, FileInode, Inode
from xdfs.namenode.namespace.ops import SetQuotaOp
from xdfs.namenode.namespace.resolved import INodesInPath
from xdfs.namenode.namespace.tree_base import At, NamespaceBase, PathArg, handles
from xdfs.protocol.blocks import BlockRecord


class QuotaTracking(NamespaceBase):
    """Quota charges, set_quota and the quota checks."""

    def _chain(self, iip: INodesInPath, depth: int) -> quota.Chain:
        """The quotas a change at component ``depth`` of ``iip`` counts against: those of
        the directories above it, root first. Empty (and free) when no directory has one."""
        quotas = self._quotas
        if not quotas:
            return []
        return [
            (found, iip.prefix(index))
            for index, node in enumerate(iip.inodes[:depth])
            if (found := quotas.get(node.id)) is not None
        ]

    def _usage(self, node: Inode) -> tuple[int, int]:
        """(names, space) of ``node``'s tree: a directory with a quota knows it."""
        known = self._quotas.get(node.id) if isinstance(node, DirInode) else None
        if known is not None:
            return known.names, known.space
        return quota.usage(node, self._quotas, self._uc)

    def _blocks_charge(
        self, iip: INodesInPath, node: FileInode, blocks: Sequence[BlockRecord], open_: bool
    ) -> tuple[quota.Chain, int, int]:
        """Check what giving ``node`` these ``blocks`` (and leaving it open or not) changes
        in the quotas above it; the (chain, names, space) to :func:`quota.add` once done."""
        chain = self._chain(iip, len(iip.parts))
        if not chain:
            return chain, 0, 0
        space = quota.block_space(blocks, node.block_size, node.replication, open_)
        delta = space - quota.file_space(node, node in self._uc)
        quota.check(chain, 0, delta)
        return chain, 0, delta

    def _move_charge(self, node: Inode, src: quota.Chain, dst: quota.Chain) -> None:
        """A move of ``node`` from under the quotas ``src`` to under ``dst``: checked
        against the ones it enters, then counted (a quota above both sees no change)."""
        if not src and not dst:
            return
        src_ids = {id(entry[0]) for entry in src}
        dst_ids = {id(entry[0]) for entry in dst}
        leaving = [entry for entry in src if id(entry[0]) not in dst_ids]
        entering = [entry for entry in dst if id(entry[0]) not in src_ids]
        if not leaving and not entering:
            return
        names, space = self._usage(node)
        quota.check(entering, names, space)
        quota.add(leaving, -names, -space)
        quota.add(entering, names, space)

    # --- the op ------------------------------------------------------------------------

    @handles(SetQuotaOp)
    def _set_quota(self, op: SetQuotaOp, at: At) -> tuple[int, ...]:
        iip = self.resolved(op.path, at)
        node = iip.get()
        if not isinstance(node, DirInode):
            raise InvalidArgument(f"Cannot set quota on a file: {iip.path}")
        if min(op.ns_quota, op.ds_quota) < quota.NO_QUOTA:
            raise InvalidArgument(
                f"Illegal value for nsQuota or ssQuota: {op.ns_quota} and {op.ds_quota}"
            )
        # --- validated; mutate
        if op.ns_quota == op.ds_quota == quota.NO_QUOTA:
            self._quotas.pop(node.id, None)
            return ()
        known = self._quotas.get(node.id)
        if known is None:  # the one walk: usage is kept from now on
            names, space = quota.usage(node, self._quotas, self._uc)
            self._quotas[node.id] = quota.Quota(op.ns_quota, op.ds_quota, names, space)
        else:
            known.ns_quota, known.ds_quota = op.ns_quota, op.ds_quota
        return ()

    # --- queries -----------------------------------------------------------------------

    def check_name_quota(self, path: PathArg, names: int) -> None:
        """Raise NSQuotaExceeded if ``names`` new names on the way to ``path`` (below its
        deepest existing directory) would take a quota over: what a plan of several ops
        (``mkdir -p``, a create with parents) checks first, so a refusal logs none of them."""
        iip = self._at(path)
        quota.check(self._chain(iip, len(iip.inodes)), names, 0)

    def check_block_quota(self, path: PathArg, blocks: Sequence[BlockRecord]) -> None:
        """Raise DSQuotaExceeded if the open file at ``path`` may not have ``blocks`` (its
        next block included): what ``add_block`` checks before choosing targets, as HDFS."""
        iip = self._at(path)
        node = iip.get()
        if isinstance(node, FileInode):
            self._blocks_charge(iip, node, blocks, True)

    def has_quotas(self) -> bool:
        """Whether any directory has a quota."""
        return bool(self._quotas)

    def quota_of(self, path: PathArg) -> quota.Quota | None:
        """The quota of a directory (with its usage), None when it has none."""
        return self._quotas.get(self._at(path).get().id)
