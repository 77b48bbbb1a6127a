"""The core of the NameNode's operations (:class:`~xdfs.namenode.namesystem.Namesystem`):
its state, the one mutation path (plan, apply, log, durability) and the checks the
operations share.

Every mutation runs the same three steps (:meth:`NamesystemCore.mutate`):

1. wait until the edits buffer has room (back-pressure, may await);
2. synchronously, with no ``await`` in between: check safe mode and permissions, plan the
   ops, apply each to the namespace and append it to the edits log. Because nothing else
   runs on the event loop meanwhile, the log's order is exactly the order of changes in
   memory, and a plan validated in step 2 cannot be invalidated before it is applied;
3. wait until the last txid is synced on every name dir. **Only then is the caller
   answered** - this is where "durability before acknowledgement" is enforced - and only
   then are the replicas of blocks that left the namespace deleted (a crash before the
   sync must not leave a file whose replicas are gone).

The common client mutations also run in one step, step 2 alone
(:meth:`NamesystemCore.apply_now`, through :meth:`NamesystemCore.once_now`), when nothing
must be waited for first (no full buffer, no lease to recover first ...): the caller
answers once :meth:`NamesystemCore.after_sync` says the txid is durable (the RPC
handlers, with no coroutine or task) or after ``await synced(pending)`` (the async API).

Non-idempotent client calls run through :meth:`NamesystemCore.at_most_once`: a retry of
one (same client id and call number, :mod:`xdfs.namenode.retry_cache`) gets the first
try's outcome instead of a second execution, and the last op such a call logs carries its
key, so a restarted or promoted NameNode knows the answer too.
"""

from __future__ import annotations

import asyncio
import contextvars
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, Protocol, TypeVar, cast

from xdfs.common import paths
from xdfs.common.faults import fault_point
from xdfs.config import NameNodeConfig
from xdfs.errors import (
    InvalidArgument,
    InvalidPath,
    IsADirectory,
    LeaseError,
    NotADirectory,
    error_from_code,
)
from xdfs.namenode.blocks.manager import BlockManager
from xdfs.namenode.blocks.recovery import RECOVERY_HOLDER
from xdfs.namenode.blocks.safemode import SafeMode
from xdfs.namenode.namespace.inodes import DirInode, FileInode
from xdfs.namenode.namespace.leases import LeaseManager
from xdfs.namenode.namespace.ops import AddBlockOp, MkdirOp, Op
from xdfs.namenode.namespace.permissions import WRITE as W
from xdfs.namenode.namespace.resolved import INodesInPath
from xdfs.namenode.namespace.tree import Namespace
from xdfs.namenode.retry_cache import KEYED_DURABLE, RetryCache, State, with_key
from xdfs.namenode.walks import WalkPacer
from xdfs.protocol.namenode import DEFAULT_MODE
from xdfs.rpc.handling import CallKey, current_call

T = TypeVar("T")
U = TypeVar("U")


class EditSink(Protocol):
    """What the namesystem needs of the edits log."""

    #: True while appenders must ``await wait_for_room()`` (read before each mutation:
    #: a plain attribute, not a coroutine awaited every time).
    buffer_full: bool

    @property
    def last_txid(self) -> int: ...

    def append(self, op: Op) -> int: ...

    async def wait_for_room(self) -> None: ...

    async def sync(self, txid: int) -> None: ...

    def synced_future(self, txid: int) -> asyncio.Future[None] | None:
        """What to await until ``txid`` is durable (shared by a flush's waiters), None if
        it is."""
        ...

    def when_synced(self, txid: int, callback: Callable[[BaseException | None], None]) -> None:
        """``callback(None)`` once ``txid`` is durable, ``callback(error)`` if it never
        will be (no future, no task: the answer of a mutation made in one step)."""
        ...


