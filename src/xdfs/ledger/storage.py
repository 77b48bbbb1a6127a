"""The ledgers one storage node holds (seed 002's bookie storage).

Layout (``<journal_dir>/ledger.d/``, a name no journal id can take)::

    <ledger id, 19 digits>.ledger   segment header (first entry id) + entry frames
    <ledger id, 19 digits>.fenced   present once the ledger is fenced (empty file)

Entries are framed as edits records (:mod:`xdfs.editlog.framing`, opcode
:data:`~xdfs.protocol.ledger.ENTRY_OPCODE`, entry id in the txid field). A ledger file
starts at the first entry this node was given: a node that joined the ensemble later (an
ensemble change) holds a suffix.

:class:`LedgerStore` is synchronous and not thread-safe: the storage node runs all its
calls on one worker thread, in arrival order. Every method checks everything before it
changes anything; an add is durable (fdatasync, and the directory fsynced for a new file)
before it is answered: the node stages the adds queued behind each other and syncs each
file once for all of them (group commit). A torn tail found at load (a crash inside a
write) was never acknowledged and is cut off.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from xdfs.common.files import TXID_DIGITS, datasync, fsync_dir, make_dirs, write_all
from xdfs.editlog.framing import (
    SEGMENT_HEADER_BYTES,
    Frame,
    Problem,
    decode_segment_header,
    encode_segment_header,
    is_zero_fill,
    parse_frame,
)
from xdfs.errors import (
    InvalidArgument,
    LedgerFenced,
    LedgerOutOfOrder,
    StorageError,
)
from xdfs.protocol import ledger as lp
from xdfs.protocol.log import LedgerHeld

log = logging.getLogger(__name__)

#: Layout version written in each ledger file's header.
LEDGER_LAYOUT_VERSION = 1
LEDGER_DIR = "ledger.d"
_ENTRIES_SUFFIX = ".ledger"
_FENCED_SUFFIX = ".fenced"


def check_ledger_id(ledger_id: int) -> int:
    if not 0 < ledger_id <= lp.LEDGER_ID_MAX:
        raise InvalidArgument(f"bad ledger id {ledger_id}: 1..{lp.LEDGER_ID_MAX}")
    return ledger_id


@dataclass
class _Ledger:
    first_entry: int
    #: File offset of each entry held plus the end offset.
    offsets: list[int] = field(default_factory=lambda: [SEGMENT_HEADER_BYTES])
    fenced: bool = False
    lac: int = -1

    @property
    def last_entry(self) -> int:
        return self.first_entry + len(self.offsets) - 2

    def state(self) -> lp.LedgerState:
        return lp.LedgerState(True, self.first_entry, self.last_entry, self.lac, self.fenced)


class LedgerStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._ledgers: dict[int, _Ledger] = {}
        #: Fenced ids this node holds no entry of (fencing must outlive the entries' absence).
        self._fenced_only: set[int] = set()
        #: Ledgers written since the last sync.
        self._unsynced: set[int] = set()

    # --- paths ------------------------------------------------------------------------

    def _entries_path(self, ledger_id: int) -> Path:
        return self.root / f"{ledger_id:0{TXID_DIGITS}d}{_ENTRIES_SUFFIX}"

    def _fenced_path(self, ledger_id: int) -> Path:
        return self.root / f"{ledger_id:0{TXID_DIGITS}d}{_FENCED_SUFFIX}"

    # --- loading ----------------------------------------------------------------------

    def load(self) -> None:
        make_dirs(self.root)
        for path in sorted(self.root.iterdir()):
            stem, suffix = path.stem, path.suffix
            if not stem.isdigit() or int(stem) == 0:
                continue
            if suffix == _ENTRIES_SUFFIX:
                self._ledgers[int(stem)] = self._load_file(path)
            elif suffix == _FENCED_SUFFIX:
                self._fenced_only.add(int(stem))
        for ledger_id in list(self._fenced_only):
            if ledger_id in self._ledgers:
                self._ledgers[ledger_id].fenced = True
                self._fenced_only.discard(ledger_id)

    def _load_file(self, path: Path) -> _Ledger:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise StorageError(f"cannot read {path}: {exc}") from exc
        header = decode_segment_header(data, LEDGER_LAYOUT_VERSION)
        if isinstance(header, str):
            raise StorageError(f"{path}: {header}")
        ledger = _Ledger(header.first_txid)
        pos = SEGMENT_HEADER_BYTES
        while pos < len(data):
            frame = parse_frame(data, pos)
            if isinstance(frame, Frame) and frame.txid == ledger.last_entry + 1:
                pos = frame.end
                ledger.offsets.append(pos)
                continue
            torn = not isinstance(frame, Frame) and (
                frame.problem is Problem.SHORT or is_zero_fill(data, pos))
            if not torn:
                # Corruption inside: keep the good prefix; re-replication restores the rest.
                log.error("ledger file %s damaged at byte %d: %s", path, pos,
                          frame if not isinstance(frame, Frame) else "entry id out of order")
            self._cut(path, pos)
            break
        return ledger

    @staticmethod
    def _cut(path: Path, size: int) -> None:
        try:
            with open(path, "r+b") as f:
                f.truncate(size)
                os.fsync(f.fileno())
        except OSError as exc:
            raise StorageError(f"cannot cut the torn tail of {path}: {exc}") from exc

    # --- calls ------------------------------------------------------------------------

    def state(self, ledger_id: int) -> lp.LedgerState:
        ledger = self._ledgers.get(check_ledger_id(ledger_id))
        if ledger is None:
            return lp.LedgerState(False, 0, -1, -1, ledger_id in self._fenced_only)
        return ledger.state()

    def ledger_ids(self) -> list[int]:
        return sorted(self._ledgers)

    def held(self) -> list[LedgerHeld]:
        """Every ledger with its first and last entry here (the keeper's heartbeat)."""
        return [LedgerHeld(i, x.first_entry, x.last_entry)
                for i, x in sorted(self._ledgers.items())]

    def fence(self, ledger_id: int) -> lp.LedgerState:
        check_ledger_id(ledger_id)
        ledger = self._ledgers.get(ledger_id)
        fenced = ledger.fenced if ledger is not None else ledger_id in self._fenced_only
        if not fenced:
            path = self._fenced_path(ledger_id)
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))
            except OSError as exc:
                raise StorageError(f"cannot create {path}: {exc}") from exc
            fsync_dir(self.root)
            if ledger is None:
                self._fenced_only.add(ledger_id)
            else:
                ledger.fenced = True
        return self.state(ledger_id)

    def add(self, req: lp.AddEntriesRequest) -> int:
        """Store ``req``'s entries durably; the last entry id now held."""
        last = self.stage(req)
        self.sync()
        return last

    def sync(self) -> None:
        """Make every staged add durable (one fdatasync per ledger file touched: the group
        commit of the adds the node took since the last sync)."""
        while self._unsynced:
            ledger_id = self._unsynced.pop()
            path = self._entries_path(ledger_id)
            try:
                fd = os.open(path, os.O_WRONLY)
            except OSError as exc:
                raise StorageError(f"cannot open {path}: {exc}") from exc
            try:
                datasync(fd)
            except OSError as exc:
                raise StorageError(f"fdatasync of {path} failed: {exc}") from exc
            finally:
                os.close(fd)

    def stage(self, req: lp.AddEntriesRequest) -> int:
        """Check and write ``req``'s entries, not yet durable: :meth:`sync` before any
        answer. The last entry id now held."""
        check_ledger_id(req.ledger_id)
        ledger = self._ledgers.get(req.ledger_id)
        fenced = ledger.fenced if ledger is not None else req.ledger_id in self._fenced_only
        if fenced and not req.recovery:
            raise LedgerFenced(f"ledger {req.ledger_id} is fenced: a newer writer recovered it")
        bounds = _check_frames(req)
        next_entry = req.first_entry if ledger is None else ledger.last_entry + 1
        if req.first_entry > next_entry or (not req.recovery and req.first_entry != next_entry):
            raise LedgerOutOfOrder(
                f"ledger {req.ledger_id}: entries from {req.first_entry} do not continue "
                f"this node's copy (next entry {next_entry})")
        # A recovery may resend entries this node holds already: the one writer wrote them
        # all, so they are the same; only the part past our end is written.
        skip = next_entry - req.first_entry
        if skip >= req.count:
            assert ledger is not None  # skip > 0 only when this node holds entries
            return ledger.last_entry
        if ledger is None:
            ledger = self._create(req.ledger_id, req.first_entry, fenced)
        self._append(req.ledger_id, ledger, req.entries, bounds[skip:])
        ledger.lac = max(ledger.lac, min(req.lac, ledger.last_entry))
        return ledger.last_entry

    def _create(self, ledger_id: int, first_entry: int, fenced: bool) -> _Ledger:
        path = self._entries_path(ledger_id)
        data = encode_segment_header(first_entry, LEDGER_LAYOUT_VERSION)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot create {path}: {exc}") from exc
        try:
            write_all(fd, data, path)
            os.fsync(fd)
        except OSError as exc:
            raise StorageError(f"fsync of {path} failed: {exc}") from exc
        finally:
            os.close(fd)
        fsync_dir(self.root)
        ledger = _Ledger(first_entry, fenced=fenced)
        self._ledgers[ledger_id] = ledger
        self._fenced_only.discard(ledger_id)
        return ledger

    def _append(self, ledger_id: int, ledger: _Ledger, data: bytes, bounds: list[int]) -> None:
        path = self._entries_path(ledger_id)
        end = ledger.offsets[-1]
        try:
            fd = os.open(path, os.O_WRONLY)
        except OSError as exc:
            raise StorageError(f"cannot open {path}: {exc}") from exc
        try:
            os.lseek(fd, end, os.SEEK_SET)
            write_all(fd, memoryview(data)[bounds[0]:], path)
        except OSError as exc:
            raise StorageError(f"write to {path} failed: {exc}") from exc
        finally:
            os.close(fd)
        ledger.offsets.extend(end + b - bounds[0] for b in bounds[1:])
        self._unsynced.add(ledger_id)

    def read(self, req: lp.ReadEntriesRequest) -> lp.ReadEntriesResponse:
        check_ledger_id(req.ledger_id)
        if req.from_entry < 0 or req.max_entries < 1 or req.max_bytes < 1:
            raise InvalidArgument("read_entries: from_entry >= 0, max_entries and max_bytes "
                                  ">= 1 needed")
        ledger = self._ledgers.get(req.ledger_id)
        if ledger is None or not ledger.first_entry <= req.from_entry <= ledger.last_entry:
            last, lac = (ledger.last_entry, ledger.lac) if ledger else (-1, -1)
            return lp.ReadEntriesResponse(req.from_entry, 0, b"", last, lac)
        first = req.from_entry - ledger.first_entry
        stop = min(first + req.max_entries, len(ledger.offsets) - 1)
        start_offset = ledger.offsets[first]
        # At least one entry, then as many as fit in max_bytes.
        while stop > first + 1 and ledger.offsets[stop] - start_offset > req.max_bytes:
            stop -= 1
        size = ledger.offsets[stop] - start_offset
        path = self._entries_path(req.ledger_id)
        try:
            with open(path, "rb") as f:
                data = os.pread(f.fileno(), size, start_offset)
        except OSError as exc:
            raise StorageError(f"cannot read {path}: {exc}") from exc
        return lp.ReadEntriesResponse(req.from_entry, stop - first, data, ledger.last_entry,
                                      ledger.lac)

    def delete(self, ledger_id: int) -> None:
        check_ledger_id(ledger_id)
        removed = False
        for path in (self._entries_path(ledger_id), self._fenced_path(ledger_id)):
            try:
                path.unlink()
                removed = True
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise StorageError(f"cannot delete {path}: {exc}") from exc
        self._ledgers.pop(ledger_id, None)
        self._fenced_only.discard(ledger_id)
        self._unsynced.discard(ledger_id)
        if removed:
            fsync_dir(self.root)


def _check_frames(req: lp.AddEntriesRequest) -> list[int]:
    """Offsets of each frame of ``req.entries`` plus the end; every frame checked (CRC,
    opcode, consecutive entry ids from ``first_entry``, exactly ``count`` of them)."""
    if req.count < 1 or req.first_entry < 0:
        raise InvalidArgument("add_entries needs count >= 1 and first_entry >= 0")
    bounds = [0]
    data = req.entries
    for index in range(req.count):
        frame = parse_frame(data, bounds[-1])
        if not isinstance(frame, Frame):
            raise InvalidArgument(f"entry {index} of the batch: {frame.problem.value} "
                                  f"({frame.detail})")
        if frame.opcode != lp.ENTRY_OPCODE or frame.txid != req.first_entry + index:
            raise InvalidArgument(f"entry {index} of the batch: opcode {frame.opcode}, "
                                  f"entry id {frame.txid}; expected entry "
                                  f"{req.first_entry + index}")
        bounds.append(frame.end)
    if bounds[-1] != len(data):
        raise InvalidArgument(f"add_entries: {len(data) - bounds[-1]} bytes after the "
                              f"{req.count} entries")
    return bounds
