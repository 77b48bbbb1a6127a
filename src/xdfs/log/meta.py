"""A log's metadata and the rules that change it (pure: a state in, a new state out).

The metadata of a named log (seed 002) is its configuration, the ordered list of its
ledgers, the writer epoch, the truncation point and the registered readers. It lives in one
ZooKeeper znode and every change is a compare-and-set on the znode's version
(:mod:`xdfs.log.zkmeta` runs these functions in a read-modify-CAS loop), so two writers,
or a writer and the keeper, never both win.

Rules:

* **one writer** -- :func:`open_writer` bumps ``writer_epoch`` and names the ledgers to
  fence: the last two that are not closed (seed 002: the old writer may have been between
  closing one ledger and writing the next). Every later change by a writer passes its epoch;
  a change from an older epoch fails with :class:`~xdfs.errors.LogFenced`.
* **rotation** -- a ledger is closed at its last entry before the next one is added; only
  the last ledger may be open. :func:`should_rotate` decides by size, entry count and age.
* **ensemble change** -- a fragment ``(first entry, nodes)`` is appended to the open
  ledger: entries from there on are written to the new nodes.
* **writer epoch of appends** -- a caller's ``open_writer`` also sets ``opened_epoch``;
  an append naming an older epoch is fenced (:func:`check_append_epoch`), one naming
  :data:`NO_WRITER` (many producers) never is.
* **truncation** -- ``truncated_lsn`` only grows; a ledger is reclaimable once it lies
  wholly below both the truncation point and every registered reader's position.
* **recovery** -- the end and the tail of a ledger whose writer is gone, from the fenced
  nodes' answers (:func:`recovered_end`, :func:`recovery_start`, :func:`first_missing`,
  :func:`never_acknowledged`, :func:`tail_copy`; BookKeeper's rule, driven by
  :func:`xdfs.log.writer.recover_ledger`).
* **released copies** -- the changes that make copies obsolete (reclamation, a repair's
  spare) record them (:class:`Released`): the keeper deletes nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from xdfs.errors import InvalidArgument, LogFenced, LsnOutOfRange, NotEnoughStorageNodes
from xdfs.protocol.log import LSN_ZERO, LogSettings, Lsn

OPEN = "open"
CLOSED = "closed"


def check_settings(settings: LogSettings) -> LogSettings:
    e, w, a = settings.ensemble_size, settings.write_quorum, settings.ack_quorum
    if not 1 <= a <= w <= e:
        raise InvalidArgument(f"ledger quorums need 1 <= ack ({a}) <= write ({w}) <= "
                              f"ensemble ({e})")
    if w != e:
        # Striping (W < E) would spread entries over the ensemble; not supported.
        raise InvalidArgument(f"write quorum {w} must equal the ensemble size {e}")
    if settings.ledger_entries_max < 1 or settings.ledger_bytes_max < 1 \
            or settings.ledger_age_max_s <= 0:
        raise InvalidArgument("ledger bounds (entries, bytes, age) must be positive")
    return settings


class Fragment(msgspec.Struct, frozen=True, array_like=True):
    first_entry: int
    nodes: tuple[str, ...]


class LedgerInfo(msgspec.Struct, frozen=True):
    ledger_id: int
    fragments: tuple[Fragment, ...]
    state: str = OPEN
    last_entry: int = -1  # meaningful once closed; -1: empty
    created_ms: int = 0

    def nodes_of(self, entry_id: int) -> tuple[str, ...]:
        """Nodes written entry ``entry_id`` (the fragment it falls in)."""
        chosen = self.fragments[0]
        for fragment in self.fragments:
            if fragment.first_entry <= entry_id:
                chosen = fragment
        return chosen.nodes

    def all_nodes(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for fragment in self.fragments:
            seen.update(dict.fromkeys(fragment.nodes))
        return tuple(seen)


class Released(msgspec.Struct, frozen=True, array_like=True):
    """The log let go of its copies of ledger ``ledger_id`` on ``nodes``: ``reclaimed``,
    the ledger was reclaimed (wholly below the truncation point and every reader);
    else a spare took those nodes' place (re-replication). Recorded by the change that
    made the copies obsolete, in the same CAS: the keeper deletes a copy only on such a
    record (:mod:`xdfs.logservice.rules`), never because the current ledger list or
    ensemble no longer names it."""

    ledger_id: int
    nodes: tuple[str, ...]
    reclaimed: bool
    by: str = ""  # replaced: the spare that took the nodes' place


#: Released records a log keeps; past this the oldest are forgotten (a node still holding
#: such a copy keeps it: the keeper names it in its log).
RELEASED_MAX = 1024


class LogMeta(msgspec.Struct, frozen=True):
    name: str
    settings: LogSettings
    ledgers: tuple[LedgerInfo, ...] = ()
    writer_epoch: int = 0
    writer: str = ""  # who opened the current writer (instance id), for stat
    #: The writer epoch the last ``open_writer`` call made: an append carrying an epoch
    #: (a client that opened the writer) must carry this one (:func:`check_append_epoch`).
    #: A writer re-opened inside the service (an instance took the log over) moves
    #: ``writer_epoch`` only, so the client that opened the writer keeps it.
    opened_epoch: int = 0
    truncated_lsn: Lsn = LSN_ZERO  # records below it are gone (or going)
    readers: dict[str, Lsn] = {}  # registered reader -> the first LSN it still needs
    created_ms: int = 0
    #: Copies this log let go of and some node may still hold, oldest first.
    released: tuple[Released, ...] = ()


def _replace_ledger(meta: LogMeta, ledger: LedgerInfo) -> LogMeta:
    ledgers = tuple(ledger if x.ledger_id == ledger.ledger_id else x for x in meta.ledgers)
    return msgspec.structs.replace(meta, ledgers=ledgers)


def _check_epoch(meta: LogMeta, epoch: int) -> None:
    if meta.writer_epoch != epoch:
        raise LogFenced(f"log {meta.name!r}: writer epoch {epoch} was fenced by epoch "
                        f"{meta.writer_epoch} ({meta.writer or 'another writer'})")


def open_writer(meta: LogMeta, writer: str, *, opened: bool = False
                ) -> tuple[LogMeta, list[int]]:
    """A new writer's epoch; and the ledgers it must fence and recover, oldest first.
    ``opened``: a caller's ``open_writer`` (its epoch fences appends under older ones)."""
    unclosed = [x.ledger_id for x in meta.ledgers if x.state != CLOSED]
    epoch = meta.writer_epoch + 1
    fresh = msgspec.structs.replace(meta, writer_epoch=epoch, writer=writer,
                                    opened_epoch=epoch if opened else meta.opened_epoch)
    return fresh, unclosed[-2:]


