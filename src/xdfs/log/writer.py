"""The one writer of a log (asyncio driver around the rules of :mod:`xdfs.log.meta`).

:meth:`LogWriter.open` takes the log over (seed 002): a new writer epoch by CAS, then the
last two unclosed ledgers are recovered (:func:`recover_ledger`, BookKeeper's rule: fenced
on W - A + 1 nodes of the last fragment, the end read from their answers, the entries
past the last-add-confirmed put on an ack quorum of their fragment) and each closed at
its end by CAS; then a fresh ledger is added. The old writer learns it at its next add
(its ledger refuses: LedgerFenced) or metadata CAS (the epoch moved): either way it gets
:class:`~xdfs.errors.LogFenced`. A caller's ``open_writer`` also moves the metadata's
``opened_epoch``: appends naming an older one are refused (:func:`~xdfs.log.meta.
check_append_epoch`) as their entry is assigned.

Appends are pipelined: each gets the next entry id under a short lock, its adds are sent to
every node of the write set in order, and it returns once an ack quorum fsynced it *and*
every entry before it is acknowledged (the last-add-confirmed, LAC, has reached it) --
so a record is readable exactly when acknowledged. A node that fails an add leaves the
write set (it would refuse the next entries out of order): the writer replaces it with a
spare live node from the next entry on (ensemble change, a new fragment by CAS), or goes
on without it while the ack quorum remains. An append whose quorum failed breaks the
writer: the pending appends fail with it and the next append re-opens the log (fencing
its own ledger and recovering it), which is always safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence

import msgspec

from xdfs.errors import (
    LedgerFenced,
    LogFenced,
    NotEnoughStorageNodes,
    StorageError,
    XdfsError,
)
from xdfs.log import meta as m
from xdfs.log.nodes import LedgerNode, NodePool, frame_entries
from xdfs.log.record import encode_entry
from xdfs.log.zkmeta import MetaStore, guarded
from xdfs.protocol import ledger as lp
from xdfs.protocol.log import LogSettings, Lsn, Record
from xdfs.quorum.fanout import QuorumFailed, quorum_call

log = logging.getLogger(__name__)


class AsyncMeta:
    """:class:`MetaStore` from asyncio: each call on a worker thread (kazoo blocks)."""

    def __init__(self, store: MetaStore) -> None:
        self.store = store

    async def get(self, name: str) -> m.LogMeta:
        return (await asyncio.to_thread(guarded, lambda: self.store.get(name)))[0]

    async def update(self, name: str, change: Callable[[m.LogMeta], m.LogMeta]) -> m.LogMeta:
        return await asyncio.to_thread(guarded, lambda: self.store.update(name, change))

    async def new_ledger_id(self) -> int:
        return await asyncio.to_thread(guarded, self.store.new_ledger_id)


def node_end(address: str, state: lp.LedgerState) -> m.NodeEnd:
    return m.NodeEnd(address, state.last_entry, state.lac, state.first_entry, state.exists)


async def fence(pool: NodePool, ledger_id: int, address: str) -> m.NodeEnd:
    return node_end(address, await pool.node(address).call(
        lp.FENCE_LEDGER, lp.LedgerIdRequest(ledger_id)))


async def recover_ledger(pool: NodePool, info: m.LedgerInfo, settings: LogSettings,
                         spares: Sequence[str] = (), *, limit: int | None = None
                         ) -> tuple[int, m.Fragment | None]:
    """Fence ``info`` and make its tail durable (BookKeeper's LedgerRecoveryOp); its end,
    and the fragment to add before closing it (None: none needed).

    1. Fence the last fragment's nodes; W - A + 1 answers are enough: no ack quorum can be
       formed without one of them any more, and one of them holds every acknowledged
       entry. The end is the highest entry an answer holds (an unacknowledged one found
       is kept: BookKeeper does the same).
    2. Entries up to the highest last-add-confirmed heard are on an ack quorum already;
       the rest, the *tail*, is checked fragment by fragment: an entry no answering node
       holds ends the ledger before it if W - A + 1 nodes of its fragment answered
       without it (it was never acknowledged, nor anything after it), and fails the
       recovery otherwise (:meth:`_Tail.available_end`).
    3. Each fragment's part of the tail is copied to the fragment's nodes lacking it
       until A hold it (nodes that missed the fence are asked again); a part too few of
       them can hold gets, with the rest of the tail, a fragment of its own on the nodes
       able to hold it, ``spares`` (the configured storage nodes) among them: the
       ensemble change of a recovery (:meth:`_Tail.make_durable`).

    ``limit``: the highest entry the ledger may end at (the first entry of a fragment
    found never acknowledged, less one).
    """
    last = info.fragments[-1]
    needed = m.recovery_answers_needed(len(last.nodes), settings.ack_quorum)
    call = await pool.quorum(f"fence ledger {info.ledger_id}", last.nodes, needed,
                             lambda node: node.call(lp.FENCE_LEDGER,
                                                    lp.LedgerIdRequest(info.ledger_id)))
    answers = {a: node_end(a, s) for a, s in call.successes.items()}
    end = m.recovered_end(list(answers.values()), last.first_entry)
    if limit is not None:
        end = min(end, limit)
    if end < last.first_entry:
        if len(info.fragments) == 1:
            return end, None  # -1: an empty ledger
        # No node answering holds an entry of the last fragment (the writer died right
        # after an ensemble change): W - A + 1 of its nodes lack its first entry, so none
        # of it was acknowledged; the end lies in the fragment before, whose nodes may
        # have taken adds sent before the change (but none past it): recover that one.
        earlier = msgspec.structs.replace(info, fragments=info.fragments[:-1])
        return await recover_ledger(pool, earlier, settings, spares,
                                    limit=last.first_entry - 1)
    start = m.recovery_start(list(answers.values()))
    tail = _Tail(pool, info, answers)
    end = await tail.available_end(start, end, settings.ack_quorum)
    return end, await tail.make_durable(start, end, spares, settings)


class _Tail:
    """What recovery knows of the nodes' copies of a ledger, and the copies it makes."""

    def __init__(self, pool: NodePool, info: m.LedgerInfo, answers: dict[str, m.NodeEnd]
                 ) -> None:
        self.pool = pool
        self.info = info
        self.answers = dict(answers)

    def holders(self, first: int, last: int, nodes: Sequence[str] | None = None
                ) -> list[str]:
        return [a.node for a in self.answers.values()
                if (nodes is None or a.node in nodes) and m.holds_through(a, first, last)]

    async def cover(self, first: int, last: int, nodes: Sequence[str], ack_quorum: int,
                    member_of: int | None) -> bool:
        """Make A of ``nodes`` hold entries ``first..last`` (members of fragment
        ``member_of``, or None: of a new fragment). Nodes not heard from yet are fenced
        first, as many as could make up the quorum; then copies go out through the
        quorum driver, which returns as soon as enough nodes hold them (the other copies
        finish on their own)."""
        needed = ack_quorum - len(self.holders(first, last, nodes))
        unknown = [n for n in nodes if n not in self.answers]
        if needed > 0 and unknown:
            with contextlib.suppress(QuorumFailed):
                await quorum_call(f"fence ledger {self.info.ledger_id}", unknown,
                                  min(needed, len(unknown)), self._learn,
                                  self.pool.call_timeout_s)
        held = set(self.holders(first, last, nodes))
        needed = ack_quorum - len(held)
        targets = [n for n in nodes if n not in held]
        if needed <= 0:
            return True
        if len(targets) < needed:
            return False
        try:
            await quorum_call(f"re-replicate ledger {self.info.ledger_id}", targets, needed,
                              lambda node: self._bring_up(node, first, last, member_of),
                              self.pool.call_timeout_s)
        except QuorumFailed as exc:
            log.warning("recovery of ledger %d: %s", self.info.ledger_id, exc.message)
            return len(self.holders(first, last, nodes)) >= ack_quorum
        return True

    async def make_durable(self, start: int, end: int, spares: Sequence[str],
                           settings: LogSettings) -> m.Fragment | None:
        """Put each fragment's part of the tail ``start..end`` on A of its nodes; the
        fragment of its own that the rest of the tail got, if one part could not be."""
        info, quorum = self.info, settings.ack_quorum
        for index, first, last in m.tail_parts(info, start, end):
            nodes = info.fragments[index].nodes
            if await self.cover(first, last, nodes, quorum, index):
                continue
            later = [n for f in info.fragments[index:] for n in f.nodes]
            candidates = list(dict.fromkeys([*later, *spares]))
            member_of = index if first > info.fragments[index].first_entry else index - 1
            if await self.cover(first, end, candidates, quorum, member_of):
                moved = m.recovery_nodes(self.holders(first, end, candidates), settings)
                log.warning("recovery of ledger %d: entries %d..%d on %s (a new fragment)",
                            info.ledger_id, first, end, ",".join(moved))
                return m.Fragment(first, moved)
            holders = self.holders(first, end)
            raise NotEnoughStorageNodes(
                f"recovery of ledger {info.ledger_id}: its entries {first}..{end} are on "
                f"{len(holders)} node(s) ({','.join(holders) or 'none'}) and no other node "
                f"could take them; the ack quorum is {quorum}")
        return None

    async def available_end(self, start: int, end: int, ack_quorum: int) -> int:
        """``end``, or the entry before the first of the tail that no node answering
        holds, when enough nodes of its fragment answered without it that it was never
        acknowledged (nor, acknowledgements coming in order, any after it)."""
        for index, first, last in m.tail_parts(self.info, start, end):
            fragment = self.info.fragments[index]
            await self.learn(fragment.nodes,
                             m.recovery_answers_needed(len(fragment.nodes), ack_quorum))
            answers = list(self.answers.values())
            missing = m.first_missing(answers, first, last)
            if missing is None:
                continue
            if not m.never_acknowledged(fragment, answers, missing, ack_quorum):
                raise NotEnoughStorageNodes(
                    f"recovery of ledger {self.info.ledger_id}: entry {missing} is on no "
                    "node that answers, and too few answered to rule out that it was "
                    "acknowledged")
            return missing - 1
        return end

    async def learn(self, nodes: Sequence[str], count: int) -> None:
        """Fence the nodes not heard from until ``count`` of ``nodes`` answered (or no
        more answer within the call timeout)."""
        unknown = [n for n in nodes if n not in self.answers]
        needed = count - (len(nodes) - len(unknown))
        if needed > 0 and unknown:
            with contextlib.suppress(QuorumFailed):
                await quorum_call(f"fence ledger {self.info.ledger_id}", unknown,
                                  min(needed, len(unknown)), self._learn,
                                  self.pool.call_timeout_s)

    async def _learn(self, node: str) -> None:
        self.answers[node] = await fence(self.pool, self.info.ledger_id, node)

    async def _bring_up(self, node: str, first: int, last: int, member_of: int | None
                        ) -> None:
        if node not in self.answers:
            await self._learn(node)
        answer = self.answers[node]
        holders = [self.answers[h] for h in self.holders(first, last)]
        copy = m.tail_copy(self.info, answer, first, last, holders, member_of)
        if copy is None:
            if not m.holds_through(answer, first, last):
                raise StorageError(f"{node} cannot take entries {first}..{last} of ledger "
                                   f"{self.info.ledger_id}")
            return
        await _copy_from_any(self.pool, self.info.ledger_id, copy)
        self.answers[node] = m.NodeEnd(node, max(answer.last_entry, last), answer.lac,
                                       answer.first_entry if answer.exists else copy.first)
        log.info("recovery of ledger %d: entries %d..%d copied to %s",
                 self.info.ledger_id, copy.first, copy.last, node)


async def _copy_from_any(pool: NodePool, ledger_id: int, copy: m.TailCopy) -> None:
    failures = []
    for source in copy.sources:
        try:
            await copy_entries(pool, ledger_id, source, copy.target, copy.first, copy.last)
            return
        except XdfsError as exc:
            failures.append(f"from {source}: {exc.message}")
    raise StorageError(f"copy of ledger {ledger_id} entries {copy.first}..{copy.last} to "
                       f"{copy.target} failed ({'; '.join(failures)})")


async def copy_entries(pool: NodePool, ledger_id: int, source: str, target: str, first: int,
                last: int) -> None:
    """Entries ``first..last`` of a ledger from ``source`` to ``target`` (recovery adds:
    they pass the fence)."""
    entry = first
    while entry <= last:
        got = await pool.node(source).call(lp.READ_ENTRIES, lp.ReadEntriesRequest(
            ledger_id, entry, last - entry + 1, 4 * 1024 * 1024))
        if got.count == 0:
            raise StorageError(f"{source} has no entry {entry} of ledger {ledger_id}")
        await pool.node(target).call(lp.ADD_ENTRIES, lp.AddEntriesRequest(
            ledger_id, entry, got.count, got.entries, -1, recovery=True))
        entry += got.count


class LogWriter:
    def __init__(self, store: AsyncMeta, pool: NodePool, storage_nodes: Sequence[str],
                 name: str, writer_id: str, add_timeout_s: float) -> None:
        self.store = store
        self.pool = pool
        self.storage_nodes = list(storage_nodes)
        self.name = name
        self.writer_id = writer_id
        self.add_timeout_s = add_timeout_s
        self.epoch = 0
        self.meta: m.LogMeta | None = None
        self.ledger_id = 0
        self.write_set: list[str] = []
        self.next_entry = 0
        self.lac = -1
        self.ledger_bytes = 0
        self.ledger_started = 0.0
        self.fenced: LogFenced | None = None
        self._broken: XdfsError | None = None
        #: Each ledger this writer writes is a generation; a broken one keeps its error, so
        #: an append still waiting on it fails even after the writer moved on.
        self._generation = 0
        self._errors: dict[int, XdfsError] = {}
        self._acked: set[int] = set()
        self._lac_moved = asyncio.Event()
        self._assign = asyncio.Lock()
        self._background: set[asyncio.Future[None]] = set()

    @property
    def settings(self) -> LogSettings:
        assert self.meta is not None
        return self.meta.settings

    # --- taking the log over ----------------------------------------------------------

    async def open(self, *, opened: bool = False) -> None:
        """Take the log over (``opened``: for a caller's ``open_writer``, whose epoch then
        fences appends under older ones)."""
        fence: list[int] = []

        def take_over(meta: m.LogMeta) -> m.LogMeta:
            fresh, unclosed = m.open_writer(meta, self.writer_id, opened=opened)
            fence[:] = unclosed
            return fresh

        meta = await self.store.update(self.name, take_over)
        self.epoch = meta.writer_epoch
        for ledger_id in fence:
            meta = await self._recover(m.ledger(meta, ledger_id), meta.settings)
        self.meta = meta
        await self._new_ledger()
        log.info("writer %s of log %s: epoch %d, ledger %d on %s", self.writer_id, self.name,
                 self.epoch, self.ledger_id, ",".join(self.write_set))

    async def _recover(self, info: m.LedgerInfo, settings: LogSettings) -> m.LogMeta:
        """Recover a ledger of the previous writer and close it at its end."""
        end, moved = await recover_ledger(self.pool, info, settings, self.storage_nodes)
        if moved is not None:
            await self._cas(lambda x: m.change_ensemble(
                x, self.epoch, info.ledger_id, moved.first_entry, moved.nodes, recovery=True))
        return await self._close(info.ledger_id, end)

    async def _close(self, ledger_id: int, last: int) -> m.LogMeta:
        return await self._cas(lambda x: m.close_ledger(x, self.epoch, ledger_id, last))

    async def _cas(self, change: Callable[[m.LogMeta], m.LogMeta]) -> m.LogMeta:
        try:
            self.meta = await self.store.update(self.name, change)
        except LogFenced as exc:
            self.fenced = exc
            raise
        return self.meta

    async def _new_ledger(self) -> None:
        settings = self.settings
        live = await self.pool.live(self.storage_nodes)
        ledger_id = await self.store.new_ledger_id()
        nodes = m.choose_ensemble(live, settings, start=ledger_id)
        await self._cas(lambda x: m.add_ledger(x, self.epoch, ledger_id, nodes,
                                               int(time.time() * 1000)))
        self.ledger_id = ledger_id
        self.write_set = nodes
        self.next_entry = 0
        self.lac = -1
        self.ledger_bytes = 0
        self.ledger_started = time.monotonic()
        self._acked.clear()
        self._generation += 1

    # --- appending ----------------------------------------------------------------------

    async def append(self, record: Record, epoch: int = m.NO_WRITER) -> Lsn:
        return (await self.append_batch([record], epoch))[0]

    @property
    def opened_epoch(self) -> int:
        return self.meta.opened_epoch if self.meta is not None else m.NO_WRITER

    async def append_batch(self, records: list[Record], epoch: int = m.NO_WRITER
                           ) -> list[Lsn]:
        """Append ``records`` as one entry under the caller's writer ``epoch`` (checked
        with the entry's assignment: no append of a fenced epoch gets an entry)."""
        payload = encode_entry(records)
        async with self._assign:
            await self._ready()
            assert self.meta is not None
            m.check_append_epoch(self.meta, epoch)
            if self._should_rotate():
                await self._rotate()
            ledger_id, entry, generation = self.ledger_id, self.next_entry, self._generation
            self.next_entry += 1
            self.ledger_bytes += len(payload)
            frames, count = frame_entries(entry, [payload])
            request = lp.AddEntriesRequest(ledger_id, entry, count, frames, self.lac)
            sending = asyncio.ensure_future(self._send(request, list(self.write_set)))
            await asyncio.sleep(0)  # its node tasks are created (and ordered) before the next
        await sending
        await self._confirmed(generation, entry)
        return [Lsn(ledger_id, entry, i) for i in range(len(records))]

    def changed(self) -> asyncio.Event:
        """Set when the LAC next moves (or the writer breaks): tailing readers wait on it."""
        return self._lac_moved

    async def _ready(self) -> None:
        if self.fenced is not None:
            raise LogFenced(self.fenced.message)
        if self._broken is not None or self.meta is None:
            self._broken = None
            await self.open()

    def _should_rotate(self) -> bool:
        return m.should_rotate(self.next_entry, self.ledger_bytes,
                               time.monotonic() - self.ledger_started, self.settings)

    async def _rotate(self) -> None:
        """Close the full ledger at its last entry, once all of it is acknowledged."""
        await self._confirmed(self._generation, self.next_entry - 1)
        await self._close(self.ledger_id, self.next_entry - 1)
        await self._new_ledger()

    async def _send(self, request: lp.AddEntriesRequest, nodes: list[str]) -> None:
        settings = self.settings

        def add(node: LedgerNode) -> asyncio.Future[int]:
            return asyncio.ensure_future(node.add(request, self.add_timeout_s))

        def failed(node: str, error: BaseException) -> None:
            # The node leaves the write set: it would refuse the next entries out of order.
            if not isinstance(error, LedgerFenced):
                task = asyncio.ensure_future(self._drop(request.ledger_id, node))
                self._background.add(task)
                task.add_done_callback(self._background.discard)

        try:
            await self.pool.quorum(
                f"append to log {self.name}", nodes, settings.ack_quorum, add,
                self.add_timeout_s, on_failure=failed)
        except LogFenced as exc:
            self._fail(exc, fenced=True)
            raise
        except XdfsError as exc:
            self._fail(exc)
            raise
        self._acked.add(request.first_entry)
        while self.lac + 1 in self._acked:
            self._acked.discard(self.lac + 1)
            self.lac += 1
        self._lac_moved.set()
        self._lac_moved = asyncio.Event()

    def _fail(self, error: XdfsError, *, fenced: bool = False) -> None:
        if fenced:
            self.fenced = error if isinstance(error, LogFenced) else LogFenced(str(error))
        self._broken = error
        self._errors[self._generation] = error
        self._lac_moved.set()
        self._lac_moved = asyncio.Event()

    async def _confirmed(self, generation: int, entry: int) -> None:
        while True:
            error = self._errors.get(generation)
            if error is not None:
                raise error
            if self._generation != generation or self.lac >= entry:
                return  # a ledger is left (rotated) only once all of it is acknowledged
            await self._lac_moved.wait()

    async def _drop(self, ledger_id: int, failed: str) -> None:
        """Ensemble change: ``failed`` leaves the open ledger's write set (replaced by a
        spare live node when there is one) from the next entry on."""
        async with self._assign:
            if self.ledger_id != ledger_id or failed not in self.write_set:
                return
            remaining = [n for n in self.write_set if n != failed]
            spares = await self.pool.live(
                n for n in self.storage_nodes if n not in self.write_set)
            nodes = remaining + spares[:1]
            first = self.next_entry
            try:
                await self._cas(lambda x: m.change_ensemble(x, self.epoch, ledger_id, first,
                                                            nodes))
            except XdfsError as exc:
                self._fail(exc, fenced=isinstance(exc, LogFenced))
                return
            self.write_set = nodes
            log.warning("log %s ledger %d: %s left the ensemble at entry %d (now %s)",
                        self.name, ledger_id, failed, first, ",".join(nodes))

    async def close(self) -> None:
        """Close the open ledger at its acknowledged end (the writer can be dropped after)."""
        async with self._assign:
            if self.meta is None or self.fenced is not None or self._broken is not None:
                return
            await self._confirmed(self._generation, self.next_entry - 1)
            await self._close(self.ledger_id, self.next_entry - 1)
            self.meta = None
