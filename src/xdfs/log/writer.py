"""The one writer of a log (asyncio driver around the rules of :mod:`xdfs.log.meta`).

:meth:`LogWriter.open` takes the log over (seed 002): a new writer epoch by CAS, then the
last two unclosed ledgers are fenced on their storage nodes, their ends recovered from
enough nodes that every acknowledged entry is seen (W - A + 1), entries past some node's
end copied to it, and each ledger closed at its end by CAS; then a fresh ledger is added.
The old writer learns it at its next add (its ledger refuses: LedgerFenced) or metadata
CAS (the epoch moved): either way it gets :class:`~xdfs.errors.LogFenced`.

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


async def recover_ledger(pool: NodePool, info: m.LedgerInfo, ack_quorum: int) -> int:
    """Fence ``info`` on its nodes and make its end durable on an ack quorum; the end."""
    # Only the last fragment's nodes get adds: earlier ones were left by ensemble changes.
    last = info.fragments[-1]
    needed = m.recovery_answers_needed(len(last.nodes), ack_quorum)
    call = await pool.quorum(
        f"fence ledger {info.ledger_id}", last.nodes, needed,
        lambda node: node.call(lp.FENCE_LEDGER, lp.LedgerIdRequest(info.ledger_id)))
    ends = [m.NodeEnd(a, s.last_entry, s.lac) for a, s in call.successes.items()]
    end = m.recovered_end(ends, last.first_entry)
    if end < last.first_entry:
        if len(info.fragments) == 1:
            return end  # -1: an empty ledger
        # No node of the last fragment holds an entry of it (the writer died right after
        # an ensemble change): the end lies in the fragment before, whose nodes may still
        # have taken adds sent before the change; recover that one.
        earlier = msgspec.structs.replace(info, fragments=info.fragments[:-1])
        return await recover_ledger(pool, earlier, ack_quorum)
    holder = max(ends, key=lambda e: e.last_entry).node
    copied = [e.node for e in ends if e.last_entry >= end]
    for short in (e for e in ends if e.last_entry < end):
        try:
            await copy_entries(pool, info.ledger_id, holder, short.node,
                        max(short.last_entry + 1, last.first_entry), end)
            copied.append(short.node)
        except XdfsError as exc:
            log.warning("recovery of ledger %d: copy to %s failed: %s", info.ledger_id,
                        short.node, exc)
    if len(copied) < ack_quorum:
        raise NotEnoughStorageNodes(f"recovery of ledger {info.ledger_id}: its end {end} is on "
                                    f"{len(copied)} node(s), the ack quorum is {ack_quorum}")
    return end


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

    async def open(self) -> None:
        fence: list[int] = []

        def take_over(meta: m.LogMeta) -> m.LogMeta:
            fresh, unclosed = m.open_writer(meta, self.writer_id)
            fence[:] = unclosed
            return fresh

        meta = await self.store.update(self.name, take_over)
        self.epoch = meta.writer_epoch
        for ledger_id in fence:
            info = m.ledger(meta, ledger_id)
            end = await recover_ledger(self.pool, info, meta.settings.ack_quorum)
            meta = await self._close(ledger_id, end)
        self.meta = meta
        await self._new_ledger()
        log.info("writer %s of log %s: epoch %d, ledger %d on %s", self.writer_id, self.name,
                 self.epoch, self.ledger_id, ",".join(self.write_set))

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

    async def append(self, record: Record) -> Lsn:
        return (await self.append_batch([record]))[0]

    async def append_batch(self, records: list[Record]) -> list[Lsn]:
        payload = encode_entry(records)
        async with self._assign:
            await self._ready()
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