class Plan(Generic[T]):
    """What one mutation does, decided synchronously right before it is applied: the ops to
    apply and log; the paths they act on as the decision resolved them (handed to apply, so
    nothing is walked again); and the answer, read once the ops are applied (a status of
    the new state, or a value of the decision)."""

    __slots__ = ("answer", "at", "ops")

    def __init__(
        self, ops: Sequence[Op], answer: Callable[[], T], at: tuple[INodesInPath, ...] = ()
    ) -> None:
        self.ops = ops
        self.answer = answer
        self.at = at

    @staticmethod
    def of(ops: Sequence[Op], value: U, at: tuple[INodesInPath, ...] = ()) -> Plan[U]:
        """A plan whose answer is known when it is made."""
        return Plan(ops, lambda: value, at)


class Pending(Generic[T]):
    """A mutation made in one step (:meth:`NamesystemCore.apply_now`): applied and logged,
    its ``answer`` due once ``txid`` is durable (:meth:`NamesystemCore.after_sync`), when
    the replicas of the blocks it dropped may go too."""

    __slots__ = ("affected", "answer", "dropped", "keyed", "txid")

    def __init__(
        self, answer: T, txid: int, dropped: list[int], affected: list[int], keyed: bool
    ) -> None:
        self.answer = answer
        self.txid = txid
        self.dropped = dropped
        self.affected = affected
        self.keyed = keyed


#: The key of the at-most-once call this context runs (:meth:`NamesystemCore.run_once`):
#: the mutations it makes carry it. A context variable, not a map keyed by the task (one
#: ``current_task`` lookup less on each side of every keyed mutation).
_RUNNING_ONCE: contextvars.ContextVar[CallKey | None] = contextvars.ContextVar(
    "xdfs_running_once", default=None
)


def _keyed_ops(ops: Sequence[Op], key: CallKey) -> list[Op]:
    """``ops`` with the call's key on the last (on the one before when the last adds the
    first block of a ``create_with_block``: its add_file carries the key)."""
    keyed = list(ops)
    last = len(keyed) - 2 if len(keyed) > 1 and isinstance(keyed[-1], AddBlockOp) else -1
    keyed[last] = with_key(keyed[last], key)
    return keyed


