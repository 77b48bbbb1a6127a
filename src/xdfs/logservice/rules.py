"""The keeper's rules (seed 004's HAKeeper), pure: heartbeats and the logs' metadata in,
commands for the storage nodes and metadata repairs out. Time is a number the driver
passes (:mod:`xdfs.logservice.keeper` reads the clock); no sockets, no ZooKeeper.

* **liveness** -- a node is alive while its last heartbeat is younger than
  ``dead_after_s``. A keeper just elected has heard from nobody: it counts every node
  alive for ``dead_after_s`` from its election (the nodes' next heartbeats come well
  within that), so a keeper change declares no node dead by itself.
* **re-replication** -- every closed ledger should have a full copy on each node its
  metadata names. A live member that lacks its copy (a node that came back empty, or
  missed entries) is told to copy it; a dead member's copy is made on a live spare, the
  one with the most free space, and once the spare reports it complete the metadata is
  changed by CAS to name the spare instead (:func:`xdfs.log.meta.apply_repair`). So is a
  ledger written while a node was down (fewer than E nodes) brought back to E copies.
  One copy per ledger is in flight at a time; one not done within ``copy_timeout_s``, or
  that the node no longer lists as copying (it failed, or the node restarted), is ordered
  again.
* **deletion** -- a copy is deleted only when the log's own history proves it obsolete,
  never because the current ledger list or ensemble (one znode's content, which anyone
  able to write it could change) no longer names it. The history is the log's released
  records (:class:`xdfs.log.meta.Released`), each written by the change that let the copy
  go: a *reclaimed* ledger's copy goes once the ledger is no longer listed and the
  records the node itself reports holding lie below the log's truncation point and
  every reader; a *replaced* copy goes once the spare that took the node's place is
  named by the ledger, alive, and reports its whole copy. Only heartbeats received *before*
  the metadata was read are used for this. A copy held with no such record is kept, and
  :attr:`KeeperState.notes` says so (the driver logs it). Once a node reports that it no
  longer holds a released copy, the record forgets it (:class:`Forget`).
* **configured nodes** -- a ledger whose metadata names a node that is not one of the
  configured storage nodes was not written by the service: it is left alone (no copy
  ordered to or from it, no repair), and a note says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from xdfs.log import meta as m
from xdfs.protocol import log as lg
from xdfs.protocol.log import Lsn


@dataclass(frozen=True)
class Report:
    """The last heartbeat of one storage node."""

    heard_at: float
    ledgers: dict[int, lg.LedgerHeld]
    copying: frozenset[int]
    free_bytes: int

    def holds(self, ledger_id: int, first: int, last: int) -> bool:
        held = self.ledgers.get(ledger_id)
        return held is not None and held.first_entry <= first and held.last_entry >= last


@dataclass(frozen=True)
class Copy:
    """A replicate command in flight: ``node`` copies entries ``first..last`` of
    ``ledger_id``; ``repair`` is the metadata change once it is done (None: the node is
    a member already)."""

    node: str
    ledger_id: int
    first: int
    last: int
    deadline: float
    repair: m.Repair | None
    delivered_at: float | None = None  # when a heartbeat's answer carried the command


@dataclass(frozen=True)
class MetaRepair:
    """Apply ``repair`` to log ``log``'s metadata (the copy is complete)."""

    log: str
    repair: m.Repair


@dataclass(frozen=True)
class Forget:
    """``nodes`` hold their released copy of ``ledger_id`` no more: log ``log`` forgets
    them (:func:`xdfs.log.meta.forget_released`)."""

    log: str
    ledger_id: int
    nodes: tuple[str, ...]


