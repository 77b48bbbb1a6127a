"""The one writer of a quorum journal (HDFS's QuorumJournalManager, seed 001, HDFS-3077).

Becoming the writer (:meth:`QuorumJournalWriter.become_writer`):

1. ``get_journal_state`` on a majority: every node formatted for this namespace;
2. ``new_epoch(e)`` on a majority, ``e`` one above every promise heard: from then on those
   nodes refuse any older writer (:class:`~xdfs.errors.Fenced`), paused or not;
3. the newest segment is recovered: ``prepare_recovery`` on a majority, the winning copy
   chosen by :func:`~xdfs.quorum.recovery.choose_recovery_source` and read from its node,
   ``accept_recovery`` of that copy on the nodes that prepared, then
   ``finalize_log_segment``. Its end is the journal's end: every txid ever acknowledged is
   at or below it.

Writing: ``start_segment`` goes to every node and the ones that accepted are *in sync*;
each batch (``journal``) goes to the in-sync nodes and succeeds once a majority of *all*
nodes stored it durably. A node that fails a call is out of sync until the next segment
(it rejoins there: HDFS does the same), and so is one that lags: a batch it has still not
answered ``lag_max_s`` after it was sent (HDFS bounds the queued bytes instead), so a
slow or hung disk on one node costs the writer one flag, never a wait per batch. Fewer
in-sync nodes than a majority, a batch without a majority within ``write_timeout_s``, or
any node answering Fenced: the writer fails for good -- it never acknowledges an edit
that a later writer could lose, and its owner (a NameNode of an HA pair goes back to
standby, a lone one stops) drops it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from xdfs.errors import (
    Fenced,
    JournalOutOfSync,
    NotFormatted,
    StorageError,
    WrongCluster,
    XdfsError,
)
from xdfs.protocol import journal as j
from xdfs.quorum.calls import QuorumCall, majority
from xdfs.quorum.channel import JournalChannel
from xdfs.quorum.fanout import QuorumFailed, quorum_call
from xdfs.quorum.reader import read_all
from xdfs.quorum.recovery import choose_recovery_source, next_epoch

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class WriterSettings:
    journal_id: str
    namespace: j.JournalNamespace
    #: A batch must be stored by a majority within this long (HDFS: 20 s).
    write_timeout_s: float = 20.0
    #: Epoch, recovery and segment calls wait this long for their majority.
    call_timeout_s: float = 20.0
    #: While no batch is written, the committed txid reaches the nodes after this long
    #: (so tailing readers see the last batch), and every node hears from the writer at
    #: least every ``heartbeat_interval_s``.
    commit_notify_s: float = 0.02
    heartbeat_interval_s: float = 1.0
    #: A node with a batch unanswered this long after it was sent is out of sync.
    lag_max_s: float = 2.0
    #: Bytes per read while copying the chosen segment during recovery.
    read_batch_bytes: int = 1024 * 1024


class QuorumJournalWriter:
    def __init__(
        self,
        channels: Sequence[JournalChannel],
        settings: WriterSettings,
        *,
        on_fatal: Callable[[XdfsError], None] | None = None,
    ) -> None:
        assert channels, "a quorum journal needs at least one node"
        self.channels: Mapping[str, JournalChannel] = {c.name: c for c in channels}
        assert len(self.channels) == len(channels), "duplicate journal node"
        self.settings = settings
        self.needed = majority(len(channels))
        self.on_fatal = on_fatal
        self.epoch = 0
        self.committed_txid = 0
        self.in_sync: set[str] = set()
        self.segment_start: int | None = None
        self.failure: XdfsError | None = None
        self._last_write_s = 0.0
        #: Per node, when each of its unanswered batches was sent (oldest first).
        self._unanswered: dict[str, collections.deque[float]] = {
            name: collections.deque() for name in self.channels}
        self._notify = asyncio.Event()
        self._heartbeats: asyncio.Task[None] | None = None

    @property
    def journal_id(self) -> str:
        return self.settings.journal_id

    def _req(self) -> j.RequestInfo:
        return j.RequestInfo(self.journal_id, self.epoch, self.committed_txid)

    # -- quorum calls ---------------------------------------------------------------------

    async def _quorum(
        self,
        what: str,
        start: Callable[[JournalChannel], Awaitable[T]],
        *,
        nodes: Sequence[str] | None = None,
        needed: int | None = None,
        timeout_s: float | None = None,
    ) -> QuorumCall[T]:
        """``start`` on ``nodes`` (default: all); a Fenced answer anywhere is fatal."""
        names = list(self.channels) if nodes is None else list(nodes)
        try:
            call = await quorum_call(
                f"{what} on journal {self.journal_id}", names,
                self.needed if needed is None else needed,
                lambda name: start(self.channels[name]),
                self.settings.call_timeout_s if timeout_s is None else timeout_s,
                on_failure=self._on_failure,
            )
        except QuorumFailed:
            self._check_usable()  # fenced: that is the reason to give
            raise
        self._check_usable()
        return call

    def _on_failure(self, node: str, error: BaseException) -> None:
        if node in self.in_sync:
            self.in_sync.discard(node)
            log.warning("journal node %s is out of sync until the next segment: %s",
                        node, error)
        if isinstance(error, Fenced):
            self._fail(Fenced(
                f"journal {self.journal_id}: node {node} promised a newer writer than "
                f"epoch {self.epoch}: {error.message}"
            ))

    def _fail(self, error: XdfsError) -> None:
        if self.failure is None:
            self.failure = error
            log.critical("quorum journal writer stops: %s", error.message)
            if self.on_fatal is not None:
                self.on_fatal(error)

    def _check_usable(self) -> None:
        if self.failure is not None:
            raise self.failure

    # -- setup ----------------------------------------------------------------------------

    async def format(self, *, force: bool = False) -> None:
        """Format the journal on every node (all of them must answer)."""
        request = j.FormatRequest(self.journal_id, self.settings.namespace, force,
                                  sorted(self.channels))
        await self._quorum("format", lambda c: c.format_journal(request),
                           needed=len(self.channels))

    async def become_writer(self) -> int | None:
        """Take a new epoch and recover the newest segment; returns the journal's last
        txid (None when it holds no segment at all)."""
        states = await self._quorum("get_journal_state",
                                    lambda c: c.get_journal_state(self.journal_id))
        for node, state in sorted(states.successes.items()):
            self._check_namespace(node, state)
        epoch = next_epoch(s.promised_epoch for s in states.successes.values())
        request = j.NewEpochRequest(self.journal_id, self.settings.namespace, epoch)
        answers = await self._quorum("new_epoch", lambda c: c.new_epoch(request))
        self.epoch = epoch
        newest = max(a.last_segment_txid for a in answers.successes.values())
        log.info("journal %s: writer epoch %d on %s", self.journal_id, epoch,
                 ", ".join(sorted(answers.successes)))
        if not newest:
            return None
        end = await self._recover(newest)
        self.committed_txid = max(self.committed_txid, end)
        return end

    def _check_namespace(self, node: str, state: j.JournalState) -> None:
        if not state.formatted:
            raise StorageError(
                f"journal {self.journal_id} is not formatted on {node} "
                "(xdfs namenode -initializeSharedEdits formats it)"
            )
        if state.namespace != self.settings.namespace:
            raise WrongCluster(
                f"journal {self.journal_id} on {node} holds namespace {state.namespace}, "
                f"this writer's is {self.settings.namespace}"
            )

    async def _recover(self, segment_txid: int) -> int:
        request = j.PrepareRecoveryRequest(self._req(), segment_txid)
        prepared = await self._quorum("prepare_recovery", lambda c: c.prepare_recovery(request))
        chosen = choose_recovery_source(prepared.successes)
        if chosen is None:
            log.info("journal %s: segment %d holds no record anywhere: nothing to recover",
                     self.journal_id, segment_txid)
            return segment_txid - 1
        source, segment = chosen
        records, layout_version = await read_all(
            [self.channels[source]], self.journal_id, segment.start_txid, segment.end_txid,
            epoch=self.epoch, batch_bytes=self.settings.read_batch_bytes,
        )
        accept = j.AcceptRecoveryRequest(self._req(), segment, layout_version)
        await self._quorum("accept_recovery", lambda c: c.accept_recovery(accept, records),
                           nodes=sorted(prepared.successes))
        self.committed_txid = max(self.committed_txid, segment.end_txid)
        finalize = j.FinalizeRequest(self._req(), segment.start_txid, segment.end_txid)
        await self._quorum("finalize_log_segment", lambda c: c.finalize_log_segment(finalize))
        log.info("journal %s: recovered segment %d-%d from %s", self.journal_id,
                 segment.start_txid, segment.end_txid, source)
        return segment.end_txid

    # -- writing --------------------------------------------------------------------------

    async def start_segment(self, first_txid: int, layout_version: int) -> None:
        self._check_usable()
        request = j.StartSegmentRequest(self._req(), first_txid, layout_version,
                                        sorted(self.channels))
        # Every node is in sync from here unless a call of it fails (even a late failure
        # of this very call): a node whose start is still under way gets the segment's
        # batches queued behind it, in order, on its channel.
        self.in_sync = set(self.channels)
        await self._quorum("start_log_segment", lambda c: self._start_on(c, request))
        self.segment_start = first_txid
        if self._heartbeats is None:
            self._heartbeats = asyncio.get_running_loop().create_task(
                self._heartbeat_loop(), name=f"journal {self.journal_id} heartbeats")

    async def _start_on(self, channel: JournalChannel, request: j.StartSegmentRequest) -> None:
        """Start the segment on one node; a node with no journal at all (a replaced disk)
        is formatted (its syncer then fetches the older segments)."""
        try:
            await channel.start_log_segment(request)
        except NotFormatted:
            # Not started again right here: batches of this segment may already be queued
            # on the channel ahead of a second start. It joins at the next segment.
            await channel.format_journal(j.FormatRequest(
                self.journal_id, self.settings.namespace, force=False,
                nodes=sorted(self.channels)))
            log.warning("journal %s: node %s held no journal; formatted it, it joins at "
                        "the next segment", self.journal_id, channel.name)
            raise JournalOutOfSync(f"{channel.name}: formatted just now") from None

    async def write(self, records: bytes, first_txid: int, last_txid: int) -> None:
        """Store a batch on a majority; returns only once it is durable there."""
        self._check_usable()
        assert self.segment_start is not None, "no open segment"
        if len(self.in_sync) < self.needed:
            error = QuorumFailed(
                f"journal {self.journal_id}: only {len(self.in_sync)} node(s) in sync "
                f"({', '.join(sorted(self.in_sync)) or 'none'}), {self.needed} needed",
                QuorumCall.of(self.channels, self.needed),
            )
            self._fail(error)
            raise error
        request = j.JournalRecordsRequest(
            self._req(), self.segment_start, first_txid, last_txid - first_txid + 1, records
        )
        self._leave_lagging()
        try:
            await self._quorum("journal", lambda c: self._journal_on(c, request),
                               nodes=sorted(self.in_sync),
                               timeout_s=self.settings.write_timeout_s)
        except QuorumFailed as exc:
            self._fail(exc)
            raise
        self.committed_txid = last_txid
        self._last_write_s = asyncio.get_running_loop().time()
        self._notify.set()

    def _leave_lagging(self) -> None:
        """Out of sync: every in-sync node whose oldest unanswered batch was sent more than
        ``lag_max_s`` ago (the majority answered every batch since, or this one would have
        failed: it waits on the majority, never on that node)."""
        now = asyncio.get_running_loop().time()
        for name in sorted(self.in_sync):
            sent = self._unanswered[name]
            if sent and now - sent[0] > self.settings.lag_max_s:
                self._on_failure(name, JournalOutOfSync(
                    f"{name}: a batch sent {now - sent[0]:.1f} s ago is not answered yet "
                    f"(namenode.journal_lag_max_s is {self.settings.lag_max_s:g} s)"))

    async def _journal_on(self, channel: JournalChannel,
                          request: j.JournalRecordsRequest) -> None:
        sent = self._unanswered[channel.name]
        at = asyncio.get_running_loop().time()
        sent.append(at)
        try:
            await channel.journal(request)
        finally:
            sent.remove(at)  # (an equal time of another batch is as good)

    async def finalize_segment(self, start_txid: int, end_txid: int) -> None:
        self._check_usable()
        request = j.FinalizeRequest(self._req(), start_txid, end_txid)
        try:
            await self._quorum("finalize_log_segment",
                               lambda c: c.finalize_log_segment(request),
                               nodes=sorted(self.in_sync))
        except QuorumFailed as exc:
            self._fail(exc)
            raise
        self.segment_start = None

    async def purge_logs_older_than(self, min_txid: int) -> None:
        """Best effort on every node (a node that misses it purges at the next one)."""
        self._check_usable()
        request = j.PurgeRequest(self._req(), min_txid)
        await self._quorum("purge_logs_older_than",
                           lambda c: c.purge_logs_older_than(request), needed=0)

    # -- heartbeats: the committed txid to idle nodes, liveness -----------------------------

    async def _heartbeat_loop(self) -> None:
        while self.failure is None:
            self._notify.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.heartbeat_interval_s):
                    await self._notify.wait()
            await self._until_idle()
            if self.failure is None and self.segment_start is not None:
                await self._send_heartbeat(j.RequestOnly(self._req()))

    async def _until_idle(self) -> None:
        """Wait until no batch was written for ``commit_notify_s``: a stream of batches
        carries the committed txid by itself."""
        loop = asyncio.get_running_loop()
        quiet_s = self.settings.commit_notify_s
        while (idle_s := loop.time() - self._last_write_s) < quiet_s:  # noqa: ASYNC110
            await asyncio.sleep(quiet_s - idle_s)

    async def _send_heartbeat(self, request: j.RequestOnly) -> None:
        """To the in-sync nodes, waiting for none (a Fenced answer is still fatal)."""
        with contextlib.suppress(XdfsError):
            await self._quorum("heartbeat", lambda c: c.heartbeat(request),
                               nodes=sorted(self.in_sync), needed=0)

    async def close(self) -> None:
        """Stop the heartbeats and close the channels (finalize first, for a clean end)."""
        if self._heartbeats is not None:
            self._heartbeats.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeats
            self._heartbeats = None
        for channel in self.channels.values():
            with contextlib.suppress(Exception):
                await channel.close()