class NamesystemCore:
    """The namesystem's state and its one mutation path; each group of operations is a
    subclass (fs_write, fs_append, fs_leases), and Namesystem joins them."""

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
        edits = self.edits
        if edits.buffer_full:
            await edits.wait_for_room()
        key = _RUNNING_ONCE.get() if keyed else None
        pending = self.apply_now(operation, plan, key, allowed_in_safe_mode)
        if key is not None:
            # Applied and logged: from here on a retry gets this answer (once durable),
            # even if this try is cancelled while it waits for the sync.
            self.retry_cache.succeed(key, pending.answer, pending.txid)
        # Durability before acknowledgement (a future of its own: a cancelled caller
        # stops waiting at once, which the shared one of synced() defers to the flush).
        await edits.sync(pending.txid)
        self._durable(pending)
        return pending.answer

    def apply_now(
        self,
        operation: str,
        plan: Callable[[], Plan[T]],
        key: CallKey | None = None,
        allowed_in_safe_mode: bool = False,
    ) -> Pending[T]:
        """Step 2 of a mutation (the module's doc), with no ``await``: check, plan,
        apply, append (``key``: the at-most-once call whose outcome this is, carried by
        its last op). The caller has checked the buffer has room, and answers once
        :meth:`after_sync` (or ``edits.sync``) says the txid is durable."""
        if not allowed_in_safe_mode:
            self.safe_mode.check_writable(operation)
        planned = plan()
        ops = planned.ops
        if key is not None and ops:
            ops = _keyed_ops(ops, key)
        edits = self.edits
        txid = edits.last_txid
        dropped: list[int] = []
        affected: list[int] = []
        for op in ops:
            # apply returns the block ids that left the namespace: not orphans, and not
            # deleted either, until the sync says the change is durable
            gone = self.ns.apply(op, planned.at)
            txid = edits.append(op)
            self.blocks.leaving(gone)
            dropped.extend(gone)
            affected.extend(self.blocks.affected_blocks(op, planned.at))
        return Pending(planned.answer(), txid, dropped, affected, key is not None)

    async def synced(self, pending: Pending[T]) -> T:
        """The answer of a mutation made in one step, once durable (the async API: one
        future per flush, shared by its waiters)."""
        flushed = self.edits.synced_future(pending.txid)
        if flushed is not None:
            await flushed
        self._durable(pending)
        return pending.answer

    def _durable(self, pending: Pending[T]) -> None:
        """After the sync of a mutation: its dropped blocks may go now."""
        if pending.keyed:
            fault_point(KEYED_DURABLE)
        self.blocks.ops_durable(pending.dropped, pending.affected)

    def after_sync(
        self, pending: Pending[T], then: Callable[[BaseException | None, T], None]
    ) -> None:
        """``then(None, answer)`` once ``pending`` is durable (its blocks' bookkeeping done
        first), ``then(error, answer)`` if the edits log fails before: the answer of a
        mutation made in one step, with no coroutine, future or task."""

        def synced(error: BaseException | None) -> None:
            if error is None:
                try:
                    self._durable(pending)
                except Exception as exc:  # answered as mutate's caller would be
                    error = exc
            then(error, pending.answer)

        self.edits.when_synced(pending.txid, synced)

    def once_now(
        self, key: CallKey | None, run: Callable[[], Pending[T] | None]
    ) -> Pending[T] | None:
        """``run()``, the one-step form of an at-most-once call (:meth:`run_once`): None
        ("not here") when it must wait for something first (the edits buffer is full,
        a lease to recover, replicas to be reported) or is a retry, and ``run`` returns
        None for it: the caller then takes the async path, which waits as needed."""
        if self.edits.buffer_full:
            return None
        if key is None:
            return run()
        cache = self.retry_cache
        now_s = self.clock()
        if cache.get(key, now_s) is not None:
            return None  # a retry: run_once answers it (waits for the first try)
        # No entry while it runs: nothing between here and its end awaits, so no retry
        # can come in meanwhile to find it running.
        try:
            pending = run()
        except BaseException as exc:
            cache.begin(key, now_s)
            cache.fail(key, exc)  # remembered as run_once would (or forgotten)
            raise
        if pending is not None:  # (None: not run; the async path begins it)
            cache.add_succeeded(key, pending.answer, pending.txid, now_s)
        return pending

    async def at_most_once(self, run: Callable[[], Awaitable[T]]) -> T:
        """``run()``, a client call that must not apply twice: through the retry cache when
        the RPC call being handled has a key (:meth:`run_once`), plainly otherwise. (A
        method, not a decorator: the compiled build's native classes take no decorated
        methods; ``run`` is the call's body bound to its arguments.)"""
        key = current_call()
        if key is None:
            return await run()
        return await self.run_once(key, run)

    async def run_once(self, key: CallKey, run: Callable[[], Awaitable[T]]) -> T:
        """Run the call ``key`` names unless a try of it ran already: then wait for that
        one if it still runs, and answer its outcome (the answer once its txid is durable,
        or the same error). An outcome that decided nothing is forgotten, and the call
        runs again (retry_cache.forgettable)."""
        cache = self.retry_cache
        while (entry := cache.begin(key, self.clock())) is not None:
            if entry.state is State.RUNNING:
                finished = asyncio.Event()
                entry.wait(finished.set)
                await finished.wait()
            elif entry.error is not None:
                raise error_from_code(entry.error.code, entry.error.message)
            else:
                await self.edits.sync(entry.txid)
                return cast(T, entry.value)
        token = _RUNNING_ONCE.set(key)
        try:
            value = await run()
        except BaseException as exc:
            cache.fail(key, exc)
            raise
        finally:
            _RUNNING_ONCE.reset(token)
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
            raise NotADirectory(f"Parent path is not a directory: {iip.prefix(depth - 1)}")

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
