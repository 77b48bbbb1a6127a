"""The NameNode's operations: permission checks, op planning, apply, log, durability.

Every mutation runs the same three steps (:meth:`Namesystem.mutate`):

1. wait until the edits buffer has room (back-pressure, may await);
2. synchronously, with no ``await`` in between: check safe mode and permissions, plan the
   ops, apply each to the namespace and append it to the edits log. Because nothing else
   runs on the event loop meanwhile, the log's order is exactly the order of changes in
   memory, and a plan validated in step 2 cannot be invalidated before it is applied;
3. wait until the last txid is synced on every name dir. **Only then is the caller
   answered** - this is where "durability before acknowledgement" is enforced - and only
   then are the replicas of blocks that left the namespace deleted (a crash before the
   sync must not leave a file whose replicas are gone).

Reads run inline without touching the log. They may observe a change whose sync is still
in flight (as in HDFS); a mutation that turns out to be a no-op still waits for the log's
current txid, so nothing is acknowledged on the strength of an unsynced change.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from xdfs.config import NameNodeConfig
from xdfs.errors import (
    AccessDenied,
    AlreadyExists,
    DirectoryNotEmpty,
    InvalidArgument,
    InvalidPath,
    IsADirectory,
    LeaseError,
    NotADirectory,
    NotEnoughReplicas,
    NotFound,
)
from xdfs.namenode.blocks.manager import BlockManager
from xdfs.namenode.blocks.recovery import RECOVERY_HOLDER, Attempt, CloseNow
from xdfs.namenode.blocks.safemode import SafeMode
from xdfs.namenode.namespace import paths, trash
from xdfs.namenode.namespace.leases import LeaseManager
from xdfs.namenode.namespace.ops import (
    AddBlockOp,
    AddFileOp,
    CloseFileOp,
    DeleteOp,
    MkdirOp,
    Op,
    ReassignLeaseOp,
    RenameOp,
    SetOwnerOp,
    SetPermissionOp,
    SetReplicationOp,
    SetTimesOp,
    UpdateBlocksOp,
)
from xdfs.namenode.namespace.tree import Namespace
from xdfs.namenode.trash_ops import TrashOps
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
        rng: random.Random | None = None,
    ) -> None:
        self.ns = namespace
        self.edits = edits
        self.config = config
        self.clock = clock
        self.safe_mode = SafeMode.from_config(config)
        self.blocks = BlockManager(
            namespace, config, self.safe_mode, clock=clock, rng=rng or random.Random()
        )
        if namespace.block_count() and self.safe_mode.wait_for_blocks():
            self.blocks.update_safe_mode()  # sets the reason: no block reported yet
        self.leases = LeaseManager()
        self.trash = TrashOps(self)
        now_s = clock()
        for holder, owner in namespace.lease_holders():
            # a restart gives every writer a fresh lease, bound to the file's creator
            self.leases.restore(holder, owner, now_s)

    # -- the one mutation path ----------------------------------------------------------

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    async def mutate(
        self,
        operation: str,
        plan: Callable[[], list[Op]],
        result: Callable[[], T],
        *,
        allowed_in_safe_mode: bool = False,
    ) -> T:
        """``allowed_in_safe_mode``: for what must run in safe mode (token-key rotation:
        logins must work while the NameNode waits for block reports)."""
        await self.edits.wait_for_room()
        if not allowed_in_safe_mode:
            self.safe_mode.check_writable(operation)
        ops = plan()
        txid = self.edits.last_txid
        dropped: list[int] = []
        affected: list[int] = []
        for op in ops:
            # apply returns the block ids that left the namespace: not orphans, and not
            # deleted either, until the sync below says the change is durable
            gone = self.ns.apply(op)
            txid = self.edits.append(op)
            self.blocks.leaving(gone)
            dropped.extend(gone)
            affected.extend(self.blocks.affected_blocks(op))
        answer = result()
        await self.edits.sync(txid)  # durability before acknowledgement
        self.blocks.ops_durable(dropped, affected)
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

    def _writable_file(self, user: str, client: str, path: str) -> FileStatus:
        """The open file ``client`` writes, after checking ``user`` may write it through
        that client; the lease is renewed."""
        self._check_writer(user, path)
        status = self.ns.stat(path)
        if status.is_dir:
            raise IsADirectory(f"{path} is a directory")
        holder = self.ns.lease_holder(path)
        if holder != client or client == RECOVERY_HOLDER:
            raise LeaseError(
                f"{path} is not open for writing by {client}"
                + (f" ({self._holder_text(user, holder)} holds its lease)" if holder
                   else " (file is closed)")
            )
        self.leases.take(client, user, self.clock())
        return status

    def _holder_text(self, user: str, holder: str) -> str:
        """Who holds a lease, as ``user`` may be told: the client name only to its own user
        and to superusers (client names are what a writer proves itself with)."""
        if self.leases.user_of(holder) in (user, None) or self.ns.is_superuser(user):
            return f"client {holder}"
        return "another client"

    def _check_move_limits(self, src: str, dst: str) -> None:
        """InvalidPath when moving ``src`` to ``dst`` would make a path in its subtree deeper
        or longer than every path must be (paths.DEPTH_MAX, paths.PATH_BYTES_MAX): such a
        path could be neither named nor recovered afterwards. Walks the subtree only when
        the move makes paths deeper or longer."""
        src_parts, dst_parts = paths.split_path(src), paths.split_path(dst)
        src_bytes, dst_bytes = len(src.encode("utf-8")), len(dst.encode("utf-8"))
        if len(dst_parts) <= len(src_parts) and dst_bytes <= src_bytes:
            return
        depth, size = self.ns.subtree_extent(src)
        if len(dst_parts) + depth > paths.DEPTH_MAX:
            raise InvalidPath(
                f"moving {src} to {dst} would make paths deeper than {paths.DEPTH_MAX} "
                f"components (its subtree is {depth} deep)"
            )
        if dst_bytes + size > paths.PATH_BYTES_MAX:
            raise InvalidPath(
                f"moving {src} to {dst} would make paths longer than {paths.PATH_BYTES_MAX} "
                f"bytes (its subtree adds up to {size})"
            )

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
        """The blocks overlapping the range, each with its good replicas in random order
        and a read token."""
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
                block_id = block.block_id
                located.append(LocatedBlock(
                    block, position, self.blocks.locations(block_id),
                    self.blocks.block_token(user, block_id, "r"),
                ))
            position += block.num_bytes
        return LocatedBlocks(status.length, located, status.under_construction)

    # -- namespace mutations ------------------------------------------------------------

    async def mkdirs(self, user: str, path: str, mode: int, parents: bool) -> FileStatus:
        path = paths.normalize(path)

        def plan() -> list[Op]:
            # traverse first: whether something exists in a directory the user may not
            # enter is not his to learn (HDFS checks traverse before existence too)
            self.ns.check_access(user, path)
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

        if client == RECOVERY_HOLDER:
            raise InvalidArgument(f"client name {client} is reserved for lease recovery")
        await self._recover_if_abandoned(user, client, path, overwrite)

        def plan() -> list[Op]:
            self.ns.check_access(user, path)  # traverse first, as mkdirs
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
            self.leases.take(client, user, self.clock())
            return ops

        return await self.mutate("create", plan, lambda: self.ns.stat(path))

    def _check_overwrite(self, user: str, client: str, path: str, overwrite: bool) -> None:
        """Overwriting replaces the file (a new inode, owned by ``user``; the old blocks are
        deleted once that is durable, not trashed, as HDFS and POSIX ``O_TRUNC``). As HDFS's
        startFile: WRITE on the file itself, and on its directory (checked by the caller);
        and as for a delete, a sticky directory protects other users' files."""
        if self.ns.is_dir(path):
            raise IsADirectory(f"{path} is a directory")
        if overwrite:
            self.ns.check_access(
                user, path, access=W, parent_access=W | X, parent_owner_sticky=True
            )
        holder = self.ns.lease_holder(path)
        if holder == RECOVERY_HOLDER:
            raise LeaseError(f"{path}: lease recovery is in progress; try again later")
        if (
            holder
            and holder != client
            and not self.leases.is_expired(holder, self.clock(), self.config.lease_soft_limit_s)
        ):
            raise LeaseError(f"{path} is being written by {self._holder_text(user, holder)}")
        if not overwrite:
            raise AlreadyExists(f"{path} already exists")

    async def add_block(
        self,
        user: str,
        client: str,
        path: str,
        previous: BlockRecord | None,
        excluded: Sequence[str] = (),
    ) -> LocatedBlock:
        """Allocate the next block and its targets (``excluded``: addresses the writer
        failed with). No live target: NotEnoughReplicas before anything is logged."""
        path = paths.normalize(path)
        offset = 0
        targets: list[str] = []

        def plan() -> list[Op]:
            nonlocal offset, targets
            status = self._writable_file(user, client, path)
            blocks = list(self.ns.get_blocks(path))
            ops: list[Op] = []
            if previous is not None:
                if not blocks or blocks[-1].block_id != previous.block_id:
                    raise InvalidArgument(f"{previous.block_id} is not the last block of {path}")
                blocks[-1] = previous
                ops.append(UpdateBlocksOp(path, tuple(blocks)))
            offset = sum(b.num_bytes for b in blocks)
            chosen = self.blocks.choose_targets(status.replication, excluded, status.block_size)
            targets = [node.address for node in chosen]
            block = BlockRecord(self.ns.allocate_block_id(), self.ns.allocate_genstamp(), 0)
            self.blocks.expect(block.block_id, (node.node_id for node in chosen))
            ops.append(AddBlockOp(path, block))
            return ops

        def located() -> LocatedBlock:
            block = self.ns.get_blocks(path)[-1]
            return LocatedBlock(
                block, offset, targets, self.blocks.block_token(user, block.block_id, "w")
            )

        return await self.mutate("add a block", plan, located)

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
        path = paths.normalize(path)
        status = self._writable_file(user, client, path)
        offset = 0
        for record in self.ns.get_blocks(path):
            if record.block_id == block.block_id:
                break
            offset += record.num_bytes
        else:
            raise InvalidArgument(f"block {block.block_id} is not a block of {path}")
        chosen = self.blocks.choose_targets(1, [*existing, *excluded], status.block_size)
        if block.block_id == self.ns.get_blocks(path)[-1].block_id:
            self.blocks.expect(block.block_id, (node.node_id for node in chosen))
        return LocatedBlock(
            record, offset, [node.address for node in chosen],
            self.blocks.block_token(user, block.block_id, "w"),
        )

    async def abandon_block(self, user: str, client: str, path: str, block_id: int) -> None:
        """Drop the file's last block (every target failed). Idempotent: a block the file
        no longer has is already abandoned; its replicas are deleted once this is durable."""
        path = paths.normalize(path)

        def plan() -> list[Op]:
            self._writable_file(user, client, path)
            blocks = self.ns.get_blocks(path)
            if not blocks or blocks[-1].block_id != block_id:
                if any(b.block_id == block_id for b in blocks):
                    raise InvalidArgument(f"block {block_id} is not the last block of {path}")
                return []
            return [UpdateBlocksOp(path, blocks[:-1])]

        await self.mutate("abandon a block", plan, lambda: None)

    async def complete(
        self, user: str, client: str, path: str, blocks: list[BlockRecord]
    ) -> FileStatus:
        """Close the file once every block has min_replication replicas of the length the
        writer says (seed 003: an upload is confirmed only when DataNodes have reported)."""
        path = paths.normalize(path)

        def check() -> None:
            self._writable_file(user, client, path)
            known = [b.block_id for b in self.ns.get_blocks(path)]
            if [b.block_id for b in blocks] != known:
                raise InvalidArgument(f"complete {path}: block list differs from the NameNode's")
            if any(b.num_bytes < 0 for b in blocks):
                raise InvalidArgument("block lengths must be >= 0")

        check()
        # Waited for before mutate, holding nothing: plan() checks everything again.
        await self._wait_for_replicas(path, blocks)

        def plan() -> list[Op]:
            check()
            now = self.now_ms()
            return [CloseFileOp(path, now, now, tuple(blocks))]

        return await self.mutate("complete", plan, lambda: self.ns.stat(path))

    async def _wait_for_replicas(self, path: str, blocks: list[BlockRecord]) -> None:
        """Until each block has enough replicas reported (woken by each report of one of
        them, no polling), at most complete_wait_s; then NotEnoughReplicas."""
        needed = min(self.config.min_replication, self.ns.stat(path).replication)
        wake = asyncio.Event()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.complete_wait_s
        for block in blocks:
            self.blocks.watch(block.block_id, wake.set)
            try:
                while (have := self.blocks.replicas_matching(block)) < needed:
                    wake.clear()
                    try:
                        async with asyncio.timeout_at(deadline):
                            await wake.wait()
                    except TimeoutError:
                        raise NotEnoughReplicas(
                            f"complete {path}: block {block.block_id} has {have} of the "
                            f"{needed} replica(s) it needs reported after "
                            f"{self.config.complete_wait_s:g} s (length {block.num_bytes})"
                        ) from None
            finally:
                self.blocks.unwatch(block.block_id, wake.set)

    def report_bad_replicas(self, replicas: Sequence[tuple[int, str]]) -> None:
        """Replicas that failed their checksums, (block id, address), from a reader or a
        DataNode (the handler checked the caller may report them)."""
        for block_id, address in replicas:
            self.blocks.report_bad_replica(block_id, address)

    def renew_lease(self, user: str, client: str) -> None:
        self.leases.renew(client, user, self.clock())

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
                try:
                    target = self.trash.target(user, path)
                    self._check_move_limits(path, target)
                except InvalidPath as exc:
                    raise InvalidPath(
                        f"cannot move {path} to the trash: {exc.message} (delete it with "
                        "skip_trash)"
                    ) from None
                return [
                    *self.trash.dirs(user, paths.parent_of(target)),
                    RenameOp(path, target, self.now_ms()),
                ]
            return [DeleteOp(path, self.now_ms())]

        return await self.mutate("delete", plan, lambda: target)

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
            self._check_move_limits(src, final)
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

    # -- leases -------------------------------------------------------------------------

    def due_lease_recoveries(self) -> list[str]:
        """The open files whose lease is due for recovery: their writer went silent past the
        hard limit, or their block recovery's attempt is due again (its primary died or did
        not commit in time, or the NameNode restarted meanwhile)."""
        open_files = self.ns.files_under_construction()
        self.leases.drop_idle({holder for _p, holder in open_files})
        now_s = self.clock()
        return [path for path, holder in open_files if self._lease_due(path, holder, now_s)]

    def _lease_due(self, path: str, holder: str, now_s: float) -> bool:
        if holder == RECOVERY_HOLDER:
            return self._recovery_due(path)
        return self.leases.is_expired(holder, now_s, self.config.lease_hard_limit_s)

    async def recover_abandoned(self, path: str) -> None:
        """Recover one file for the lease monitor, if it is still due. One file at a time: a
        file that cannot be closed (a path the limits refuse, say) must not hold up the
        others."""
        holder = self.ns.lease_holder(path) if self.ns.exists(path) else ""
        if holder and self._lease_due(path, holder, self.clock()):
            await self._recover([path])

    def _recovery_due(self, path: str) -> bool:
        blocks = self.ns.get_blocks(path)
        return not blocks or self.blocks.recovery_due(blocks[-1].block_id)

    async def recover_lease(self, user: str, path: str) -> bool:
        """HDFS's recoverLease: start recovering an open file's lease now, whoever holds
        it; True when the file is closed (already, or by this call)."""
        path = paths.normalize(path)
        self._check_writer(user, path)
        if self.ns.stat(path).is_dir:
            raise IsADirectory(f"{path} is a directory")
        if not self.ns.lease_holder(path):
            return True
        if self.ns.lease_holder(path) == RECOVERY_HOLDER and not self._recovery_due(path):
            return False  # an attempt is under way
        return path in await self._recover([path])

    async def _recover_if_abandoned(
        self, user: str, client: str, path: str, overwrite: bool
    ) -> None:
        """``create`` without overwrite of a file whose writer is past the soft limit
        starts its lease recovery (HDFS), then fails: the file exists."""
        holder = self.ns.lease_holder(path) if self.ns.exists(path) else ""
        if overwrite or not holder or holder in (client, RECOVERY_HOLDER):
            return
        if not self.leases.is_expired(holder, self.clock(), self.config.lease_soft_limit_s):
            return
        self.ns.check_access(user, path, ancestor_access=W | X)
        closed = await self._recover([path])
        raise AlreadyExists(
            f"{path} already exists" + ("" if closed else
            f" (its writer {holder} went silent: lease recovery started, try again later)")
        )

    async def _recover(self, candidates: list[str]) -> set[str]:
        """Recover the leases of these open files (see block_recovery.py); returns the
        paths closed at once. Block recoveries start once their stamps are durable."""
        closed: set[str] = set()
        attempts: list[Attempt] = []

        def plan() -> list[Op]:
            ops: list[Op] = []
            now = self.now_ms()
            for path in candidates:
                if not self.ns.exists(path) or not self.ns.lease_holder(path):
                    continue  # deleted or closed meanwhile
                decision = self.blocks.plan_lease_recovery(self.ns.get_blocks(path))
                if isinstance(decision, CloseNow):
                    ops.append(CloseFileOp(path, now, now, decision.blocks))
                    closed.add(path)
                    continue
                genstamp = self.ns.allocate_genstamp()
                attempts.append(self.blocks.begin_recovery(decision, genstamp))
                ops.append(ReassignLeaseOp(path, RECOVERY_HOLDER, genstamp))
            return ops

        await self.mutate("recover leases", plan, lambda: None)
        for attempt in attempts:
            self.blocks.dispatch_recovery(attempt)
        return closed

    async def commit_block_synchronization(
        self, block: BlockRecord, recovery_genstamp: int, length: int, delete_block: bool
    ) -> None:
        """The primary of a block recovery agreed ``length`` with the holders and finalized
        their replicas with ``recovery_genstamp``: close the file (durably) with it."""
        if length < 0:
            raise InvalidArgument(f"negative length {length}")
        recovered = BlockRecord(block.block_id, recovery_genstamp, length)

        def plan() -> list[Op]:
            node = self.ns.block_file(block.block_id)
            if node is not None and not self.ns.is_open(node) and recovered in node.blocks:
                return []  # committed already: a retried call
            path = self._path_under_recovery(block.block_id, recovery_genstamp)
            blocks = list(self.ns.get_blocks(path))
            if delete_block:
                blocks.pop()
            else:
                blocks[-1] = recovered
            now = self.now_ms()
            return [CloseFileOp(path, now, now, tuple(blocks))]

        await self.mutate("commit block synchronization", plan, lambda: None)
        self.blocks.recoveries.finish(block.block_id)

    def _path_under_recovery(self, block_id: int, recovery_genstamp: int) -> str:
        """The open file whose last block the recovery with this genstamp works on;
        InvalidArgument when that recovery is not the one under way."""
        node = self.ns.block_file(block_id)
        attempt = self.blocks.recoveries.current(block_id)
        path = self.ns.path_of(node) if node is not None else ""
        if (
            node is None
            or attempt is None
            or attempt.genstamp != recovery_genstamp
            or node.blocks[-1].block_id != block_id
            or self.ns.lease_holder(path) != RECOVERY_HOLDER
        ):
            raise InvalidArgument(
                f"block {block_id}: no block recovery with genstamp {recovery_genstamp} "
                "is under way (superseded, or the file is gone)"
            )
        return path
