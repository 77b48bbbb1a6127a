"""The NameNode's retry cache (HDFS's RetryCache): at most once for non-idempotent calls.

A client that lost its connection, timed out, or moved to another NameNode repeats a call
with the same key, (client id, call number) (:func:`xdfs.rpc.server.current_call`). The
cache remembers each such call of the methods declared ``at_most_once``: a repeat of a call
still running waits for it; a repeat of a finished one gets the first outcome (the answer,
or the same error) and applies nothing. Entries live ``retry_cache_expiry_s`` from their
first try (HDFS: 10 min); at most ``retry_cache_entries_max`` are kept, oldest finished
first out.

The ids travel in the edits: the last op a call logs carries its key (as HDFS logs
rpcClientId/rpcCallId), so a NameNode replaying edits at startup, or a standby applying
them as it tails the journal, rebuilds the entries with :func:`record_applied`, and a retry
after a restart or a failover is answered from the log instead of being applied twice.

This module is the pure core: no clock reads (times are passed in), no I/O. The asyncio
side (waiting for a running first try, durability) is :meth:`Namesystem.at_most_once`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Final

import msgspec.structs

from xdfs.common.faults import FAULT_POINTS
from xdfs.errors import Cancelled, InternalError, XdfsError
from xdfs.namenode.namespace.inodes import FileInode
from xdfs.namenode.namespace.ops import (
    AddFileOp,
    AppendOp,
    CloseFileOp,
    ConcatOp,
    DeleteOp,
    MkdirOp,
    Op,
    RenameOp,
)
from xdfs.namenode.namespace.tree import Namespace
from xdfs.protocol.blocks import BlockRecord
from xdfs.protocol.namenode import FileStatus
from xdfs.rpc.handling import CallKey

#: The ops that carry a call's key: the last op of each at-most-once mutation. (A set of
#: the exact types: one hash probe per mutation, where ``isinstance`` with a tuple tried
#: each class in turn; ops are never subclassed.)
KEYED_OPS: Final = frozenset(
    (MkdirOp, AddFileOp, CloseFileOp, DeleteOp, RenameOp, ConcatOp, AppendOp))

#: Fault point (crash tests): a keyed call's ops are durable, its caller not yet answered.
KEYED_DURABLE: Final = "namenode.keyed_call_durable"
assert KEYED_DURABLE in FAULT_POINTS


_replace: Final = msgspec.structs.replace

#: How often (at most) inserting drops expired entries.
_SWEEP_INTERVAL_S = 1.0


class State(Enum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class Entry:
    """One call: its outcome once known. ``txid``: the last txid of its ops (a retry is
    answered once that is durable). ``waiters`` are told when the first try ends. (A plain
    class: this module is compiled, and mypyc's dataclasses do not take an ``object``
    field.)"""

    __slots__ = ("error", "expires_s", "state", "txid", "value", "waiters")

    def __init__(
        self,
        expires_s: float,
        state: State = State.RUNNING,
        value: object = None,
        error: XdfsError | None = None,
        txid: int = 0,
    ) -> None:
        self.expires_s = expires_s
        self.state = state
        self.value = value
        self.error = error
        self.txid = txid
        #: None until a retry waits (the common entry never has one: no list per call).
        self.waiters: list[Callable[[], None]] | None = None

    def wait(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` once the first try ends."""
        if self.waiters is None:
            self.waiters = []
        self.waiters.append(wake)

    def _settle(self, state: State) -> None:
        self.state = state
        waiters, self.waiters = self.waiters, None
        for wake in waiters or ():
            wake()


def forgettable(error: BaseException) -> bool:
    """An outcome that decided nothing (the call did not run here, or not to its end): the
    entry is dropped so a retry runs the call again instead of getting this answer."""
    if not isinstance(error, XdfsError):
        return True
    return error.retriable or isinstance(error, Cancelled | InternalError)