@dataclass
class KeeperState:
    dead_after_s: float
    copy_timeout_s: float
    elected_at: float
    #: The configured storage nodes (None: any address is taken for one).
    configured: frozenset[str] | None = None
    reports: dict[str, Report] = field(default_factory=dict)
    copies: dict[int, Copy] = field(default_factory=dict)  # by ledger id
    outbox: dict[str, list[lg.KeeperCommand]] = field(default_factory=dict)
    #: What the last plan left alone and why (for the driver's log).
    notes: list[str] = field(default_factory=list)
    #: Copies held with no released record: (node, ledger id) -> when the metadata that
    #: first did not explain them was read (noted once a later heartbeat still has them).
    unexplained: dict[tuple[str, int], float] = field(default_factory=dict)
    #: Released records: (log, ledger id) -> when the metadata first showing it was read
    #: (only a heartbeat after that may tell that a node no longer holds the copy).
    released_seen: dict[tuple[str, int], float] = field(default_factory=dict)

    # --- heartbeats ---------------------------------------------------------------------

    def heard(self, beat: lg.HeartbeatRequest, now: float) -> list[lg.KeeperCommand]:
        """Record a heartbeat; the commands waiting for that node (handed over once)."""
        self.reports[beat.node] = Report(
            now, {x.ledger_id: x for x in beat.ledgers}, frozenset(beat.copying),
            beat.free_bytes)
        commands = self.outbox.pop(beat.node, [])
        for command in commands:
            copy = self.copies.get(command.ledger_id)
            if command.kind == lg.REPLICATE and copy is not None and copy.node == beat.node:
                self.copies[command.ledger_id] = replace(copy, delivered_at=now)
        return commands

    def alive(self, node: str, now: float) -> bool:
        report = self.reports.get(node)
        last = self.elected_at if report is None else max(report.heard_at, self.elected_at)
        return now - last < self.dead_after_s

    def _heard_alive(self, node: str, now: float) -> Report | None:
        """The node's report when it is alive and has reported since the election."""
        report = self.reports.get(node)
        return report if report is not None and self.alive(node, now) else None

    def _send(self, node: str, command: lg.KeeperCommand) -> None:
        self.outbox.setdefault(node, []).append(command)

    # --- planning -----------------------------------------------------------------------

    def plan(self, metas: Sequence[m.LogMeta], now: float, read_at: float
             ) -> list[MetaRepair | Forget]:
        """Queue the commands ``metas`` call for (read from ZooKeeper starting at
        ``read_at``); the metadata changes to make (repairs whose copies are complete,
        released copies gone)."""
        self.notes = []
        done: list[MetaRepair | Forget] = list(self._finished_copies(metas, now))
        busy = {c.ledger_id for c in self.copies.values()}
        for meta in metas:
            for info in meta.ledgers:
                if info.state == m.CLOSED and info.last_entry >= 0 \
                        and info.ledger_id not in busy and self._configured(meta, info):
                    self._restore(meta, info, now)
        self._delete_obsolete(metas, now, read_at)
        done += self._forgotten(metas, now, read_at)
        return done

    def _configured(self, meta: m.LogMeta, info: m.LedgerInfo) -> bool:
        strangers = [n for n in info.all_nodes()
                     if self.configured is not None and n not in self.configured]
        if strangers:
            self.notes.append(f"ledger {info.ledger_id} of log {meta.name} names "
                              f"{', '.join(strangers)}, not configured storage nodes: left "
                              "alone")
        return not strangers

    def _finished_copies(self, metas: Sequence[m.LogMeta], now: float) -> list[MetaRepair]:
        owner = {info.ledger_id: meta.name for meta in metas for info in meta.ledgers}
        done = []
        for ledger_id, copy in list(self.copies.items()):
            report = self._heard_alive(copy.node, now)
            complete = report is not None and report.holds(ledger_id, copy.first, copy.last)
            if complete and copy.repair is not None and ledger_id in owner:
                done.append(MetaRepair(owner[ledger_id], copy.repair))
            if complete or report is None or now >= copy.deadline or ledger_id not in owner \
                    or _dropped(copy, report):
                del self.copies[ledger_id]
        return done

    def _restore(self, meta: m.LogMeta, info: m.LedgerInfo, now: float) -> None:
        """At most one copy of ``info`` ordered: a live member lacking its copy first,
        then a dead member's copy on a spare, then a missing E-th copy on a spare."""
        members = info.all_nodes()
        for node in members:
            report = self._heard_alive(node, now)
            if report is None or info.ledger_id in report.copying:
                continue
            first, last = _member_range(info, node)
            if last >= first and not report.holds(info.ledger_id, first, last):
                self._order(info, node, first, last, None, now)
                return
        dead = next((n for n in members if not self.alive(n, now)), None)
        if dead is not None:
            held = tuple(i for i, f in enumerate(info.fragments) if dead in f.nodes)
            self._to_spare(info, m.Repair(info.ledger_id, dead, "", held), now)
            return
        short = tuple(i for i, f in enumerate(info.fragments)
                      if len(f.nodes) < meta.settings.ensemble_size
                      and m.fragment_end(info, i) >= f.first_entry)
        if short:
            self._to_spare(info, m.Repair(info.ledger_id, None, "", short), now)

    def _to_spare(self, info: m.LedgerInfo, repair: m.Repair, now: float) -> None:
        spare = self._spare(info, now)
        if spare is None:
            return  # no live node left outside the ensemble: later, when one comes
        planned = m.Repair(repair.ledger_id, repair.lost, spare, repair.fragments)
        first = info.fragments[min(repair.fragments)].first_entry
        last = m.fragment_end(info, max(repair.fragments))
        if last >= first:
            self._order(info, spare, first, last, planned, now)

    def _spare(self, info: m.LedgerInfo, now: float) -> str | None:
        members = set(info.all_nodes())
        candidates = [(report.free_bytes, node) for node, report in self.reports.items()
                      if node not in members and self.alive(node, now)
                      and info.ledger_id not in report.copying]
        return max(candidates)[1] if candidates else None

    def _order(self, info: m.LedgerInfo, node: str, first: int, last: int,
               repair: m.Repair | None, now: float) -> None:
        ranges = self._ranges(info, node, first, last, now)
        if ranges is None:
            return  # some entries have no live complete copy now: nothing to copy from
        self._send(node, lg.KeeperCommand(lg.REPLICATE, info.ledger_id, ranges))
        self.copies[info.ledger_id] = Copy(node, info.ledger_id, first, last,
                                           now + self.copy_timeout_s, repair)

    def _ranges(self, info: m.LedgerInfo, target: str, first: int, last: int, now: float
                ) -> tuple[lg.CopyRange, ...] | None:
        """``first..last`` split by fragment, each with the live nodes holding it whole."""
        ranges = []
        for index, fragment in enumerate(info.fragments):
            start = max(first, fragment.first_entry)
            end = min(last, m.fragment_end(info, index))
            if end < start:
                continue
            sources = tuple(
                n for n in fragment.nodes if n != target
                and (report := self._heard_alive(n, now)) is not None
                and report.holds(info.ledger_id, fragment.first_entry,
                                 m.fragment_end(info, index)))
            if not sources:
                return None
            ranges.append(lg.CopyRange(start, end, sources))
        return tuple(ranges)

    def _delete_obsolete(self, metas: Sequence[m.LogMeta], now: float, read_at: float
                         ) -> None:
        members = {info.ledger_id: set(info.all_nodes())
                   for meta in metas for info in meta.ledgers}
        released = _released(metas)
        copying = {(c.node, c.ledger_id) for c in self.copies.values()}
        unexplained = {}
        for node, report in self._reports_before(read_at, now):
            queued = {c.ledger_id for c in self.outbox.get(node, [])}
            for ledger_id in _unneeded(report, node, members):
                if (node, ledger_id) in copying or ledger_id in queued:
                    continue
                if any(self._obsolete(meta, record, node, report, now)
                       for meta, record in released.get(ledger_id, ())):
                    self._send(node, lg.KeeperCommand(lg.DELETE_LEDGER, ledger_id))
                    continue
                # A report from before a deletion the metadata records already shows the
                # copy too: noted only if a heartbeat after this read still has it.
                since = unexplained[node, ledger_id] = self.unexplained.get(
                    (node, ledger_id), read_at)
                if report.heard_at > since:
                    self.notes.append(f"{node} holds ledger {ledger_id}, which no log names "
                                      "it for and none released there: kept")
        self.unexplained = unexplained

    def _reports_before(self, read_at: float, now: float) -> Iterable[tuple[str, Report]]:
        """The live nodes' reports heard before the metadata was read."""
        return [(node, report) for node, report in self.reports.items()
                if report.heard_at <= read_at and self.alive(node, now)]

    def _obsolete(self, meta: m.LogMeta, record: m.Released, node: str, report: Report,
                  now: float) -> bool:
        """``record`` of ``meta`` proves ``node``'s copy obsolete (see the module's rule)."""
        if node not in record.nodes:
            return False
        listed = next((x for x in meta.ledgers if x.ledger_id == record.ledger_id), None)
        if record.reclaimed:
            held = report.ledgers[record.ledger_id]
            below = Lsn(record.ledger_id, held.last_entry + 1, 0) <= m.reclaim_point(meta)
            return listed is None and below
        if listed is None or node in listed.all_nodes() or record.by not in listed.all_nodes():
            return False
        first, last = _member_range(listed, record.by)  # the copy that replaced it is whole
        spare = self._heard_alive(record.by, now)
        return spare is not None and spare.holds(listed.ledger_id, first, last)

    def _forgotten(self, metas: Sequence[m.LogMeta], now: float, read_at: float
                   ) -> list[Forget]:
        """Released copies their nodes no longer hold (nor copy), by a heartbeat heard
        after the record was first read -- an older one may predate the copy itself --
        or held by a node that is not a configured storage node any more."""
        seen = {(meta.name, r.ledger_id): self.released_seen.get((meta.name, r.ledger_id),
                                                                  read_at)
                for meta in metas for r in meta.released}
        self.released_seen = seen
        out = []
        for meta in metas:
            for record in meta.released:
                since = seen[meta.name, record.ledger_id]
                gone = tuple(
                    n for n in record.nodes
                    if (self.configured is not None and n not in self.configured)
                    or ((r := self._heard_alive(n, now)) is not None and r.heard_at > since
                        and record.ledger_id not in r.ledgers
                        and record.ledger_id not in r.copying))
                if gone:
                    out.append(Forget(meta.name, record.ledger_id, gone))
        return out


def _released(metas: Sequence[m.LogMeta]) -> dict[int, list[tuple[m.LogMeta, m.Released]]]:
    out: dict[int, list[tuple[m.LogMeta, m.Released]]] = {}
    for meta in metas:
        for record in meta.released:
            out.setdefault(record.ledger_id, []).append((meta, record))
    return out


def _dropped(copy: Copy, report: Report) -> bool:
    """The node heard the command (a later heartbeat) yet neither copies nor holds the
    ledger: the copy failed, or the node restarted and forgot it; it is ordered again."""
    return copy.delivered_at is not None and report.heard_at > copy.delivered_at \
        and copy.ledger_id not in report.copying


def _unneeded(report: Report, node: str, members: dict[int, set[str]]) -> Iterable[int]:
    for ledger_id in report.ledgers:
        if ledger_id in report.copying:
            continue
        if node not in members.get(ledger_id, ()):
            yield ledger_id


def _member_range(info: m.LedgerInfo, node: str) -> tuple[int, int]:
    """Entries a member holds: from the first fragment naming it to the end of the last."""
    indexes = [i for i, f in enumerate(info.fragments) if node in f.nodes]
    return info.fragments[indexes[0]].first_entry, m.fragment_end(info, indexes[-1])
