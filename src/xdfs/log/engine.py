"""What one log service instance does for its callers (asyncio; seeds 002 and 004).

A log's writer lives in the instance holding the log's *writer lock*, an ephemeral znode
``<root>/writers/<name>`` naming that instance's address: appends, reads and truncations of
the log are served there (another instance answers :class:`~xdfs.errors.NotLogWriter`
naming the holder, and the client goes there). So a read knows the open ledger's exact
last-add-confirmed: it is linearizable, never older than an acknowledged append. When the
holder's session ends (it crashed), the next instance asked takes the lock and opens a new
writer, which fences the old one and recovers the open ledger.

Truncation records the intent (``truncated_lsn``, by CAS); :meth:`LogEngine.reclaim`
deletes, in the background, the closed ledgers wholly below both the truncation point and
every registered reader, on every node first and then from the metadata, so a crash in
between leaves ledgers that are below the truncation point (never read) and are deleted
again on the next pass: the two points stay consistent across restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TypeVar

from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState

from xdfs.common.faults import FAULTS, fault_point
from xdfs.editlog.framing import Frame, parse_frame
from xdfs.errors import (
    CorruptReplica,
    LogFenced,
    NotLogWriter,
    StorageError,
    XdfsError,
)
from xdfs.log import meta as m
from xdfs.log.nodes import NodePool
from xdfs.log.record import decode_entry
from xdfs.log.writer import AsyncMeta, LogWriter
from xdfs.log.zkmeta import MetaStore, check_log_name, guarded
from xdfs.protocol import ledger as lp
from xdfs.protocol.log import LogSettings, Lsn, ReadRecord, Record

log = logging.getLogger(__name__)

FAULTS.register("logservice.reclaim_deleted",
                "reclaimed ledgers are deleted on the storage nodes, still in the metadata")

T = TypeVar("T")

#: What _try_lock answers for a lock held by this address's previous run.
STALE = "(stale)"
_STALE_POLL_S = 0.2


class LogEngine:
    def __init__(self, store: MetaStore, pool: NodePool, storage_nodes: list[str],
                 address: str, defaults: LogSettings, add_timeout_s: float,
                 lock_wait_s: float = 30.0, keeper_deletes: bool = False) -> None:
        self.store = store
        self.meta = AsyncMeta(store)
        self.pool = pool
        self.storage_nodes = storage_nodes
        self.address = address
        self.defaults = defaults
        self.add_timeout_s = add_timeout_s
        #: How long a lock left by our previous run is waited out (its session timeout).
        self.lock_wait_s = lock_wait_s
        #: The storage nodes send heartbeats to the keeper, which deletes the copies a
        #: node held while it was down: a ledger deletion need not wait for every node.
        self.keeper_deletes = keeper_deletes
        self.writers: dict[str, LogWriter] = {}
        self._opening: dict[str, asyncio.Lock] = {}

    def _thread(self, call: Callable[[], T]) -> asyncio.Future[T]:
        return asyncio.get_running_loop().run_in_executor(None, guarded, call)

    def watch_session(self) -> None:
        """When the ZooKeeper session is lost, so are our writer locks: every writer of
        this instance is dropped (a later call takes the lock again and re-opens, fencing
        whoever wrote meanwhile)."""
        loop = asyncio.get_running_loop()

        def changed(state: str) -> None:
            if state == KazooState.LOST:
                loop.call_soon_threadsafe(self._session_lost)

        self.store.zk.add_listener(changed)

    def _session_lost(self) -> None:
        for name, writer in self.writers.items():
            log.warning("ZooKeeper session lost: dropping the writer of %s", name)
            writer.fenced = LogFenced(f"log {name!r}: this instance lost its ZooKeeper session")
        self.writers.clear()

    # --- logs -------------------------------------------------------------------------

    async def create(self, name: str, settings: LogSettings | None, now_ms: int) -> m.LogMeta:
        meta = m.LogMeta(check_log_name(name), m.check_settings(settings or self.defaults),
                         created_ms=now_ms)
        await self._thread(lambda: self.store.create(meta))
        return meta

    async def stat(self, name: str) -> tuple[m.LogMeta, Lsn]:
        meta = await self.meta.get(name)
        writer = self.writers.get(name)
        lac = writer.lac if writer is not None and writer.meta is not None else None
        return meta, m.end_lsn(meta, lac)

    async def names(self) -> list[str]:
        return await self._thread(self.store.names)

    async def delete(self, name: str) -> None:
        meta = await self.meta.get(name)
        writer = self.writers.pop(name, None)
        if writer is not None:
            writer.fenced = LogFenced(f"log {name!r} was deleted")
        for info in meta.ledgers:
            await self._delete_ledger(info)
        await self._thread(lambda: self.store.delete(name))
        await self._thread(lambda: self._release(name))

    # --- the writer lock ----------------------------------------------------------------

    def _lock_path(self, name: str) -> str:
        return f"{self.store.root}/writers/{check_log_name(name)}"

    def _try_lock(self, name: str) -> str:
        """Take the writer lock of ``name``, or name who holds it (our address: we do)."""
        zk = self.store.zk
        path = self._lock_path(name)
        zk.ensure_path(f"{self.store.root}/writers")
        try:
            zk.create(path, self.address.encode(), ephemeral=True)
            return self.address
        except NodeExistsError:
            try:
                data, stat = zk.get(path)
            except NoNodeError:
                return self._try_lock(name)
            if stat.ephemeralOwner == zk.client_id[0]:
                return self.address
            holder = str(data.decode())
            # Our own address under another session: this instance's previous run (it
            # crashed and came back on the same address); its lock goes with its session.
            return STALE if holder == self.address else holder

    async def _take_lock(self, name: str) -> str:
        """:meth:`_try_lock`, waiting out a lock left by this instance's previous run."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.lock_wait_s
        while True:
            holder = await self._thread(lambda: self._try_lock(name))
            if holder != STALE:
                return holder
            if loop.time() > deadline:
                raise NotLogWriter(f"writer at {self.address} (a previous run) still holds "
                                   f"log {name!r}: its ZooKeeper session has not expired yet")
            await asyncio.sleep(_STALE_POLL_S)

    def _release(self, name: str) -> None:
        try:
            _, stat = self.store.zk.get(self._lock_path(name))
            if stat.ephemeralOwner == self.store.zk.client_id[0]:
                self.store.zk.delete(self._lock_path(name), version=stat.version)
        except NoNodeError:
            return

    async def writer(self, name: str, *, opened: bool = False) -> LogWriter:
        """This instance's writer of ``name``, opening it (and taking the lock) if free;
        ``opened``: always a new one, for a caller's ``open_writer``."""
        writer = self.writers.get(name)
        if not opened and writer is not None and writer.fenced is None:
            return writer
        lock = self._opening.setdefault(name, asyncio.Lock())
        async with lock:
            writer = self.writers.get(name)
            if not opened and writer is not None and writer.fenced is None:
                return writer
            holder = await self._take_lock(name)
            if holder != self.address:
                raise NotLogWriter(f"writer at {holder} holds log {name!r}")
            await self.meta.get(name)  # LogNotFound before any writer is made
            old = self.writers.pop(name, None)
            if old is not None and old.fenced is None:
                old.fenced = LogFenced(f"log {name!r}: a new writer was opened")
            writer = LogWriter(self.meta, self.pool, self.storage_nodes, name, self.address,
                               self.add_timeout_s)
            await writer.open(opened=opened)
            self.writers[name] = writer
            return writer

    async def open_writer(self, name: str) -> int:
        """A new writer of ``name`` (seed 002's Open): a new epoch that fences the previous
        writer, recovers its open ledger and fences appends under older epochs; the epoch."""
        return (await self.writer(name, opened=True)).epoch

    # --- records ------------------------------------------------------------------------

    async def append_batch(self, name: str, records: list[Record],
                           epoch: int = m.NO_WRITER) -> list[Lsn]:
        """Append under the caller's writer ``epoch`` (:data:`~xdfs.log.meta.NO_WRITER`:
        a producer's append, to whichever writer is current)."""
        writer = await self.writer(name)
        if epoch not in (m.NO_WRITER, writer.opened_epoch):
            # An epoch this writer does not know of: it may be stale (another instance
            # opened a writer since); the one checked against the metadata decides.
            writer, _ = await self._current_writer(name)
        try:
            return await writer.append_batch(records, epoch)
        except LogFenced:
            if writer.fenced is not None and self.writers.get(name) is writer:
                self.writers.pop(name)  # superseded; a stale epoch leaves the writer be
            raise

    async def read_wait(self, name: str, from_lsn: Lsn, max_bytes: int, wait_s: float,
                        reader: str = "") -> tuple[list[ReadRecord], Lsn]:
        """:meth:`read`, waiting up to ``wait_s`` for an append when nothing is there."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, wait_s)
        while True:
            changed = (await self.writer(name)).changed()
            records, following = await self.read(name, from_lsn, max_bytes, reader)
            if records or loop.time() >= deadline:
                return records, following
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(deadline):
                    await changed.wait()

    async def read(self, name: str, from_lsn: Lsn, max_bytes: int, reader: str = ""
                   ) -> tuple[list[ReadRecord], Lsn]:
        """Records from ``from_lsn``, about ``max_bytes`` of payload (at least one record
        when any is there); and the LSN to read from next. A registered ``reader`` may
        read below the truncation point, from its position on."""
        writer, meta = await self._current_writer(name)
        end = m.end_lsn(meta, writer.lac if writer.meta is not None else None)
        m.check_read_from(meta, from_lsn, end, reader)
        out: list[ReadRecord] = []
        size = 0
        position = from_lsn
        for info in meta.ledgers:
            if info.ledger_id < position.ledger_id:
                continue
            last = info.last_entry if info.state == m.CLOSED else (
                writer.lac if info.ledger_id == writer.ledger_id else -1)
            entry = position.entry_id if info.ledger_id == position.ledger_id else 0
            while entry <= last and size < max_bytes:
                for entry_id, payload in await self._read_entries(info, entry, last,
                                                                  max_bytes - size):
                    batch = decode_entry(payload)
                    for index, record in enumerate(batch):
                        lsn = Lsn(info.ledger_id, entry_id, index)
                        if lsn < position:
                            continue
                        if out and size + len(record.payload) > max_bytes:
                            return out, lsn
                        out.append(ReadRecord(lsn, record))
                        size += len(record.payload)
                    entry = entry_id + 1
                    position = Lsn(info.ledger_id, entry, 0)
            if size >= max_bytes:
                break
        return out, max(position, from_lsn)

    async def _current_writer(self, name: str) -> tuple[LogWriter, m.LogMeta]:
        """Our writer of ``name``, checked against the metadata read now: reads are
        linearizable because the writer knows the open ledger's LAC, but only while it is
        *the* writer. If another one opened the log since (its appends may have been
        acknowledged), ours is fenced, and a new one takes the log back, recovering them."""
        writer = await self.writer(name)
        meta = await self.meta.get(name)
        if meta.writer_epoch == writer.epoch:
            return writer, meta
        writer.fenced = LogFenced(f"log {name!r}: epoch {writer.epoch} superseded by "
                                  f"{meta.writer_epoch}")
        self.writers.pop(name, None)
        writer = await self.writer(name)
        return writer, await self.meta.get(name)

    async def _read_entries(self, info: m.LedgerInfo, entry: int, last: int, max_bytes: int
                            ) -> list[tuple[int, bytes]]:
        failures = []
        for address in info.nodes_of(entry):
            try:
                got = await self.pool.node(address).call(lp.READ_ENTRIES, lp.ReadEntriesRequest(
                    info.ledger_id, entry, last - entry + 1, max(1, max_bytes)))
            except XdfsError as exc:
                failures.append(f"{address}: {exc.message}")
                continue
            if got.count == 0:
                failures.append(f"{address}: does not hold entry {entry}")
                continue
            return _unframe(got, address)
        raise StorageError(f"ledger {info.ledger_id} entry {entry}: no copy could be read "
                           f"({'; '.join(failures)})")

    # --- truncation -----------------------------------------------------------------------

    async def truncate(self, name: str, lsn: Lsn) -> Lsn:
        writer, meta = await self._current_writer(name)
        end = m.end_lsn(meta, writer.lac)
        fresh = await self.meta.update(name, lambda x: m.truncate(x, lsn, end))
        return fresh.truncated_lsn

    async def register_reader(self, name: str, reader: str, position: Lsn | None) -> None:
        if position is None:
            await self.meta.update(name, lambda x: m.unregister_reader(x, reader))
        else:
            await self.meta.update(name, lambda x: m.register_reader(x, reader, position))

    async def reclaim(self, name: str) -> list[int]:
        """Delete the ledgers nothing needs any more; their ids."""
        meta = await self.meta.get(name)
        gone = m.reclaimable(meta)
        left = {info.ledger_id: await self._delete_ledger(info) for info in gone}
        if gone:
            fault_point("logservice.reclaim_deleted")
            ids = [x.ledger_id for x in gone]
            await self.meta.update(name, lambda x: m.drop_ledgers(x, ids, left))
        return [x.ledger_id for x in gone]

    async def _delete_ledger(self, info: m.LedgerInfo) -> tuple[str, ...]:
        """On every node that may hold it; the nodes that may still hold it. Without the
        keeper's heartbeats all must answer (a node down keeps the ledger in the
        metadata, to be deleted again later); with them, a node that fails is left to the
        keeper, who tells it to delete the ledger once the log's released records name it
        there (:func:`xdfs.log.meta.drop_ledgers` writes them)."""
        left = []
        for address in info.all_nodes():
            try:
                await self.pool.node(address).call(lp.DELETE_LEDGER,
                                                   lp.LedgerIdRequest(info.ledger_id))
            except XdfsError as exc:
                if not self.keeper_deletes:
                    raise
                left.append(address)
                log.info("ledger %d stays on %s for the keeper to delete: %s",
                         info.ledger_id, address, exc.message)
        return tuple(left)

    async def tso(self, count: int) -> int:
        return await self._thread(lambda: self.store.tso(count))

    async def close(self) -> None:
        """Stop writing. Open ledgers are left open on purpose: the next writer recovers
        them (that is always safe), and a stop must not wait on ZooKeeper or storage nodes
        that may be gone; the writer locks go with the ZooKeeper session."""
        for name, writer in self.writers.items():
            writer.fenced = LogFenced(f"log {name!r}: the log service instance stopped")
        self.writers.clear()


def _unframe(got: lp.ReadEntriesResponse, address: str) -> list[tuple[int, bytes]]:
    """The entries of a read answer, every frame's CRC checked again (end to end)."""
    out = []
    pos = 0
    for index in range(got.count):
        frame = parse_frame(got.entries, pos)
        if not isinstance(frame, Frame) or frame.txid != got.first_entry + index:
            raise CorruptReplica(f"{address} sent a damaged entry {got.first_entry + index}")
        out.append((frame.txid, bytes(frame.payload(got.entries))))
        pos = frame.end
    return out