class RetryCache:
    def __init__(self, entries_max: int, expiry_s: float) -> None:
        self.entries_max = entries_max
        self.expiry_s = expiry_s
        self._entries: OrderedDict[CallKey, Entry] = OrderedDict()
        self._sweep_at_s = float("-inf")  # when _evict next drops expired entries

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: CallKey, now_s: float) -> Entry | None:
        entry = self._entries.get(key)
        if entry is not None and entry.expires_s <= now_s and entry.state is not State.RUNNING:
            del self._entries[key]
            return None
        return entry

    def begin(self, key: CallKey, now_s: float) -> Entry | None:
        """The entry of an earlier try of ``key`` if there is one (running or finished);
        else None, after recording this try as running."""
        entry = self.get(key, now_s)
        if entry is not None:
            return entry
        self._insert(key, Entry(now_s + self.expiry_s), now_s)
        return None

    def succeed(self, key: CallKey, value: object, txid: int) -> None:
        entry = self._entries.get(key)
        if entry is not None and entry.state is State.RUNNING:
            entry.value, entry.txid = value, txid
            entry._settle(State.SUCCEEDED)

    def fail(self, key: CallKey, error: BaseException) -> None:
        """The first try failed: remember the error, or forget the call when the error
        decided nothing (:func:`forgettable`)."""
        entry = self._entries.get(key)
        if entry is None or entry.state is not State.RUNNING:
            return
        if forgettable(error):
            del self._entries[key]
            entry._settle(State.FAILED)  # waiters find no entry and run the call themselves
            return
        assert isinstance(error, XdfsError)
        entry.error = error
        entry._settle(State.FAILED)

    def add_applied(self, key: CallKey, value: object, txid: int, now_s: float) -> None:
        """A call whose ops were applied from the edits (startup replay, a standby's
        tailing): a retry of it gets ``value``."""
        self._entries.pop(key, None)
        self.add_succeeded(key, value, txid, now_s)

    def add_succeeded(self, key: CallKey, value: object, txid: int, now_s: float) -> None:
        """A call with no entry (:meth:`get` said so) that ran to its end with no await
        in between (a one-step call): no retry could have seen it running, so its entry
        goes in finished, one insert instead of begin's and succeed's two steps."""
        self._insert(key, Entry(now_s + self.expiry_s, State.SUCCEEDED, value, None, txid), now_s)

    def _insert(self, key: CallKey, entry: Entry, now_s: float) -> None:
        self._evict(now_s)
        self._entries[key] = entry

    def _evict(self, now_s: float) -> None:
        """Drop expired entries from the old end, then the oldest finished ones while the
        cache is full. A running entry is never dropped (a retry must find it)."""
        entries = self._entries
        if now_s >= self._sweep_at_s:
            # At most once a second (not once per call): a lookup ignores expired entries
            # anyway, this only bounds memory.
            self._sweep_at_s = now_s + _SWEEP_INTERVAL_S
            while entries:
                key, oldest = next(iter(entries.items()))
                if oldest.expires_s > now_s or oldest.state is State.RUNNING:
                    break
                del entries[key]
        excess = len(entries) - self.entries_max + 1
        looked = 0
        while excess > 0 and looked < len(entries):  # (full: one entry out per insert)
            key, oldest = entries.popitem(last=False)
            looked += 1
            if oldest.state is State.RUNNING:
                entries[key] = oldest  # kept (a retry must find it), as the youngest
            else:
                excess -= 1


@dataclass(frozen=True, slots=True)
class ReplayedAppend:
    """The answer of an append applied from the edits (HDFS: LastBlockWithStatus): what
    the namespace said right after it. Where the reopened block's replicas are, and the
    token to write it, are not in the edits: the NameNode that answers a retry adds them
    (``Namesystem.append``)."""

    status: FileStatus
    blocks: tuple[BlockRecord, ...]
    last_block: BlockRecord | None
    old_genstamp: int


def key_of(op: Op) -> CallKey | None:
    """The call key an op was logged with, None when it has none."""
    if type(op) not in KEYED_OPS:  # one set probe, not two attribute lookups that miss
        return None
    client_id: bytes = getattr(op, "rpc_client_id", b"")
    call: int = getattr(op, "rpc_call", 0)
    return (client_id, call) if client_id and call else None


def with_key(op: Op, key: CallKey) -> Op:
    """``op`` carrying ``key``; ops that cannot carry one are returned as they are."""
    if type(op) not in KEYED_OPS:
        return op
    return _replace(op, rpc_client_id=key[0], rpc_call=key[1])


def answer_of(op: Op, ns: Namespace) -> object:
    """What the call that logged ``op`` answered, read right after ``op`` is applied (so a
    replay yields exactly the first answer): the status of the directory or file it made
    or closed, the destination of a rename (and of a delete to the trash), "" for a
    delete, nothing for a concat, the reopened file for an append."""
    if isinstance(op, AppendOp):
        node = ns.resolve(op.path).get()
        assert isinstance(node, FileInode)
        return ReplayedAppend(ns.stat(op.path), node.blocks, op.last_block, op.old_genstamp)
    if isinstance(op, RenameOp):
        return op.dst
    if isinstance(op, DeleteOp):
        return ""
    if isinstance(op, ConcatOp):
        return None
    assert isinstance(op, MkdirOp | AddFileOp | CloseFileOp)
    return ns.stat(op.path)


def record_applied(cache: RetryCache, op: Op, ns: Namespace, txid: int, now_s: float) -> None:
    """Call after applying each op from the edits (startup replay, or a standby NameNode
    tailing the journal): an op that carries a call key becomes that call's entry."""
    key = key_of(op)
    if key is not None:
        cache.add_applied(key, answer_of(op, ns), txid, now_s)
