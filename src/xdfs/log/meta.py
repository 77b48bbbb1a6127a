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
* **truncation** -- ``truncated_lsn`` only grows; a ledger is reclaimable once it lies
  wholly below both the truncation point and every registered reader's position.
"""

from __future__ import annotations

from collections.abc import Sequence

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


class LogMeta(msgspec.Struct, frozen=True):
    name: str
    settings: LogSettings
    ledgers: tuple[LedgerInfo, ...] = ()
    writer_epoch: int = 0
    writer: str = ""  # who opened the current writer (instance id), for stat
    truncated_lsn: Lsn = LSN_ZERO  # records below it are gone (or going)
    readers: dict[str, Lsn] = {}  # registered reader -> the first LSN it still needs
    created_ms: int = 0


def _replace_ledger(meta: LogMeta, ledger: LedgerInfo) -> LogMeta:
    ledgers = tuple(ledger if x.ledger_id == ledger.ledger_id else x for x in meta.ledgers)
    return msgspec.structs.replace(meta, ledgers=ledgers)


def _check_epoch(meta: LogMeta, epoch: int) -> None:
    if meta.writer_epoch != epoch:
        raise LogFenced(f"log {meta.name!r}: writer epoch {epoch} was fenced by epoch "
                        f"{meta.writer_epoch} ({meta.writer or 'another writer'})")


def open_writer(meta: LogMeta, writer: str) -> tuple[LogMeta, list[int]]:
    """A new writer's epoch; and the ledgers it must fence and recover, oldest first."""
    unclosed = [x.ledger_id for x in meta.ledgers if x.state != CLOSED]
    fresh = msgspec.structs.replace(meta, writer_epoch=meta.writer_epoch + 1, writer=writer)
    return fresh, unclosed[-2:]


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
                    nodes: Sequence[str]) -> LogMeta:
    """Entries from ``first_entry`` on go to ``nodes`` (a failed node replaced, or dropped
    when no spare is left: at least the ack quorum must remain)."""
    _check_epoch(meta, epoch)
    info = ledger(meta, ledger_id)
    if info.state == CLOSED:
        raise InvalidArgument(f"ledger {ledger_id} is closed")
    if len(nodes) < meta.settings.ack_quorum:
        raise NotEnoughStorageNodes(f"ledger {ledger_id}: {len(nodes)} node(s) left, the ack "
                                    f"quorum is {meta.settings.ack_quorum}")
    if first_entry < info.fragments[-1].first_entry:
        raise InvalidArgument(f"fragment at {first_entry} before the last one")
    kept = tuple(f for f in info.fragments if f.first_entry < first_entry)
    fragments = (*kept, Fragment(first_entry, tuple(nodes)))
    return _replace_ledger(meta, msgspec.structs.replace(info, fragments=fragments))


def replace_copy(meta: LogMeta, ledger_id: int, lost: str, spare: str) -> LogMeta:
    """Re-replication of a closed ledger: ``spare`` now holds what ``lost`` held."""
    info = ledger(meta, ledger_id)
    fragments = tuple(
        Fragment(f.first_entry, tuple(spare if n == lost else n for n in f.nodes))
        for f in info.fragments)
    return _replace_ledger(meta, msgspec.structs.replace(info, fragments=fragments))


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


def drop_ledgers(meta: LogMeta, ledger_ids: Sequence[int]) -> LogMeta:
    """Forget reclaimed ledgers (their entries are deleted from the nodes already)."""
    gone = set(ledger_ids)
    for info in meta.ledgers:
        if info.ledger_id in gone and info not in reclaimable(meta):
            raise InvalidArgument(f"ledger {info.ledger_id} is still needed")
    return msgspec.structs.replace(
        meta, ledgers=tuple(x for x in meta.ledgers if x.ledger_id not in gone))


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
    """What one node answered to a fence: its last entry of the ledger (-1: none)."""

    node: str
    last_entry: int
    lac: int


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