#: The epoch of an append from no writer (seed 002's many producers): it goes to whichever
#: writer is current and is never fenced by ``open_writer``.
NO_WRITER = 0


def check_append_epoch(meta: LogMeta, epoch: int) -> None:
    """An append under ``epoch`` may go on: it names the epoch of the last
    ``open_writer`` (or none, :data:`NO_WRITER`); an older one was fenced by a newer
    writer (a deposed leader must not write)."""
    if epoch == NO_WRITER or epoch == meta.opened_epoch:
        return
    if epoch < meta.opened_epoch:
        raise LogFenced(f"log {meta.name!r}: writer epoch {epoch} was fenced by the writer "
                        f"opened at epoch {meta.opened_epoch}")
    raise LogFenced(f"log {meta.name!r}: writer epoch {epoch} was never opened (the last "
                    f"open_writer made epoch {meta.opened_epoch})")


def ledger(meta: LogMeta, ledger_id: int) -> LedgerInfo:
    for info in meta.ledgers:
        if info.ledger_id == ledger_id:
            return info
    raise InvalidArgument(f"log {meta.name!r} has no ledger {ledger_id}")


def close_ledger(meta: LogMeta, epoch: int, ledger_id: int, last_entry: int) -> LogMeta:
    _check_epoch(meta, epoch)
    info = ledger(meta, ledger_id)
    if info.state == CLOSED:
        if info.last_entry != last_entry:
            raise InvalidArgument(f"ledger {ledger_id} closed at {info.last_entry}, "
                                  f"not {last_entry}")
        return meta
    return _replace_ledger(meta, msgspec.structs.replace(info, state=CLOSED,
                                                         last_entry=last_entry))


