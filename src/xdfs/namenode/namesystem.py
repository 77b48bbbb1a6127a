"""The NameNode's operations: permission checks, op planning, apply, log, durability.

One class, :class:`Namesystem`, in modules by job: :mod:`.fs_core` (state, the mutation
path, shared checks), :mod:`.fs_write` (the write path), :mod:`.fs_append` (append,
truncate, concat), :mod:`.fs_leases` (leases and their recovery); here the reads, the
other namespace mutations and the trash.

Every mutation takes the one path of :meth:`~.fs_core.NamesystemCore.mutate` (plan, apply,
log, then answer once durable); non-idempotent calls run
:meth:`~.fs_core.NamesystemCore.at_most_once`.

Reads run inline without touching the log. They may observe a change whose sync is still
in flight (as in HDFS); a mutation that turns out to be a no-op still waits for the log's
current txid, so nothing is acknowledged on the strength of an unsynced change.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdfs.common import paths
from xdfs.errors import (
    AccessDenied,
    AlreadyExists,
    DirectoryNotEmpty,
    InvalidArgument,
    InvalidPath,
    IsADirectory,
    NotFound,
)
from xdfs.namenode.fs_append import AppendOps
from xdfs.namenode.fs_core import Pending, Plan
from xdfs.namenode.namespace import trash
from xdfs.namenode.namespace.inodes import DirInode
from xdfs.namenode.namespace.ops import (
    DeleteOp,
    Op,
    RenameOp,
    SetOwnerOp,
    SetPermissionOp,
    SetQuotaOp,
    SetReplicationOp,
    SetTimesOp,
)
from xdfs.namenode.namespace.permissions import EXECUTE as X
from xdfs.namenode.namespace.permissions import READ as R
from xdfs.namenode.namespace.permissions import WRITE as W
from xdfs.namenode.namespace.resolved import INodesInPath
from xdfs.protocol.namenode import (
    DEFAULT_MODE,
    ContentSummary,
    FileStatus,
    LocatedBlock,
    LocatedBlocks,
)
from xdfs.rpc.handling import CallKey, current_call

__all__ = ["Namesystem", "Plan"]


class Namesystem(AppendOps):
    """Every operation of the NameNode on its namespace and block map."""

    # -- reads --------------------------------------------------------------------------

    def stat(self, user: str, path: str) -> FileStatus:
        return self.ns.stat_as(user, path)

    def list_dir(
        self, user: str, path: str, start_after: str, limit: int
    ) -> tuple[list[FileStatus], int]:
        iip = self.ns.resolve(path)
        if isinstance(iip.get(), DirInode):
            self.ns.check_access(user, iip, access=R | X)
        else:
            self.ns.check_access(user, iip)
        limit = max(1, min(limit, self.config.list_limit_max))
        return self.ns.list_dir(iip, start_after, limit)

    async def content_summary(self, user: str, path: str) -> ContentSummary:
        """Counts of a subtree, walked in slices (semantics: :mod:`.namespace.steps`)."""
        iip = self.ns.resolve(path)
        # as HDFS: r-x on every directory of the subtree, or its counts leak private dirs
        access = R | X if isinstance(iip.get(), DirInode) else 0
        self.ns.check_access(user, iip, access=access)
        await self.walks.run(self.ns.subtree_access_steps(user, iip, access))
        return await self.walks.run(self.ns.content_summary_steps(iip))

    def access(self, user: str, path: str, bits: int) -> None:
        """AccessDenied unless ``user`` may access ``path`` with ``bits`` (r=4, w=2, x=1);
        NotFound when it does not exist (HDFS's checkAccess)."""
        iip = self.ns.resolve(path)
        iip.get()
        self.ns.check_access(user, iip, access=bits)

    def block_locations(self, user: str, path: str, offset: int, length: int) -> LocatedBlocks:
        """The blocks overlapping the range, each with its good replicas in random order
        and a read token."""
        iip = self.ns.resolve(path)
        self.ns.check_access(user, iip, access=R)
        status = self.ns.stat(iip)
        if status.is_dir:
            raise IsADirectory(f"{iip.path} is a directory")
        if offset < 0:
            raise InvalidArgument("offset must be >= 0")
        end = status.length if length < 0 else min(status.length, offset + length)
        located: list[LocatedBlock] = []
        position = 0
        for block in self.ns.get_blocks(iip):
            if (position + block.num_bytes > offset and position < end) or (
                block.num_bytes == 0 and offset <= position <= end
            ):
                block_id = block.block_id
                located.append(LocatedBlock(
                    block, position, self.blocks.locations(block_id),
                    self.blocks.block_token(user, block_id, "r"),
                ))
            position += block.num_bytes
        return LocatedBlocks(status.length, located, status.under_construction)

    # -- namespace mutations ------------------------------------------------------------
    # Each resolves its path(s) first (a bad path is refused before anything waits), then
    # plans on them: ``fresh`` walks again only if the tree changed while it waited.

    async def mkdirs(self, user: str, path: str, mode: int, parents: bool) -> FileStatus:
        pending = self.mkdirs_now(current_call(), user, path, mode, parents)
        if pending is not None:
            return await self.synced(pending)
        return await self.at_most_once(
            lambda: self.mutate("mkdirs", self._mkdirs_plan(user, path, mode, parents)))

    def mkdirs_now(
        self, key: CallKey | None, user: str, path: str, mode: int, parents: bool
    ) -> Pending[FileStatus] | None:
        """``mkdirs`` in one step (:meth:`once_now`); None: take the async path."""
        return self.once_now(key, lambda: self.apply_now(
            "mkdirs", self._mkdirs_plan(user, path, mode, parents), key))

    def _mkdirs_plan(
        self, user: str, path: str, mode: int, parents: bool
    ) -> Callable[[], Plan[FileStatus]]:
        resolved = self.ns.resolve(path)

        def plan() -> Plan[FileStatus]:
            iip = self.ns.fresh(resolved)
            # traverse first: whether something exists in a directory the user may not
            # enter is not his to learn (HDFS checks traverse before existence too)
            self.ns.check_access(user, iip)
            if iip.exists:
                if isinstance(iip.last, DirInode) and parents:
                    return Plan((), lambda: self.ns.stat(iip), (iip,))
                raise AlreadyExists(f"{iip.path} already exists")
            self.ns.check_access(user, iip, ancestor_access=W | X, traversed=True)
            final_mode = self._default_mode(True, mode)
            ops = self._mkdir_ops(iip, len(iip.parts), user,
                                  self._default_mode(True, DEFAULT_MODE), final_mode)
            if len(ops) > 1 and not parents:
                raise NotFound(f"parent of {iip.path} does not exist")
            self.ns.check_name_quota(iip, len(ops))  # all or none of the directories
            return Plan(ops, lambda: self.ns.stat(iip), (iip,))

        return plan

    def report_bad_replicas(self, replicas: Sequence[tuple[int, str]]) -> None:
        """Replicas that failed their checksums, (block id, address), from a reader or a
        DataNode (the handler checked the caller may report them)."""
        for block_id, address in replicas:
            self.blocks.report_bad_replica(block_id, address)

    async def delete(self, user: str, path: str, *, recursive: bool, skip_trash: bool) -> str:
        pending = self.delete_now(current_call(), user, path, recursive, skip_trash)
        if pending is not None:
            return await self.synced(pending)
        return await self.at_most_once(lambda: self._delete(user, path, recursive, skip_trash))

    def delete_now(
        self, key: CallKey | None, user: str, path: str, recursive: bool, skip_trash: bool
    ) -> Pending[str] | None:
        """``delete`` in one step (:meth:`once_now`), unless it is recursive (the subtree
        of a directory is walked first, in slices; the path is resolved once, there):
        None, take the async path."""
        if recursive:
            return None
        return self.once_now(key, lambda: self.apply_now(
            "delete", self._delete_plan(user, self.ns.resolve(path), False, skip_trash, False),
            key))

    async def _delete(self, user: str, path: str, recursive: bool, skip_trash: bool) -> str:
        """Delete ``path`` or move it to the user's trash; returns the trash path or "".

        A recursive delete of a directory checks rwx on every directory beneath first, in
        slices (other calls run meanwhile); the delete itself, with the checks on the path
        and its parent, is then one atomic step. A directory created or chmodded under the
        path between the two is not checked again (HDFS holds its lock across both)."""
        resolved = self.ns.resolve(path)
        walked = recursive and isinstance(resolved.last, DirInode)
        if walked:
            await self.walks.run(self.ns.subtree_access_steps(user, resolved, R | W | X))
        return await self.mutate(
            "delete", self._delete_plan(user, resolved, recursive, skip_trash, walked))

    def _delete_plan(
        self, user: str, resolved: INodesInPath, recursive: bool, skip_trash: bool,
        walked: bool,
    ) -> Callable[[], Plan[str]]:
        """``walked``: the subtree's permissions were checked already."""

        def plan() -> Plan[str]:
            iip = self.ns.fresh(resolved)
            if not iip.parts:
                raise InvalidArgument("cannot delete the root directory")
            status = self.ns.stat(iip)
            if status.is_dir and status.children and not recursive:
                raise DirectoryNotEmpty(f"`{iip.path} is non empty': Directory is not empty")
            self.ns.check_access(
                user,
                iip,
                parent_access=W | X,
                parent_owner_sticky=True,
                # the subtree was walked above; the directory itself is checked again here
                access=R | W | X if status.is_dir and walked else 0,
                sub_access=R | W | X if status.is_dir and not walked else 0,
            )
            if (self.config.trash_interval_s > 0 and not skip_trash
                    and not trash.is_in_trash(iip.path)):
                return self._to_trash(user, iip)
            return Plan.of([DeleteOp(iip.path, self.now_ms())], "", (iip,))

        return plan

    def _to_trash(self, user: str, iip: INodesInPath) -> Plan[str]:
        if paths.is_ancestor(iip.path, trash.trash_root(user)):
            raise InvalidArgument(
                f"cannot move {iip.path} to the trash, as it contains the trash "
                "(delete it with skip_trash)"
            )
        now = self.now_ms()
        try:
            target = trash.target(self.ns, user, iip, now)
            self._check_move_limits(iip, target)
        except InvalidPath as exc:
            raise InvalidPath(
                f"cannot move {iip.path} to the trash: {exc.message} (delete it with "
                "skip_trash)"
            ) from None
        ops = [*trash.dir_ops(self.ns, user, target, self.config.supergroup, now),
               RenameOp(iip.path, target.path, now)]
        return Plan.of(ops, target.path, (iip, target))

    async def rename(self, user: str, src: str, dst: str) -> str:
        pending = self.rename_now(current_call(), user, src, dst)
        if pending is not None:
            return await self.synced(pending)
        return await self.at_most_once(
            lambda: self.mutate("rename", self._rename_plan(user, src, dst)))

    def rename_now(self, key: CallKey | None, user: str, src: str, dst: str) -> Pending[str] | None:
        """``rename`` in one step (:meth:`once_now`); None: take the async path."""
        return self.once_now(
            key, lambda: self.apply_now("rename", self._rename_plan(user, src, dst), key))

    def _rename_plan(self, user: str, src: str, dst: str) -> Callable[[], Plan[str]]:
        resolved_src, resolved_dst = self.ns.resolve(src), self.ns.resolve(dst)

        def plan() -> Plan[str]:
            source = self.ns.fresh(resolved_src)
            if not source.parts:
                raise InvalidArgument("cannot rename the root directory")
            final = self.ns.rename_target(source, self.ns.fresh(resolved_dst))
            self.ns.check_access(user, source, parent_access=W | X, parent_owner_sticky=True)
            if final.path == source.path:
                return Plan.of((), final.path)
            if final.exists:
                raise AlreadyExists(f"{final.path} already exists")
            self.ns.check_access(user, final, parent_access=W | X)
            self._check_move_limits(source, final)
            ops = [RenameOp(source.path, final.path, self.now_ms())]
            return Plan.of(ops, final.path, (source, final))

        return plan

    async def set_permission(self, user: str, path: str, mode: int) -> None:
        resolved = self.ns.resolve(path)
        if not 0 <= mode <= 0o7777:
            raise InvalidArgument(f"mode {mode:o} is not a permission (0..7777 octal)")

        def plan() -> Plan[None]:
            iip = self.ns.fresh(resolved)
            self.ns.check_access(user, iip, owner=True)
            return Plan.of([SetPermissionOp(iip.path, mode)], None, (iip,))

        await self.mutate("set permission", plan)

    async def set_owner(self, user: str, path: str, owner: str, group: str) -> None:
        resolved = self.ns.resolve(path)
        if not owner and not group:
            raise InvalidArgument("set_owner needs an owner or a group")
        for name in (owner, group):
            if name:
                paths.check_name(name)

        def plan() -> Plan[None]:
            iip = self.ns.fresh(resolved)
            self.ns.check_access(user, iip, owner=True)
            if not self.ns.is_superuser(user):
                if owner and owner != iip.get().owner:
                    raise AccessDenied(
                        f"Permission denied: only the superuser changes owners "
                        f"(user={user}, inode={iip.path})"
                    )
                if group and group not in self.ns.groups_of(user):
                    raise AccessDenied(f"Permission denied: user={user} is not in group {group}")
            return Plan.of([SetOwnerOp(iip.path, owner, group)], None, (iip,))

        await self.mutate("set owner", plan)

    async def set_replication(self, user: str, path: str, replication: int) -> None:
        resolved = self.ns.resolve(path)
        if not 1 <= replication <= self.config.replication_max:
            raise InvalidArgument(
                f"replication {replication} outside [1, {self.config.replication_max}]"
            )

        def plan() -> Plan[None]:
            iip = self.ns.fresh(resolved)
            self.ns.check_access(user, iip, access=W)
            return Plan.of([SetReplicationOp(iip.path, replication)], None, (iip,))

        await self.mutate("set replication", plan)

    async def set_quota(
        self, user: str, path: str, ns_quota: int | None, ds_quota: int | None
    ) -> None:
        """Set (>= 0) or clear (-1) a directory's quotas; None leaves one unchanged. The
        caller is a superuser (checked by the handler, as HDFS's dfsadmin)."""
        resolved = self.ns.resolve(path)
        for value in (ns_quota, ds_quota):
            if value is not None and value < -1:
                raise InvalidArgument(f"a quota is >= 0, or -1 to clear it; got {value}")

        def plan() -> Plan[None]:
            iip = self.ns.fresh(resolved)
            if not isinstance(iip.get(), DirInode):
                raise InvalidArgument(f"Cannot set quota on a file: {iip.path}")
            known = self.ns.quota_of(iip)
            ns_now, ds_now = (known.ns_quota, known.ds_quota) if known else (-1, -1)
            op = SetQuotaOp(iip.path, ns_now if ns_quota is None else ns_quota,
                            ds_now if ds_quota is None else ds_quota)
            return Plan.of([op], None, (iip,))

        await self.mutate("set quota", plan)

    async def set_times(self, user: str, path: str, mtime_ms: int, atime_ms: int) -> None:
        resolved = self.ns.resolve(path)
        if mtime_ms < -1 or atime_ms < -1:
            raise InvalidArgument("times must be >= 0 (or -1 to leave unchanged)")

        def plan() -> Plan[None]:
            iip = self.ns.fresh(resolved)
            if iip.get().owner == user or self.ns.is_superuser(user):
                self.ns.check_access(user, iip)
            else:
                self.ns.check_access(user, iip, access=W)
            return Plan.of([SetTimesOp(iip.path, mtime_ms, atime_ms)], None, (iip,))

        await self.mutate("set times", plan)

    # -- trash --------------------------------------------------------------------------

    async def restore(self, user: str, trash_path: str) -> str:
        """Move a trash entry back to the path it was deleted from; returns that path."""
        return await self.at_most_once(lambda: self._restore(user, trash_path))

    async def _restore(self, user: str, trash_path: str) -> str:
        resolved = self.ns.resolve(trash_path)
        resolved_original = self.ns.resolve(trash.original_path(resolved.path))

        def plan() -> Plan[str]:
            entry = self.ns.fresh(resolved)
            original = self.ns.fresh(resolved_original)
            self.ns.check_access(user, entry, parent_access=W | X, parent_owner_sticky=True)
            entry.get()  # NotFound before any op: no parents made for nothing
            if original.exists:
                raise AlreadyExists(f"cannot restore: {original.path} exists again")
            self._check_parent_not_a_file(original)
            self.ns.check_access(user, original, ancestor_access=W | X)
            dir_mode = self._default_mode(True, DEFAULT_MODE)
            ops = self._mkdir_ops(original, len(original.parts) - 1, user, dir_mode, dir_mode)
            ops.append(RenameOp(entry.path, original.path, self.now_ms()))
            return Plan.of(ops, original.path, (entry, original))

        return await self.mutate("restore", plan)

    async def expunge(self, user: str, immediate: bool) -> None:
        """Roll the user's trash into a checkpoint and delete expired checkpoints
        (``immediate``: delete the whole trash)."""
        await self.mutate("expunge", lambda: Plan.of(self._trash_ops(user, immediate), None))

    def _trash_ops(self, user: str, immediate: bool) -> list[Op]:
        return trash.checkpoint_ops(self.ns, user, self.now_ms(), self.config.trash_interval_s,
                                    self.config.list_limit_max, immediate=immediate)

    def trash_users(self) -> list[str]:
        """Users with a trash directory (the emptier's round)."""
        return trash.users(self.ns, self.config.list_limit_max)
