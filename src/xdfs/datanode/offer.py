"""A DataNode's NameNodes: one actor each, and whom to obey (HDFS's BPOfferService).

With one NameNode address (or a NameNode and its backups: one client that moves to the
next address) there is one :class:`~xdfs.datanode.actor.NameNodeActor`. With the two
NameNodes of an HA pair (every address in ``ha.namenodes``) there is one actor per
NameNode, each with its own RPC client: each registers, reports (full, incremental, bad
replicas) and heartbeats to its NameNode on its own, so a dead or paused NameNode delays
nothing of the other's.

Every register and heartbeat answer carries the NameNode's epoch and HA state.
:class:`ActiveChoice` (pure) judges them: an epoch below the watermark (the highest seen,
persisted in the data dir: :mod:`xdfs.datanode.epochs`) is a fenced NameNode, never
obeyed; otherwise the DataNode *believes active* the NameNode that last claimed active at
the highest epoch (one that says standby stops being it). Commands (replicate, delete,
recover, block keys) are carried out only from the believed-active actor; one from
another NameNode is ignored with a log line. A standby sends none anyway.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from xdfs.datanode.epochs import EpochWatermark, Verdict, load_epoch, store_epoch
from xdfs.datanode.transfer import in_thread
from xdfs.errors import Fenced, NotActive, StorageError
from xdfs.protocol.blocks import BlockRecord
from xdfs.protocol.datanode import CommitBlockSyncRequest
from xdfs.protocol.ha import ROLE_STANDBY

if TYPE_CHECKING:
    from xdfs.datanode.actor import NameNodeActor
    from xdfs.datanode.storage import DataStorage

log = logging.getLogger(__name__)


class ActiveChoice:
    """Which NameNode a DataNode obeys (pure): the watermark rule of epochs.py, and among
    NameNodes at or above it, the last that claimed active at the highest epoch."""

    def __init__(self, epochs: EpochWatermark | None = None) -> None:
        self.epochs = epochs or EpochWatermark()
        self.active: str | None = None  # the address believed active
        self.active_epoch = 0

    def judge(self, epoch: int) -> Verdict:
        return self.epochs.judge(epoch)

    def claimed(self, address: str, ha_state: str, epoch: int) -> str | None:
        """A non-stale answer of ``address`` (its epoch made durable when it was newer);
        returns a message when the believed-active NameNode changes."""
        if ha_state == ROLE_STANDBY:
            if self.active != address:
                return None
            self.active = None
            return f"NameNode {address} is standby now: no NameNode believed active"
        if address == self.active:
            self.active_epoch = max(self.active_epoch, epoch)
            return None
        if self.active is not None and epoch <= self.active_epoch:
            return None  # two claims at one epoch cannot both be true: the first stands
        previous = self.active
        self.active, self.active_epoch = address, epoch
        return (f"NameNode {address} is believed active at epoch {epoch}"
                + (f" (was {previous})" if previous else ""))

    def obeys(self, address: str) -> bool:
        return address == self.active


class NameNodeOffer:
    """The actors of one DataNode and the choice they share (module doc)."""

    def __init__(self, storage: DataStorage, on_fatal: Callable[[BaseException], None],
                 actors: list[NameNodeActor], *, ha: bool, shard: int = 0,
                 persist: asyncio.Lock | None = None) -> None:
        self._storage = storage
        #: The shard these NameNodes serve; its block pool keeps their epoch watermark
        #: (each shard's namespace has epochs of its own).
        self.shard = shard
        self._epoch_dir = storage.pool_current(shard)
        self._on_fatal = on_fatal  # stops the DataNode
        self.actors = actors
        self.ha = ha
        self.choice = ActiveChoice()
        #: One write at a time of the data dir's small files (epoch, cluster id): the
        #: actors register and judge answers concurrently (those of every shard: the
        #: DataNode gives its offers one lock, as VERSION is one file).
        self.persist = persist or asyncio.Lock()
        #: Held while a command runs; a heartbeat waits for it to end first, so that what
        #: the command changed is reported before the heartbeat (blocks/failover.py).
        self.commands = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()

    # -- the choice -----------------------------------------------------------------------

    async def run(self) -> None:
        """Load the persisted watermark, then run every actor until cancelled."""
        try:
            self.choice.epochs.raise_to(await in_thread(load_epoch, self._epoch_dir))
        except StorageError as exc:
            self._on_fatal(exc)
            return
        await asyncio.gather(*(actor.run() for actor in self.actors))

    async def judge(self, address: str, ha_state: str, epoch: int) -> None:
        """Judge an answer of ``address`` before anything in it is obeyed: Fenced below the
        watermark; a higher epoch is made durable first. In HA a standby below it is not
        fenced: it has not tailed the newest epoch yet (a failover just happened). It stays
        registered and hears our reports, and it is obeyed in nothing (only the believed
        active is), so it needs no full report once it catches up."""
        epochs = self.choice.epochs
        if self.choice.judge(epoch) is Verdict.STALE:
            if self.ha and ha_state == ROLE_STANDBY:
                return
            raise Fenced(epochs.stale_message(address, epoch))
        async with self.persist:
            if self.choice.judge(epoch) is Verdict.NEWER:
                await in_thread(store_epoch, self._epoch_dir, epoch)
                previous = epochs.highest
                epochs.raise_to(epoch)
                log.info("NameNode %s is at epoch %d (this DataNode had seen %d)",
                         address, epoch, previous)
        message = self.choice.claimed(address, ha_state, epoch)
        if message and self.ha:
            log.info("%s", message)

    def obeys(self, address: str) -> bool:
        """Without HA, the one NameNode (or its backups) is obeyed when not fenced."""
        return not self.ha or self.choice.obeys(address)

    def active_actor(self) -> NameNodeActor | None:
        return next((a for a in self.actors if self.obeys(a.rpc.current_address)), None)

    # -- what every NameNode is told ------------------------------------------------------

    @property
    def registered(self) -> bool:
        return any(actor.registered for actor in self.actors)

    @property
    def full_reports_sent(self) -> int:
        return sum(actor.full_reports_sent for actor in self.actors)

    @property
    def failed_attempts(self) -> int:
        return max(actor.failed_attempts for actor in self.actors)

    async def report_received(self, record: BlockRecord) -> None:
        """The believed-active NameNode hears of the replica before the writer's "ok"
        (its ``complete`` waits for it); the others in the background."""
        waited = [a.report_received(record) for a in self.actors
                  if self.obeys(a.rpc.current_address)]
        for actor in self.actors:
            if not self.obeys(actor.rpc.current_address):
                self._spawn(actor.report_received(record))
        if len(waited) == 1:  # (the usual case: no task for a gather of one)
            await waited[0]
        else:
            await asyncio.gather(*waited)

    def report_bad(self, block_id: int) -> None:
        for actor in self.actors:
            actor.report_bad(block_id)

    def report_soon(self, *, received: Iterable[BlockRecord] = (),
                    rbw: Iterable[BlockRecord] = (), deleted: Iterable[int] = ()) -> None:
        received, rbw, deleted = list(received), list(rbw), list(deleted)
        for actor in self.actors:
            actor.report_soon(received=received, rbw=rbw, deleted=deleted)

    async def commit_block_sync(self, request: CommitBlockSyncRequest) -> None:
        """The end of a block recovery goes to the believed-active NameNode only."""
        actor = self.active_actor()
        if actor is None:
            raise NotActive("no NameNode is believed active: the block recovery is "
                            "committed when the active NameNode asks again")
        await actor.commit_block_sync(request)

    # -- lifecycle ------------------------------------------------------------------------

    def _spawn(self, work: object) -> None:
        assert asyncio.iscoroutine(work)
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for actor in self.actors:
            await actor.close()

    async def close_rpc(self) -> None:
        for actor in self.actors:
            await actor.rpc.close()