def add_ledger(meta: LogMeta, epoch: int, ledger_id: int, nodes: Sequence[str],
               now_ms: int) -> LogMeta:
    _check_epoch(meta, epoch)
    if meta.ledgers and meta.ledgers[-1].state != CLOSED:
        raise InvalidArgument(f"ledger {meta.ledgers[-1].ledger_id} is still open")
    if meta.ledgers and ledger_id <= meta.ledgers[-1].ledger_id:
        raise InvalidArgument(f"ledger id {ledger_id} does not follow "
                              f"{meta.ledgers[-1].ledger_id}")
    settings = meta.settings
    if not settings.ack_quorum <= len(nodes) <= settings.ensemble_size \
            or len(set(nodes)) != len(nodes):
        raise InvalidArgument(f"ensemble {list(nodes)}: {settings.ack_quorum} to "
                              f"{settings.ensemble_size} distinct nodes needed")
    info = LedgerInfo(ledger_id, (Fragment(0, tuple(nodes)),), OPEN, -1, now_ms)
    return msgspec.structs.replace(meta, ledgers=(*meta.ledgers, info))


def change_ensemble(meta: LogMeta, epoch: int, ledger_id: int, first_entry: int,
                    nodes: Sequence[str], *, recovery: bool = False) -> LogMeta:
    """Entries from ``first_entry`` on go to ``nodes`` (a failed node replaced, or dropped
    when no spare is left: at least the ack quorum must remain). ``recovery``: the
    fragment of a recovered tail, which may begin before the last fragment (it replaces
    the fragments from ``first_entry`` on: its nodes hold every entry from there)."""
    _check_epoch(meta, epoch)
    info = ledger(meta, ledger_id)
    if info.state == CLOSED:
        raise InvalidArgument(f"ledger {ledger_id} is closed")
    if len(nodes) < meta.settings.ack_quorum:
        raise NotEnoughStorageNodes(f"ledger {ledger_id}: {len(nodes)} node(s) left, the ack "
                                    f"quorum is {meta.settings.ack_quorum}")
    if first_entry < info.fragments[-1].first_entry and not recovery:
        raise InvalidArgument(f"fragment at {first_entry} before the last one")
    kept = tuple(f for f in info.fragments if f.first_entry < first_entry)
    fragments = (*kept, Fragment(first_entry, tuple(nodes)))
    return _replace_ledger(meta, msgspec.structs.replace(info, fragments=fragments))


def replace_copy(meta: LogMeta, ledger_id: int, lost: str, spare: str) -> LogMeta:
    """Re-replication of a closed ledger: ``spare`` now holds what ``lost`` held (and
    ``lost``'s copy is released)."""
    info = ledger(meta, ledger_id)
    fragments = tuple(
        Fragment(f.first_entry, tuple(spare if n == lost else n for n in f.nodes))
        for f in info.fragments)
    fresh = _replace_ledger(meta, msgspec.structs.replace(info, fragments=fragments))
    return release(fresh, [Released(ledger_id, (lost,), reclaimed=False, by=spare)])


def release(meta: LogMeta, records: Sequence[Released]) -> LogMeta:
    """``records`` added to the log's released copies (the oldest past
    :data:`RELEASED_MAX` forgotten)."""
    kept = (*meta.released, *records)[-RELEASED_MAX:]
    return msgspec.structs.replace(meta, released=kept)


