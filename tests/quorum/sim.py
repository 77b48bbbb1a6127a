"""A seeded fault simulator for the quorum journal (in the spirit of HDFS's TestQJMWithFaults).

The real writer (:class:`~xdfs.quorum.writer.QuorumJournalWriter`) talks through
:class:`SimChannel` to real :class:`~xdfs.journal.storage.Journal` objects on real files,
in one asyncio loop; the channel injects, chosen by the seed, at every call:

* ``drop``: the request never arrives (the node is unchanged);
* ``lost``: the node carries the call out, the answer is lost;
* ``crash_before`` / ``crash_after``: the node crashes before or after carrying it out
  (``after``: durable, never answered), and restarts later from its disk;
* ``torn``: a ``journal`` call writes part of its batch, unsynced, and the node crashes
  (its restart must cut the torn tail);
* ``delay``: the call is delivered some loop turns later (a stale writer's call may arrive
  after a newer writer took over);
* ``isolate``: this writer loses the node for its next calls (a partition: a minority
  keeps what the majority never hears of).

The faults are chosen by :class:`xdfs.testing.sim.FaultPlan`. Everything is logical time
(loop turns), never wall-clock sleeps, so a thousand seeds run in seconds and every run of
one seed is the same.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from xdfs.editlog.framing import frame_record
from xdfs.errors import ConnectionLost
from xdfs.journal.storage import Journal
from xdfs.protocol import journal as j
from xdfs.testing import sim

T = TypeVar("T")

JOURNAL_ID = "sim"
NAMESPACE = j.JournalNamespace("CID-sim", 4242)
LAYOUT = 7
FAULTS = ("drop", "lost", "crash_before", "crash_after", "torn", "delay", "isolate")


class SimNode:
    """A JournalNode: a journal on disk that can crash and restart."""

    def __init__(self, name: str, root: Path) -> None:
        self.name = name
        self.root = root
        self.journal: Journal | None = None
        self.restart()

    @property
    def up(self) -> bool:
        return self.journal is not None

    def crash(self) -> None:
        if self.journal is not None:
            self.journal.close()  # the process is gone: its open file with it
        self.journal = None

    def restart(self) -> None:
        self.crash()
        journal = Journal(self.root / JOURNAL_ID, JOURNAL_ID)
        journal.load()
        self.journal = journal

    def tear(self, request: j.JournalRecordsRequest, rng: random.Random) -> None:
        """Append part of the batch to the open segment, unsynced, then crash."""
        assert self.journal is not None
        segment = self.journal._open
        if segment is not None and segment.start == request.segment_txid:
            cut = rng.randrange(1, len(request.records)) if len(request.records) > 1 else 0
            with open(segment.path, "ab") as f:
                f.write(request.records[:cut])
        self.crash()


@dataclass
class FaultPlan(sim.FaultPlan):
    """The generic plan with the quorum journal's faults by default."""

    faults: tuple[str, ...] = FAULTS


@dataclass
class SimChannel:
    """One writer's (or reader's) connection to one node; calls arrive in order."""

    node: SimNode
    plan: FaultPlan
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    restarts: list[asyncio.Task[None]] = field(default_factory=list)
    isolated_calls: int = 0

    @property
    def name(self) -> str:
        return self.node.name

    async def _call(self, run: Callable[[Journal], T],
                    tear: j.JournalRecordsRequest | None = None) -> T:
        async with self.lock:
            fault = self.plan.pick()
            if fault == "torn" and tear is None:
                fault = "crash_before"
            if fault == "delay":
                for _ in range(self.plan.rng.randrange(1, 40)):
                    await asyncio.sleep(0)
            if fault == "isolate":
                self.isolated_calls = self.plan.rng.randrange(1, 30)
            if self.isolated_calls:
                self.isolated_calls -= 1
                raise ConnectionLost(f"{self.name}: partitioned")
            if not self.node.up or fault == "drop":
                raise ConnectionLost(f"{self.name}: unreachable")
            if fault == "crash_before":
                self._crash()
                raise ConnectionLost(f"{self.name}: crashed")
            if fault == "torn":
                assert tear is not None
                self.node.tear(tear, self.plan.rng)
                self._schedule_restart()
                raise ConnectionLost(f"{self.name}: crashed mid-write")
            assert self.node.journal is not None
            result = run(self.node.journal)
            if fault == "crash_after":
                self._crash()
            if fault in ("lost", "crash_after"):
                raise ConnectionLost(f"{self.name}: answer lost")
            return result

    def _crash(self) -> None:
        self.node.crash()
        self._schedule_restart()

    def _schedule_restart(self) -> None:
        async def later() -> None:
            for _ in range(self.plan.rng.randrange(1, 60)):
                await asyncio.sleep(0)
            if not self.node.up:
                self.node.restart()

        self.restarts.append(asyncio.get_running_loop().create_task(later()))

    # -- the JournalChannel interface ------------------------------------------------------

    async def get_journal_state(self, journal_id: str) -> j.JournalState:
        return await self._call(lambda jn: jn.state())

    async def format_journal(self, request: j.FormatRequest) -> None:
        await self._call(lambda jn: jn.format(request.namespace, force=request.force,
                                              nodes=request.nodes))

    async def new_epoch(self, request: j.NewEpochRequest) -> j.NewEpochResponse:
        return j.NewEpochResponse(
            await self._call(lambda jn: jn.new_epoch(request.namespace, request.epoch)))

    async def start_log_segment(self, request: j.StartSegmentRequest) -> None:
        await self._call(lambda jn: jn.start_log_segment(
            request.req, request.first_txid, request.layout_version, request.nodes))

    async def journal(self, request: j.JournalRecordsRequest) -> None:
        await self._call(lambda jn: jn.journal(request.req, request.segment_txid,
                                               request.first_txid, request.count,
                                               request.records), tear=request)

    async def heartbeat(self, request: j.RequestOnly) -> None:
        await self._call(lambda jn: jn.heartbeat(request.req))

    async def finalize_log_segment(self, request: j.FinalizeRequest) -> None:
        await self._call(lambda jn: jn.finalize(request.req, request.start_txid,
                                                request.end_txid))

    async def purge_logs_older_than(self, request: j.PurgeRequest) -> int:
        return await self._call(lambda jn: jn.purge(request.req, request.min_txid_to_keep))

    async def prepare_recovery(
        self, request: j.PrepareRecoveryRequest
    ) -> j.PrepareRecoveryResponse:
        return await self._call(lambda jn: jn.prepare_recovery(request.req,
                                                               request.segment_txid))

    async def accept_recovery(self, request: j.AcceptRecoveryRequest, records: bytes) -> None:
        await self._call(lambda jn: jn.accept_recovery(request.req, request.segment,
                                                       request.layout_version, records))

    async def get_edit_log_manifest(self, request: j.ManifestRequest) -> j.ManifestResponse:
        return await self._call(lambda jn: jn.manifest(request.since_txid,
                                                       request.in_progress_ok))

    async def get_journaled_edits(self, request: j.ReadEditsRequest) -> j.ReadEditsResponse:
        return await self._call(lambda jn: jn.read(request.from_txid, request.max_txns,
                                                   request.max_bytes, request.epoch))

    async def close(self) -> None:
        for task in self.restarts:
            task.cancel()


def record(txid: int, rng: random.Random) -> bytes:
    """A framed record with a payload only this txid of this run has."""
    return frame_record(1, txid, rng.randbytes(rng.randrange(1, 40)))


def shm_or(tmp: Path) -> Path:
    """A RAM-backed directory when the machine has one (fsync there costs nothing)."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return shm
    return tmp
