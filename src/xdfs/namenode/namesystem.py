"""The NameNode's operations: permission checks, op planning, apply, log, durability.

Every mutation runs the same three steps (:meth:`Namesystem.mutate`):

1. wait until the edits buffer has room (back-pressure, may await);
2. synchronously, with no ``await`` in between: check safe mode and permissions, plan the
   ops, apply each to the namespace and append it to the edits log. Because nothing else
   runs on the event loop meanwhile, the log's order is exactly the order of changes in
   memory, and a plan validated in step 2 cannot be invalidated before it is applied;
3. wait until the last txid is synced on every name dir. **Only then is the caller
   answered** - this is where "durability before acknowledgement" is enforced.

Reads run inline without touching the log. They may observe a change whose sync is still
in flight (as in HDFS); a mutation that turns out to be a no-op still waits for the log's
current txid, so nothing is acknowledged on the strength of an unsynced change.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol, TypeVar

from xdfs.config import NameNodeConfig
from xdfs.errors import (
    AccessDenied,
    AlreadyExists,
    DirectoryNotEmpty,
    InvalidArgument,
    IsADirectory,
    LeaseError,
    NotADirectory,
    NotFound,
)
from xdfs.namenode import paths, trash
from xdfs.namenode.leases import LeaseManager
from xdfs.namenode.namespace import Namespace
from xdfs.namenode.ops import (
    AddBlockOp,
    AddFileOp,
    CloseFileOp,
    DeleteOp,
    MkdirOp,
    Op,
    RenameOp,
    SetOwnerOp,
    SetPermissionOp,
    SetReplicationOp,
    SetTimesOp,
    UpdateBlocksOp,
)
from xdfs.namenode.safemode import SafeMode
from xdfs.protocol.blocks import BlockRecord
from xdfs.protocol.namenode import (
    DEFAULT_MODE,
    ContentSummary,
    FileStatus,
    LocatedBlock,
    LocatedBlocks,
)

T = TypeVar("T")

R, W, X = 4, 2, 1
_TRASH_DIR_MODE = 0o700


class EditSink(Protocol):
    """What the namesystem needs of the edits log."""

    @property
    def last_txid(self) -> int: ...

    def append(self, op: Op) -> int: ...

    async def wait_for_room(self) -> None: ...

    async def sync(self, txid: int) -> None: ...


class Namesystem:
    def __init__(
        self,
        namespace: Namespace,
        edits: EditSink,
        config: NameNodeConfig,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ns = namespace
        self.edits = edits
        self.config = config
        self.clock = clock
        self.safe_mode = SafeMode()
        self.leases = LeaseManager()
        now_s = clock()
        for _path, holder in namespace.files_under_construction():
            self.leases.renew(holder, now_s)  # a restart gives every writer a fresh lease

    # -- the one mutation path ----------------------------------------------------------

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    async def mutate(
        self, operation: str, plan: Callable[[], list[Op]], result: Callable[[], T]
    ) -> T:
        await self.edits.wait_for_room()
        self.safe_mode.check_writable(operation)
        ops = plan()
        txid = self.edits.last_txid
        for op in ops:
            # apply returns the block ids that left the namespace; replica deletion
            # arrives with the DataNodes (until then no replica exists to delete).
            self.ns.apply(op)
            txid = self.edits.append(op)
        answer = result()
        await self.edits.sync(txid)  # durability before acknowledgement
        return answer

    # -- helpers ------------------------------------------------------------------------

    def _default_mode(self, is_dir: bool, mode: int) -> int:
        if mode != DEFAULT_MODE:
            if not 0 <= mode <= 0o7777:
                raise InvalidArgument(f"mode {mode:o} is not a permission (0..7777 octal)")
            return mode
        base = 0o777 if is_dir else 0o666
        return base & ~self.config.umask

    def _mkdir_ops(self, path: str, owner: str, mode: int, final_mode: int) -> list[Op]:
        """MkdirOps for every missing directory of ``path`` (``mode`` for the ones above,
        ``final_mode`` for ``path`` itself); new directories take the group of the deepest
        existing ancestor (BSD rule, as HDFS)."""
        missing = self.ns.missing_ancestors(path)
        if not missing:
            return []
        group = self.ns.stat(paths.parent_of(missing[0])).group
        now = self.now_ms()
        return [
            MkdirOp(
                d, self.ns.allocate_inode_id(), final_mode if d == path else mode, owner, group, now
            )
            for d in missing
        ]

    def _check_parent_is_dir(self, parent: str) -> None:
        """NotADirectory when ``parent`` exists as a file (``missing_ancestors`` would call
        the file itself AlreadyExists, which is wrong for a path beneath it)."""
        if self.ns.exists(parent) and not self.ns.is_dir(parent):
            raise NotADirectory(f"parent is not a directory: {parent}")

    def _check_writer(self, user: str, path: str) -> None:
        """The writer of an open file may traverse to it and owns it or may write it: a file
        created read-only (as POSIX ``open(O_CREAT, 0444)``) can still be written and
        completed by its creator; the lease (checked next) says which client writes."""
        self.ns.check_access(user, path)
        if self.ns.stat(path).owner != user:
            self.ns.check_access(user, path, access=W)

    def _file_under_construction(self, path: str, client: str) -> FileStatus:
        status = self.ns.stat(path)
        if status.is_dir:
            raise IsADirectory(f"{path} is a directory")
        holder = self.ns.lease_holder(path)
        if holder != client:
            raise LeaseError(
                f"{path} is not open for writing by {client}"
                + (f" (lease held by {holder})" if holder else " (file is closed)")
            )
        return status

    # -- reads --------------------------------------------------------------------------

    def stat(self, user: str, path: str) -> FileStatus:
        self.ns.check_access(user, path)
        return self.ns.stat(path)

    def list_dir(
        self, user: str, path: str, start_after: str, limit: int
    ) -> tuple[list[FileStatus], int]:
        if self.ns.is_dir(path):
            self.ns.check_access(user, path, access=R | X)
        else:
            self.ns.check_access(user, path)
        limit = max(1, min(limit, self.config.list_limit_max))
        return self.ns.list_dir(path, start_after, limit)

    def content_summary(self, user: str, path: str) -> ContentSummary:
        # as HDFS: r-x on every directory of the subtree, or its counts leak private dirs
        access = R | X if self.ns.is_dir(path) else 0
        self.ns.check_access(user, path, access=access, sub_access=access)
        return self.ns.content_summary(path)

    def block_locations(self, user: str, path: str, offset: int, length: int) -> LocatedBlocks:
        self.ns.check_access(user, path, access=R)
        status = self.ns.stat(path)
        if status.is_dir:
            raise IsADirectory(f"{path} is a directory")
        if offset < 0:
            raise InvalidArgument("offset must be >= 0")
        end = status.length if length < 0 else min(status.length, offset + length)
        located: list[LocatedBlock] = []
        position = 0
        for block in self.ns.get_blocks(path):
            if (position + block.num_bytes > offset and position < end) or (
                block.num_bytes == 0 and offset <= position <= end
            ):
                located.append(LocatedBlock(block, position, []))
            position += block.num_bytes
        return LocatedBlocks(status.length, located, status.under_construction)

    # -- namespace mutations ------------------------------------------------------------

    async def mkdirs(self, user: str, path: str, mode: int, parents: bool) -> FileStatus:
        path = paths.normalize(path)

        def plan() -> list[Op]:
            if self.ns.exists(path):
                if self.ns.is_dir(path) and parents:
                    return []
                raise AlreadyExists(f"{path} already exists")
            self.ns.check_access(user, path, ancestor_access=W | X)
            final_mode = self._default_mode(True, mode)
            ops = self._mkdir_ops(path, user, self._default_mode(True, DEFAULT_MODE), final_mode)
            if len(ops) > 1 and not parents:
                raise NotFound(f"parent of {path} does not exist")
            return ops

        return await self.mutate("mkdirs", plan, lambda: self.ns.stat(path))

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
        path = paths.normalize(path)
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

        def plan() -> list[Op]:
            if self.ns.exists(path):
                self._check_overwrite(user, client, path, overwrite)
            parent = paths.parent_of(path)
            if not create_parents and not self.ns.exists(parent):
                raise NotFound(f"parent directory {parent} does not exist")
            self._check_parent_is_dir(parent)
            self.ns.check_access(user, path, ancestor_access=W | X)
            ops = self._mkdir_ops(
                parent,
                user,
                self._default_mode(True, DEFAULT_MODE),
                self._default_mode(True, DEFAULT_MODE),
            )
            first = ops[0] if ops else None
            group = first.group if isinstance(first, MkdirOp) else self.ns.stat(parent).group
            ops.append(
                AddFileOp(
                    path,
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
            self.leases.renew(client, self.clock())
            return ops

        return await self.mutate("create", plan, lambda: self.ns.stat(path))

    def _check_overwrite(self, user: str, client: str, path: str, overwrite: bool) -> None:
        if self.ns.is_dir(path):
            raise IsADirectory(f"{path} is a directory")
        holder = self.ns.lease_holder(path)
        if (
            holder
            and holder != client
            and not self.leases.is_expired(holder, self.clock(), self.config.lease_soft_limit_s)
        ):
            raise LeaseError(f"{path} is being written by {holder}")
        if not overwrite:
            raise AlreadyExists(f"{path} already exists")
        self.ns.check_access(user, path, parent_access=W | X, parent_owner_sticky=True)

    async def add_block(
        self, user: str, client: str, path: str, previous: BlockRecord | None
    ) -> LocatedBlock:
        path = paths.normalize(path)
        offset = 0

        def plan() -> list[Op]:
            nonlocal offset
            self._check_writer(user, path)
            self._file_under_construction(path, client)
            blocks = list(self.ns.get_blocks(path))
            ops: list[Op] = []
            if previous is not None:
                if not blocks or blocks[-1].block_id != previous.block_id:
                    raise InvalidArgument(f"{previous.block_id} is not the last block of {path}")
                blocks[-1] = previous
                ops.append(UpdateBlocksOp(path, tuple(blocks)))
            offset = sum(b.num_bytes for b in blocks)
            block = BlockRecord(self.ns.allocate_block_id(), self.ns.allocate_genstamp(), 0)
            ops.append(AddBlockOp(path, block))
            self.leases.renew(client, self.clock())
            return ops

        def located() -> LocatedBlock:
            return LocatedBlock(self.ns.get_blocks(path)[-1], offset, [])

        return await self.mutate("add a block", plan, located)

    async def complete(
        self, user: str, client: str, path: str, blocks: list[BlockRecord]
    ) -> FileStatus:
        path = paths.normalize(path)

        def plan() -> list[Op]:
            self._check_writer(user, path)
            self._file_under_construction(path, client)
            known = [b.block_id for b in self.ns.get_blocks(path)]
            if [b.block_id for b in blocks] != known:
                raise InvalidArgument(f"complete {path}: block list differs from the NameNode's")
            if any(b.num_bytes < 0 for b in blocks):
                raise InvalidArgument("block lengths must be >= 0")
            now = self.now_ms()
            return [CloseFileOp(path, now, now, tuple(blocks))]

        return await self.mutate("complete", plan, lambda: self.ns.stat(path))

    def renew_lease(self, client: str) -> None:
        self.leases.renew(client, self.clock())

    async def delete(self, user: str, path: str, *, recursive: bool, skip_trash: bool) -> str:
        """Delete ``path`` or move it to the user's trash; returns the trash path or ""."""
        path = paths.normalize(path)
        target = ""

        def plan() -> list[Op]:
            nonlocal target
            if path == "/":
                raise InvalidArgument("cannot delete the root directory")
            status = self.ns.stat(path)
            if status.is_dir and status.children and not recursive:
                raise DirectoryNotEmpty(f"{path} is a non-empty directory (use recursive)")
            self.ns.check_access(
                user,
                path,
                parent_access=W | X,
                parent_owner_sticky=True,
                sub_access=R | W | X if status.is_dir else 0,
            )
            if self.config.trash_interval_s > 0 and not skip_trash and not trash.is_in_trash(path):
                if paths.is_ancestor(path, trash.trash_root(user)):
                    raise InvalidArgument(
                        f"cannot move {path} to the trash, as it contains the trash "
                        "(delete it with skip_trash)"
                    )
                target = self._trash_target(user, path)
                return [
                    *self._trash_dirs(user, paths.parent_of(target)),
                    RenameOp(path, target, self.now_ms()),
                ]
            return [DeleteOp(path, self.now_ms())]

        return await self.mutate("delete", plan, lambda: target)

    def _trash_target(self, user: str, path: str) -> str:
        """A free trash path for ``path``. Where an earlier deletion left a *file* on the way
        (``/tmp/a`` trashed, then ``/tmp/a/b``), that component takes a fresh name, as in
        HDFS's TrashPolicyDefault, instead of failing the deletion."""
        target = trash.trash_target(user, path)
        parts = paths.split_path(target)
        first = len(paths.split_path(trash.current_dir(user)))
        for depth in range(first, len(parts)):
            prefix = paths.join(parts[:depth])
            if not self.ns.exists(prefix):
                break
            if not self.ns.is_dir(prefix):
                target = self._free_trash_name(prefix) + target[len(prefix) :]
                break
        return self._free_trash_name(target)

    def _free_trash_name(self, target: str) -> str:
        if not self.ns.exists(target):
            return target
        candidate = f"{target}{self.now_ms()}"
        while self.ns.exists(candidate):
            candidate += "_"
        return candidate

    def _trash_dirs(self, user: str, directory: str) -> list[Op]:
        """Mkdir ops for a trash directory: /user (root's), the home and the trash (user's)."""
        ops: list[Op] = []
        now = self.now_ms()
        for d in self.ns.missing_ancestors(directory):
            owner = self.ns.superuser if d == "/user" else user
            mode = 0o755 if d in ("/user", trash.home(user)) else _TRASH_DIR_MODE
            ops.append(
                MkdirOp(d, self.ns.allocate_inode_id(), mode, owner, self.config.supergroup, now)
            )
        # The ops above are not applied yet: missing_ancestors was computed once, correctly.
        return ops

    async def rename(self, user: str, src: str, dst: str) -> str:
        src, dst = paths.normalize(src), paths.normalize(dst)
        final = ""

        def plan() -> list[Op]:
            nonlocal final
            if src == "/":
                raise InvalidArgument("cannot rename the root directory")
            final = self.ns.resolve_rename_target(src, dst)
            self.ns.check_access(user, src, parent_access=W | X, parent_owner_sticky=True)
            if final == src:
                return []
            if self.ns.exists(final):
                raise AlreadyExists(f"{final} already exists")
            self.ns.check_access(user, final, parent_access=W | X)
            return [RenameOp(src, final, self.now_ms())]

        return await self.mutate("rename", plan, lambda: final)

    async def set_permission(self, user: str, path: str, mode: int) -> None:
        path = paths.normalize(path)
        if not 0 <= mode <= 0o7777:
            raise InvalidArgument(f"mode {mode:o} is not a permission (0..7777 octal)")

        def plan() -> list[Op]:
            self.ns.check_access(user, path, owner=True)
            return [SetPermissionOp(path, mode)]

        await self.mutate("set permission", plan, lambda: None)

    async def set_owner(self, user: str, path: str, owner: str, group: str) -> None:
        path = paths.normalize(path)
        if not owner and not group:
            raise InvalidArgument("set_owner needs an owner or a group")
        for name in (owner, group):
            if name:
                paths.check_name(name)

        def plan() -> list[Op]:
            self.ns.check_access(user, path, owner=True)
            if not self.ns.is_superuser(user):
                if owner and owner != self.ns.stat(path).owner:
                    raise AccessDenied(
                        f"Permission denied: only the superuser changes owners "
                        f"(user={user}, inode={path})"
                    )
                if group and group not in self.ns.groups_of(user):
                    raise AccessDenied(f"Permission denied: user={user} is not in group {group}")
            return [SetOwnerOp(path, owner, group)]

        await self.mutate("set owner", plan, lambda: None)

    async def set_replication(self, user: str, path: str, replication: int) -> None:
        path = paths.normalize(path)
        if not 1 <= replication <= self.config.replication_max:
            raise InvalidArgument(
                f"replication {replication} outside [1, {self.config.replication_max}]"
            )

        def plan() -> list[Op]:
            self.ns.check_access(user, path, access=W)
            return [SetReplicationOp(path, replication)]

        await self.mutate("set replication", plan, lambda: None)

    async def set_times(self, user: str, path: str, mtime_ms: int, atime_ms: int) -> None:
        path = paths.normalize(path)
        if mtime_ms < -1 or atime_ms < -1:
            raise InvalidArgument("times must be >= 0 (or -1 to leave unchanged)")

        def plan() -> list[Op]:
            status = self.ns.stat(path)
            if status.owner == user or self.ns.is_superuser(user):
                self.ns.check_access(user, path)
            else:
                self.ns.check_access(user, path, access=W)
            return [SetTimesOp(path, mtime_ms, atime_ms)]

        await self.mutate("set times", plan, lambda: None)

    # -- trash --------------------------------------------------------------------------

    async def restore(self, user: str, trash_path: str) -> str:
        trash_path = paths.normalize(trash_path)
        original = trash.original_path(trash_path)

        def plan() -> list[Op]:
            self.ns.check_access(user, trash_path, parent_access=W | X, parent_owner_sticky=True)
            self.ns.stat(trash_path)  # NotFound before any op: no parents made for nothing
            if self.ns.exists(original):
                raise AlreadyExists(f"cannot restore: {original} exists again")
            parent = paths.parent_of(original)
            self._check_parent_is_dir(parent)
            self.ns.check_access(user, original, ancestor_access=W | X)
            ops = self._mkdir_ops(
                parent,
                user,
                self._default_mode(True, DEFAULT_MODE),
                self._default_mode(True, DEFAULT_MODE),
            )
            ops.append(RenameOp(trash_path, original, self.now_ms()))
            return ops

        return await self.mutate("restore", plan, lambda: original)

    def trash_checkpoint_ops(self, user: str, *, immediate: bool) -> list[Op]:
        """Ops that roll ``user``'s Current into a checkpoint and delete expired checkpoints
        (``immediate``: delete the whole trash)."""
        root = trash.trash_root(user)
        if not self.ns.exists(root):
            return []
        now = self.now_ms()
        names = [s.path.rsplit("/", 1)[1] for s in self._all_entries(root)]
        if immediate:
            return [DeleteOp(f"{root}/{name}", now) for name in names]
        ops: list[Op] = []
        if trash.CURRENT in names:
            # Names have a resolution of one second: a second roll within the same second
            # takes the next free second rather than leaving Current where it is.
            stamp_ms = now
            checkpoint = f"{root}/{trash.checkpoint_name(stamp_ms)}"
            while self.ns.exists(checkpoint):
                stamp_ms += 1000
                checkpoint = f"{root}/{trash.checkpoint_name(stamp_ms)}"
            ops.append(RenameOp(f"{root}/{trash.CURRENT}", checkpoint, now))
        for name in trash.expired_checkpoints(names, now, self.config.trash_interval_s):
            ops.append(DeleteOp(f"{root}/{name}", now))
        return ops

    def _all_entries(self, directory: str) -> list[FileStatus]:
        entries: list[FileStatus] = []
        start = ""
        while True:
            page, remaining = self.ns.list_dir(directory, start, self.config.list_limit_max)
            entries.extend(page)
            if not remaining or not page:
                return entries
            start = page[-1].path.rsplit("/", 1)[1]

    async def expunge(self, user: str, immediate: bool) -> None:
        await self.mutate(
            "expunge", lambda: self.trash_checkpoint_ops(user, immediate=immediate), lambda: None
        )

    def trash_users(self) -> list[str]:
        """Users with a trash directory (the emptier's round)."""
        if not self.ns.exists("/user"):
            return []
        return [
            s.path.rsplit("/", 1)[1]
            for s in self._all_entries("/user")
            if s.is_dir and self.ns.exists(s.path + "/" + trash.TRASH)
        ]

    # -- leases -------------------------------------------------------------------------

    def lease_recovery_ops(self) -> list[Op]:
        """Close files whose writer went silent past the hard limit (keeping their blocks)."""
        open_files = self.ns.files_under_construction()
        self.leases.drop_idle({holder for _p, holder in open_files})
        now = self.now_ms()
        return [
            CloseFileOp(path, now, now, self.ns.get_blocks(path))
            for path, _holder in self.leases.expired(
                open_files, self.clock(), self.config.lease_hard_limit_s
            )
        ]