def forget_released(meta: LogMeta, ledger_id: int, nodes: Sequence[str]) -> LogMeta:
    """``nodes`` no longer hold their released copy of ``ledger_id``: forget them."""
    gone = set(nodes)
    kept = []
    for record in meta.released:
        nodes = tuple(n for n in record.nodes if n not in gone or record.ledger_id != ledger_id)
        if nodes:
            kept.append(msgspec.structs.replace(record, nodes=nodes))
    return msgspec.structs.replace(meta, released=tuple(kept))


def should_rotate(entries: int, size_bytes: int, age_s: float, settings: LogSettings) -> bool:
    return (entries >= settings.ledger_entries_max or size_bytes >= settings.ledger_bytes_max
            or age_s >= settings.ledger_age_max_s)


def end_lsn(meta: LogMeta, open_lac: int | None) -> Lsn:
    """The LSN after the last readable entry: ``(ledger, last + 1, 0)`` of the last ledger
    with an entry; ``open_lac``: the open ledger's last-add-confirmed (None: unknown, the
    open ledger then counts as empty)."""
    for info in reversed(meta.ledgers):
        last = info.last_entry if info.state == CLOSED else (
            -1 if open_lac is None else open_lac)
        if last >= 0:
            return Lsn(info.ledger_id, last + 1, 0)
    return max(meta.truncated_lsn, LSN_ZERO)


def truncate(meta: LogMeta, lsn: Lsn, end: Lsn) -> LogMeta:
    """Records below ``lsn`` may go; the point never moves back, nor past ``end``."""
    if lsn > end:
        raise LsnOutOfRange(f"cannot truncate log {meta.name!r} at {lsn}: its end is {end}")
    if lsn <= meta.truncated_lsn:
        return meta
    return msgspec.structs.replace(meta, truncated_lsn=lsn)


def register_reader(meta: LogMeta, reader: str, position: Lsn) -> LogMeta:
    if not reader or len(reader) > 128:
        raise InvalidArgument("a reader name is 1-128 characters")
    readers = dict(meta.readers)
    readers[reader] = position
    return msgspec.structs.replace(meta, readers=readers)


def unregister_reader(meta: LogMeta, reader: str) -> LogMeta:
    readers = {k: v for k, v in meta.readers.items() if k != reader}
    return msgspec.structs.replace(meta, readers=readers)


def reclaim_point(meta: LogMeta) -> Lsn:
    """Everything below this LSN may be deleted: the truncation point, held back by the
    slowest registered reader."""
    return min([meta.truncated_lsn, *meta.readers.values()])


def reclaimable(meta: LogMeta) -> list[LedgerInfo]:
    """Closed ledgers lying wholly below :func:`reclaim_point` (oldest first)."""
    point = reclaim_point(meta)
    return [x for x in meta.ledgers
            if x.state == CLOSED and Lsn(x.ledger_id, x.last_entry + 1, 0) <= point]


def drop_ledgers(meta: LogMeta, ledger_ids: Sequence[int],
                 left: Mapping[int, Sequence[str]] | None = None) -> LogMeta:
    """Forget reclaimed ledgers (their entries are deleted from the nodes already); the
    nodes that may still hold one (``left``, by ledger id; None: any of its nodes) are
    named in a released record, for the keeper to delete there."""
    gone = set(ledger_ids)
    for info in meta.ledgers:
        if info.ledger_id in gone and info not in reclaimable(meta):
            raise InvalidArgument(f"ledger {info.ledger_id} is still needed")
    records = [Released(x.ledger_id, tuple(x.all_nodes() if left is None
                                           else left.get(x.ledger_id, ())), reclaimed=True)
               for x in meta.ledgers if x.ledger_id in gone]
    records = [r for r in records if r.nodes]
    return release(msgspec.structs.replace(
        meta, ledgers=tuple(x for x in meta.ledgers if x.ledger_id not in gone)), records)


