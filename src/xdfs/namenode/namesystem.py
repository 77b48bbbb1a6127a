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

Non-idempotent client calls run :func:`at_most_once`: a retry of one (same client id and
call number, :mod:`xdfs.namenode.retry_cache`) gets the first try's outcome instead of a
second execution, and the last op such a call logs carries its key, so a restarted or
promoted NameNode knows the answer too.

Reads run inline without touching the log. They may observe a change whose sync is still
in flight (as in HDFS); a mutation that turns out to be a no-op still waits for the log's
current txid, so nothing is acknowledged on the strength of an unsynced change.
"""

from __future__ import annotations

import asyncio
import functools
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar, cast

from xdfs.common.faults import fault_point
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
    RecoveryInProgress,
    error_from_code,
)
from xdfs.namenode.blocks.datanodes import DataNode
from xdfs.namenode.blocks.manager import BlockManager
from xdfs.namenode.blocks.recovery import RECOVERY_HOLDER, Attempt, CloseNow, RecoverBlock
from xdfs.namenode.blocks.safemode import SafeMode
from xdfs.namenode.namespace import paths, trash
from xdfs.namenode.namespace.inodes import DirInode, FileInode
from xdfs.namenode.namespace.leases import LeaseManager
from xdfs.namenode.namespace.ops import (
    AddBlockOp,
    AddFileOp,
    AppendOp,
    CloseFileOp,
    ConcatOp,
    DeleteOp,
    MkdirOp,
    Op,
    ReassignLeaseOp,
    RenameOp,
    SetOwnerOp,
    SetPermissionOp,
    SetQuotaOp,
    SetReplicationOp,
    SetTimesOp,
    TruncateOp,
    UpdateBlocksOp,
)
from xdfs.namenode.namespace.resolved import INodesInPath
from xdfs.namenode.namespace.tree import Namespace
from xdfs.namenode.retry_cache import (
    KEYED_DURABLE,
    ReplayedAppend,
    RetryCache,
    State,
    with_key,
)
from xdfs.namenode.walks import WalkPacer
from xdfs.protocol.blocks import BlockRecord
from xdfs.protocol.namenode import (
    DEFAULT_MODE,
    AppendResponse,
    ContentSummary,
    CreateBlockResponse,
    FileStatus,
    LocatedBlock,
    LocatedBlocks,
)
from xdfs.rpc.server import CallKey, current_call

T = TypeVar("T")
U = TypeVar("U")
P = ParamSpec("P")

R, W, X = 4, 2, 1


class EditSink(Protocol):
    """What the namesystem needs of the edits log."""

    @property
    def last_txid(self) -> int: ...

    def append(self, op: Op) -> int: ...

    async def wait_for_room(self) -> None: ...

    async def sync(self, txid: int) -> None: ...


@dataclass(slots=True)
class Plan(Generic[T]):
    """What one mutation does, decided synchronously right before it is applied: the ops to
    apply and log; the paths they act on as the decision resolved them (handed to apply, so
    nothing is walked again); and the answer, read once the ops are applied (a status of
    the new state, or a value of the decision)."""

    ops: Sequence[Op]
    answer: Callable[[], T]
    at: tuple[INodesInPath, ...] = ()

    @staticmethod
    def of(ops: Sequence[Op], value: U, at: tuple[INodesInPath, ...] = ()) -> Plan[U]:
        """A plan whose answer is known when it is made."""
        return Plan(ops, lambda: value, at)


def at_most_once(
    method: Callable[Concatenate[Namesystem, P], Awaitable[T]],
) -> Callable[Concatenate[Namesystem, P], Awaitable[T]]:
    """A client call that must not apply twice: run through the retry cache when the RPC
    call being handled has a key (:meth:`Namesystem.run_once`), plainly otherwise."""

    @functools.wraps(method)
    async def once(self: Namesystem, /, *args: P.args, **kwargs: P.kwargs) -> T:
        key = current_call()
        if key is None:
            return await method(self, *args, **kwargs)
        return await self.run_once(key, lambda: method(self, *args, **kwargs))

    return once


def _keyed_ops(ops: Sequence[Op], key: CallKey) -> list[Op]:
    """``ops`` with the call's key on the last (on the one before when the last adds the
    first block of a ``create_with_block``: its add_file carries the key)."""
    last = len(ops) - 2 if len(ops) > 1 and isinstance(ops[-1], AddBlockOp) else len(ops) - 1
    return [with_key(op, key) if index == last else op for index, op in enumerate(ops)]


def _retried_add_block(blocks: Sequence[BlockRecord], previous: BlockRecord | None) -> bool:
    """Whether an add_block repeats one that already added the file's last block: that
    block is still empty and ``previous`` is the one before it (none: it is the only one).
    A first try names the last block (or none of an empty file), never the one before."""
    if not blocks or blocks[-1].num_bytes != 0:
        return False
    before = blocks[-2].block_id if len(blocks) > 1 else None
    return (previous.block_id if previous is not None else None) == before


@dataclass(frozen=True, slots=True)
class Recovered:
    """What a lease recovery decided: the files closed at once, and the block recoveries
    to start once their stamps are durable."""

    closed: set[str]
    attempts: list[Attempt]


class Namesystem:
    def __init__(
        self,
        namespace: Namespace,
        edits: EditSink,
        config: NameNodeConfig,
        *,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        retry_cache: RetryCache | None = None,
    ) -> None:
        """``retry_cache``: one rebuilt while the edits were replayed (else a new one)."""
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
        self.retry_cache = retry_cache if retry_cache is not None else RetryCache(
            config.retry_cache_entries_max, config.retry_cache_expiry_s
        )
        self._keyed: dict[asyncio.Task[object], CallKey] = {}  # task -> key of its call
        #: whole-subtree walks run in slices; fsck's also rate-limited, all fscks together
        self.walks = WalkPacer(config.walk_slice_inodes)
        self.fsck_walks = WalkPacer(config.walk_slice_inodes, config.fsck_rate_inodes_per_s)
        self.restore_leases()

    def restore_leases(self) -> None:
        """A fresh lease for every writer of an open file, bound to the file's creator: at
        a restart, and when a standby (which tails files open and closed) becomes active."""
        self.leases = LeaseManager()
        now_s = self.clock()
        for holder, owner in self.ns.lease_holders():
            self.leases.restore(holder, owner, now_s)

    # -- the one mutation path ----------------------------------------------------------

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    async def mutate(
        self,
        operation: str,
        plan: Callable[[], Plan[T]],
        *,
        allowed_in_safe_mode: bool = False,
        keyed: bool = True,
    ) -> T:
        """``allowed_in_safe_mode``: for what must run in safe mode (token-key rotation:
        logins must work while the NameNode waits for block reports). ``keyed=False``:
        a mutation an at-most-once call makes on the side (a lease recovery), not its own
        outcome."""
        await self.edits.wait_for_room()
        if not allowed_in_safe_mode:
            self.safe_mode.check_writable(operation)
        planned = plan()
        key = self._keyed.get(cast("asyncio.Task[object]", asyncio.current_task()))
        ops = planned.ops
        if key is not None and keyed and ops:
            ops = _keyed_ops(ops, key)
        txid = self.edits.last_txid
        dropped: list[int] = []
        affected: list[int] = []
        for op in ops:
            # apply returns the block ids that left the namespace: not orphans, and not
            # deleted either, until the sync below says the change is durable
            gone = self.ns.apply(op, planned.at)
            txid = self.edits.append(op)
            self.blocks.leaving(gone)
            dropped.extend(gone)
            affected.extend(self.blocks.affected_blocks(op, planned.at))
        answer = planned.answer()
        if key is not None and keyed:
            # Applied and logged: from here on a retry gets this answer (once durable),
            # even if this try is cancelled while it waits for the sync.
            self.retry_cache.succeed(key, answer, txid)
        await self.edits.sync(txid)  # durability before acknowledgement
        if key is not None and keyed:
            fault_point(KEYED_DURABLE)
        self.blocks.ops_durable(dropped, affected)
        return answer

    async def run_once(self, key: CallKey, run: Callable[[], Awaitable[T]]) -> T:
        """Run the call ``key`` names unless a try of it ran already: then wait for that
        one if it still runs, and answer its outcome (the answer once its txid is durable,
        or the same error). An outcome that decided nothing is forgotten, and the call
        runs again (retry_cache.forgettable)."""
        cache = self.retry_cache
        while (entry := cache.begin(key, self.clock())) is not None:
            if entry.state is State.RUNNING:
                finished = asyncio.Event()
                entry.waiters.append(finished.set)
                await finished.wait()
            elif entry.error is not None:
                raise error_from_code(entry.error.code, entry.error.message)
            else:
                await self.edits.sync(entry.txid)
                return cast(T, entry.value)
        task = cast("asyncio.Task[object]", asyncio.current_task())
        self._keyed[task] = key
        try:
            value = await run()
        except BaseException as exc:
            cache.fail(key, exc)
            raise
        finally:
            del self._keyed[task]
        cache.succeed(key, value, self.edits.last_txid)  # a call that logged nothing
        return value

    # -- helpers ------------------------------------------------------------------------

    def _default_mode(self, is_dir: bool, mode: int) -> int:
        if mode != DEFAULT_MODE:
            if not 0 <= mode <= 0o7777:
                raise InvalidArgument(f"mode {mode:o} is not a permission (0..7777 octal)")
            return mode
        base = 0o777 if is_dir else 0o666
        return base & ~self.config.umask

    def _mkdir_ops(
        self, iip: INodesInPath, depth: int, owner: str, mode: int, final_mode: int
    ) -> list[Op]:
        """MkdirOps for every missing directory of the first ``depth`` components of
        ``iip`` (``mode`` for the ones above, ``final_mode`` for the last); new directories
        take the group of the deepest existing ancestor (BSD rule, as HDFS)."""
        missing = iip.missing(depth)
        if not missing:
            return []
        group = iip.inodes[-1].group  # the parent of the first one made
        now = self.now_ms()
        last = missing[-1]
        return [
            MkdirOp(d, self.ns.allocate_inode_id(), final_mode if d == last else mode,
                    owner, group, now)
            for d in missing
        ]

    @staticmethod
    def _check_parent_not_a_file(iip: INodesInPath) -> None:
        """NotADirectory when the parent of ``iip`` exists as a file (``missing`` would call
        the file itself AlreadyExists, which is wrong for a path beneath it)."""
        depth = len(iip.parts)
        if len(iip.inodes) >= depth and not isinstance(iip.inodes[depth - 1], DirInode):
            raise NotADirectory(f"parent is not a directory: {iip.prefix(depth - 1)}")

    def _check_writer(self, user: str, iip: INodesInPath) -> None:
        """The writer of an open file may traverse to it and owns it or may write it: a file
        created read-only (as POSIX ``open(O_CREAT, 0444)``) can still be written and
        completed by its creator; the lease (checked next) says which client writes."""
        self.ns.check_access(user, iip)
        if iip.get().owner != user:
            self.ns.check_access(user, iip, access=W)

    def _writable_file(self, user: str, client: str, iip: INodesInPath) -> FileInode:
        """The open file ``client`` writes, after checking ``user`` may write it through
        that client; the lease is renewed."""
        self._check_writer(user, iip)
        node = iip.get()
        if not isinstance(node, FileInode):
            raise IsADirectory(f"{iip.path} is a directory")
        holder = self.ns.lease_holder(iip)
        if holder != client or client == RECOVERY_HOLDER:
            raise LeaseError(
                f"{iip.path} is not open for writing by {client}"
                + (f" ({self._holder_text(user, holder)} holds its lease)" if holder
                   else " (file is closed)")
            )
        self.leases.take(client, user, self.clock())
        return node

    def _holder_text(self, user: str, holder: str) -> str:
        """Who holds a lease, as ``user`` may be told: the client name only to its own user
        and to superusers (client names are what a writer proves itself with)."""
        if self.leases.user_of(holder) in (user, None) or self.ns.is_superuser(user):
            return f"client {holder}"
        return "another client"

    def _check_move_limits(self, src: INodesInPath, dst: INodesInPath) -> None:
        """InvalidPath when moving ``src`` to ``dst`` would make a path in its subtree deeper
        or longer than every path must be (paths.DEPTH_MAX, paths.PATH_BYTES_MAX): such a
        path could be neither named nor recovered afterwards. Walks the subtree only when
        the move makes paths deeper or longer."""
        src_bytes, dst_bytes = len(src.path.encode("utf-8")), len(dst.path.encode("utf-8"))
        if len(dst.parts) <= len(src.parts) and dst_bytes <= src_bytes:
            return
        depth, size = self.ns.subtree_extent(src)
        if len(dst.parts) + depth > paths.DEPTH_MAX:
            raise InvalidPath(
                f"moving {src.path} to {dst.path} would make paths deeper than "
                f"{paths.DEPTH_MAX} components (its subtree is {depth} deep)"
            )
        if dst_bytes + size > paths.PATH_BYTES_MAX:
            raise InvalidPath(
                f"moving {src.path} to {dst.path} would make paths longer than "
                f"{paths.PATH_BYTES_MAX} bytes (its subtree adds up to {size})"
            )

    # -- reads --------------------------------------------------------------------------

    def stat(self, user: str, path: str) -> FileStatus:
        iip = self.ns.resolve(path)
        self.ns.check_access(user, iip)
        return self.ns.stat(iip)

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

    @at_most_once
    async def mkdirs(self, user: str, path: str, mode: int, parents: bool) -> FileStatus:
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
            self.ns.check_access(user, iip, ancestor_access=W | X)
            final_mode = self._default_mode(True, mode)
            ops = self._mkdir_ops(iip, len(iip.parts), user,
                                  self._default_mode(True, DEFAULT_MODE), final_mode)
            if len(ops) > 1 and not parents:
                raise NotFound(f"parent of {iip.path} does not exist")
            self.ns.check_name_quota(iip, len(ops))  # all or none of the directories
            return Plan(ops, lambda: self.ns.stat(iip), (iip,))

        return await self.mutate("mkdirs", plan)

    @at_most_once
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
        status = await self._create(
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
        answer = await self._create_with_block_once(
            user, client, path, mode=mode, replication=replication, block_size=block_size,
            overwrite=overwrite, create_parents=create_parents,
        )
        if isinstance(answer, FileStatus):
            # A retry answered from the edits (replayed after a restart or a failover: the
            # key is on the add_file op). The block's targets were in memory only: the
            # writer's add_block gets that block again, with targets chosen anew (a retried
            # add_block is recognised from the file).
            return CreateBlockResponse(answer)
        return answer

    @at_most_once
    async def _create_with_block_once(
        self, /, user: str, client: str, path: str, **options: Any
    ) -> CreateBlockResponse | FileStatus:
        return await self._create(user, client, path, first_block=True, **options)

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
        await self._recover_if_abandoned(user, client, resolved, overwrite)

        def plan() -> Plan[FileStatus | CreateBlockResponse]:
            iip = self.ns.fresh(resolved)
            self.ns.check_access(user, iip)  # traverse first, as mkdirs
            if iip.exists:
                self._check_overwrite(user, client, iip, overwrite)
            depth = len(iip.parts)
            if not create_parents and len(iip.inodes) < depth:
                raise NotFound(f"parent directory {iip.prefix(depth - 1)} does not exist")
            self._check_parent_not_a_file(iip)
            self.ns.check_access(user, iip, ancestor_access=W | X)
            dir_mode = self._default_mode(True, DEFAULT_MODE)
            ops = self._mkdir_ops(iip, depth - 1, user, dir_mode, dir_mode)
            first = ops[0] if ops else None
            group = first.group if isinstance(first, MkdirOp) else iip.inodes[depth - 1].group
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

        return await self.mutate("create", plan)

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

    @at_most_once
    async def add_block(
        self,
        user: str,
        client: str,
        path: str,
        previous: BlockRecord | None,
        excluded: Sequence[str] = (),
        writer: str = "",
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

    @at_most_once
    async def complete(
        self, user: str, client: str, path: str, blocks: list[BlockRecord]
    ) -> FileStatus:
        """Close the file once every block has min_replication replicas of the length the
        writer says (seed 003: an upload is confirmed only when DataNodes have reported)."""
        resolved = self.ns.resolve(path)

        def check(iip: INodesInPath) -> FileInode:
            node = self._writable_file(user, client, iip)
            if [b.block_id for b in blocks] != [b.block_id for b in node.blocks]:
                raise InvalidArgument(
                    f"complete {iip.path}: block list differs from the NameNode's")
            if any(b.num_bytes < 0 for b in blocks):
                raise InvalidArgument("block lengths must be >= 0")
            return node

        node = check(resolved)
        # Waited for before mutate, holding nothing: plan() checks everything again.
        await self._wait_for_replicas(resolved.path, node.replication, blocks)

        def plan() -> Plan[FileStatus]:
            iip = self.ns.fresh(resolved)
            check(iip)
            now = self.now_ms()
            return Plan([CloseFileOp(iip.path, now, now, tuple(blocks))],
                        lambda: self.ns.stat(iip), (iip,))

        return await self.mutate("complete", plan)

    async def _wait_for_replicas(
        self, path: str, replication: int, blocks: list[BlockRecord]
    ) -> None:
        """Until each block has enough replicas reported (woken by each report of one of
        them, no polling), at most complete_wait_s; then NotEnoughReplicas."""
        needed = min(self.config.min_replication, replication)
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

    # -- append, hflush, truncate, concat (HDFS semantics) -----------------------------

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
        answer = await self._append(user, client, path)
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

    @at_most_once
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

    @at_most_once
    async def concat(self, user: str, target: str, sources: Sequence[str]) -> None:
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

    def report_bad_replicas(self, replicas: Sequence[tuple[int, str]]) -> None:
        """Replicas that failed their checksums, (block id, address), from a reader or a
        DataNode (the handler checked the caller may report them)."""
        for block_id, address in replicas:
            self.blocks.report_bad_replica(block_id, address)

    def renew_lease(self, user: str, client: str) -> None:
        self.leases.renew(client, user, self.clock())

    @at_most_once
    async def delete(self, user: str, path: str, *, recursive: bool, skip_trash: bool) -> str:
        """Delete ``path`` or move it to the user's trash; returns the trash path or "".

        A recursive delete of a directory checks rwx on every directory beneath first, in
        slices (other calls run meanwhile); the delete itself, with the checks on the path
        and its parent, is then one atomic step. A directory created or chmodded under the
        path between the two is not checked again (HDFS holds its lock across both)."""
        resolved = self.ns.resolve(path)
        walked = recursive and isinstance(resolved.last, DirInode)
        if walked:
            await self.walks.run(self.ns.subtree_access_steps(user, resolved, R | W | X))

        def plan() -> Plan[str]:
            iip = self.ns.fresh(resolved)
            if not iip.parts:
                raise InvalidArgument("cannot delete the root directory")
            status = self.ns.stat(iip)
            if status.is_dir and status.children and not recursive:
                raise DirectoryNotEmpty(f"{iip.path} is a non-empty directory (use recursive)")
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

        return await self.mutate("delete", plan)

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

    @at_most_once
    async def rename(self, user: str, src: str, dst: str) -> str:
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

        return await self.mutate("rename", plan)

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

    @at_most_once
    async def restore(self, user: str, trash_path: str) -> str:
        """Move a trash entry back to the path it was deleted from; returns that path."""
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

    # -- leases -------------------------------------------------------------------------

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
        iip = self.ns.fresh(resolved)
        holder = self.ns.lease_holder(iip) if iip.exists else ""
        if overwrite or not holder or holder in (client, RECOVERY_HOLDER):
            return
        if not self.leases.is_expired(holder, self.clock(), self.config.lease_soft_limit_s):
            return
        self.ns.check_access(user, iip, ancestor_access=W | X)
        closed = await self._recover([iip.path])
        raise AlreadyExists(
            f"{iip.path} already exists" + ("" if closed else
            f" (its writer {holder} went silent: lease recovery started, try again later)")
        )

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