def check_read_from(meta: LogMeta, lsn: Lsn, end: Lsn, reader: str = "") -> None:
    """A read from ``lsn`` is in range: not past the end, and not below the truncation
    point unless it is a registered reader's read at or above its own position (what it
    still needs is kept, :func:`reclaim_point`)."""
    held = meta.readers.get(reader) if reader else None
    if lsn < meta.truncated_lsn and (held is None or lsn < held):
        raise LsnOutOfRange(f"log {meta.name!r}: {lsn} is below the truncation point "
                            f"{meta.truncated_lsn}" + (f" and reader {reader!r}'s position"
                                                       if reader else ""))
    if lsn > end:
        raise LsnOutOfRange(f"log {meta.name!r}: {lsn} is past the end {end}")


def choose_ensemble(live: Sequence[str], settings: LogSettings, start: int = 0) -> list[str]:
    """An ensemble of live nodes, rotating from ``start`` to spread ledgers: E of them, or
    fewer but at least the ack quorum while nodes are down (seed 002: appends stay
    available with one node down; the keeper re-replicates the ledger once it is closed)."""
    candidates = list(live)
    size = min(settings.ensemble_size, len(candidates))
    if size < settings.ack_quorum or not candidates:
        raise NotEnoughStorageNodes(f"{len(candidates)} live storage node(s) to choose from, "
                                    f"at least {settings.ack_quorum} needed")
    offset = start % len(candidates)
    rotated = candidates[offset:] + candidates[:offset]
    return rotated[:size]


class NodeEnd(msgspec.Struct, frozen=True):
    """What one node answered to a fence: what it holds of the ledger (``last_entry`` -1
    and ``exists`` False: nothing) and the last-add-confirmed it was told."""

    node: str
    last_entry: int
    lac: int
    first_entry: int = 0
    exists: bool = True


def recovery_answers_needed(write_set: int, ack_quorum: int) -> int:
    """Answers recovery needs from a fragment of ``write_set`` nodes so that at least one
    of them is in every ack quorum (W - A + 1): it then sees every acknowledged entry,
    and the others can no longer make an ack quorum for the old writer once fenced."""
    return max(1, write_set - ack_quorum + 1)


def recovered_end(answers: Sequence[NodeEnd], first_entry: int) -> int:
    """The end of a recovered ledger: the highest entry any answering node holds (every
    acknowledged entry is among them; a higher unacknowledged one is kept and copied to
    the others, as BookKeeper's recovery does). ``first_entry - 1`` when none holds any."""
    return max([first_entry - 1, *(a.last_entry for a in answers)])


class TailCopy(msgspec.Struct, frozen=True):
    """Recovery's re-replication: entries ``first..last`` go to ``target`` from one of
    ``sources`` (nodes holding them all, best first)."""

    target: str
    first: int
    last: int
    sources: tuple[str, ...]


def holds_through(answer: NodeEnd, first: int, end: int) -> bool:
    """``answer``'s node holds every entry ``first..end``."""
    return answer.exists and answer.first_entry <= first and answer.last_entry >= end


def recovery_start(answers: Sequence[NodeEnd]) -> int:
    """The first entry of a recovered ledger's *tail*, the part recovery re-replicates:
    the one after the highest last-add-confirmed any node heard (entries up to it are on
    an ack quorum of their fragment already)."""
    return max([-1, *(a.lac for a in answers)]) + 1


def tail_parts(info: LedgerInfo, start: int, end: int) -> list[tuple[int, int, int]]:
    """The tail ``start..end`` split by fragment: (fragment index, first, last) each."""
    parts = []
    for index, fragment in enumerate(info.fragments):
        following = info.fragments[index + 1].first_entry - 1 \
            if index + 1 < len(info.fragments) else end
        first, last = max(start, fragment.first_entry), min(end, following)
        if first <= last:
            parts.append((index, first, last))
    return parts


def first_missing(answers: Sequence[NodeEnd], first: int, last: int) -> int | None:
    """The first entry of ``first..last`` no answering node holds (None: all are held)."""
    entry = first
    while entry <= last:
        reach = [a.last_entry for a in answers
                 if a.exists and a.first_entry <= entry <= a.last_entry]
        if not reach:
            return entry
        entry = max(reach) + 1
    return None


def never_acknowledged(fragment: Fragment, answers: Sequence[NodeEnd], entry: int,
                       ack_quorum: int) -> bool:
    """Enough of ``fragment``'s nodes lack ``entry`` -- fenced, they never take it -- that
    no ack quorum of the fragment held it (W - A + 1 of them): the writer never
    acknowledged it, so the recovered ledger may end before it (BookKeeper's recovery
    read: "no such entry" from enough bookies)."""
    lacking = [a for a in answers if a.node in fragment.nodes
               and not (a.exists and a.first_entry <= entry <= a.last_entry)]
    return len(lacking) >= recovery_answers_needed(len(fragment.nodes), ack_quorum)


def tail_copy(info: LedgerInfo, answer: NodeEnd, first: int, last: int,
              holders: Sequence[NodeEnd], member_of: int | None) -> TailCopy | None:
    """The copy that makes ``answer``'s node hold entries ``first..last``: from just past
    what it holds; holding nothing of the ledger, from ``first`` -- or, for a member of
    fragment ``member_of``, from the first entry of the run of fragments it belongs to
    ending there, if earlier (the keeper completes a member's copy by appending to it).
    None when it holds them already, cannot (its copy starts after ``first``: a node
    never fills a gap) or no holder has what it lacks."""
    if holds_through(answer, first, last) or (answer.exists and answer.first_entry > first):
        return None
    begin = first
    if answer.exists:
        begin = answer.last_entry + 1
    elif member_of is not None:
        for fragment in reversed(info.fragments[:member_of + 1]):
            if answer.node not in fragment.nodes:
                break
            begin = min(begin, fragment.first_entry)
    sources = tuple(h.node for h in holders
                    if h.node != answer.node and holds_through(h, begin, last))
    return TailCopy(answer.node, begin, last, sources) if sources else None


def recovery_nodes(holders: Sequence[str], settings: LogSettings) -> tuple[str, ...]:
    """The ensemble of the fragment recovery adds when too few of the last fragment's
    nodes can hold its part of the tail: the nodes holding it (spares among them), up to
    E."""
    nodes = tuple(dict.fromkeys(holders))[:settings.ensemble_size]
    assert len(nodes) >= settings.ack_quorum, (nodes, settings.ack_quorum)
    return nodes


class Repair(msgspec.Struct, frozen=True):
    """Re-replication of one closed ledger: ``spare`` gets a copy of the fragments at
    ``fragments`` (indexes), taking ``lost``'s place there (None: the fragments had fewer
    than E nodes, the spare is added)."""

    ledger_id: int
    lost: str | None
    spare: str
    fragments: tuple[int, ...]


def fragment_end(info: LedgerInfo, index: int) -> int:
    """Last entry of fragment ``index`` of a closed ledger."""
    if index + 1 < len(info.fragments):
        return info.fragments[index + 1].first_entry - 1
    return info.last_entry


def apply_repair(meta: LogMeta, repair: Repair) -> LogMeta:
    """The metadata once ``repair``'s copies are made: the spare holds those fragments."""
    info = ledger(meta, repair.ledger_id)
    if info.state != CLOSED:
        raise InvalidArgument(f"ledger {repair.ledger_id} is not closed")
    if repair.lost is not None:
        return replace_copy(meta, repair.ledger_id, repair.lost, repair.spare)
    fragments = tuple(
        Fragment(f.first_entry, (*f.nodes, repair.spare)) if i in repair.fragments else f
        for i, f in enumerate(info.fragments))
    return _replace_ledger(meta, msgspec.structs.replace(info, fragments=fragments))
