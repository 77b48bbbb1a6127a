"""One journal on a JournalNode's disk: segments plus the promises of the quorum protocol.

Layout (``<journal_dir>/<journal_id>/current/``)::

    VERSION                   journal id, cluster id, namespace id (written by format)
    last-promised-epoch       no writer below this epoch is obeyed (HDFS: lastPromisedEpoch)
    last-writer-epoch         the epoch of the writer that last started a segment
    committed-txid            highest txid the writer said a quorum stored (a hint: see below)
    journal-nodes             every JournalNode of the journal (the writer names them)
    paxos/<start>             the recovery this node accepted for segment <start>
    edits_inprogress_<start>, edits_<start>-<end>    the NameNode's own segment format

:class:`Journal` is synchronous and not thread-safe: the JournalNode runs every call of one
journal on that journal's own worker thread, in arrival order. Each method checks everything
before it changes anything, and every change is durable (file and directory fsynced) before
it returns -- except ``committed-txid``, which is a hint, as in HDFS (a lower value after a
crash only makes tailing readers wait for the writer's next call, and recovery takes the
highest any node reports).

The rules (HDFS-3077):

* a request whose epoch is below the promise fails with :class:`~xdfs.errors.Fenced`; a
  higher one raises the promise (a newer writer has arrived);
* ``journal`` and ``heartbeat`` come only from the writer that started the open segment;
  records must continue the segment exactly (else :class:`~xdfs.errors.JournalOutOfSync`),
  and every frame and txid is checked before anything is written;
* ``start_log_segment`` refuses to overlap what is stored. An older in-progress segment left
  by this same writer (this node fell out of sync) is finalized at its own end: a prefix of
  what the others hold. One left by an older writer may hold records that recovery dropped,
  so it is moved aside (``.stale``), never deleted.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec

from xdfs.common.files import (
    atomic_write,
    fsync_dir,
    make_dirs,
    read_number_file,
    write_number_file,
)
from xdfs.editlog.framing import (
    SEGMENT_HEADER_BYTES,
    FrameProblem,
    encode_segment_header,
    parse_frame,
)
from xdfs.editlog.segments import (
    FileJournal,
    SegmentReader,
    finalize_file,
    segment_index,
    segment_name,
    truncate_segment,
)
from xdfs.errors import (
    Fenced,
    InvalidArgument,
    JournalOutOfSync,
    NotFormatted,
    StorageError,
    WrongCluster,
)
from xdfs.protocol import journal as j

log = logging.getLogger(__name__)

PROMISED_FILE = "last-promised-epoch"
WRITER_FILE = "last-writer-epoch"
COMMITTED_FILE = "committed-txid"
PAXOS_DIR = "paxos"
STALE_SUFFIX = ".stale"
NODES_FILE = "journal-nodes"


class VersionFile(msgspec.Struct):
    journal_id: str
    namespace: j.JournalNamespace


class AcceptedRecovery(msgspec.Struct):
    segment: j.SegmentState
    accepted_epoch: int


@dataclass
class _Segment:
    """What this node holds of one segment; ``offsets`` are the file offsets of each
    record plus the end (built when first needed, then kept for the open segment)."""

    start: int
    end: int
    in_progress: bool
    path: Path
    offsets: list[int] | None = None
    layout_version: int = 0

    def state(self) -> j.SegmentState:
        return j.SegmentState(self.start, self.end, self.in_progress)


class Journal:
    def __init__(self, root: Path, journal_id: str) -> None:
        self.journal_id = j.check_journal_id(journal_id)
        self.root = root
        self.current = root / "current"
        self.namespace: j.JournalNamespace | None = None
        self.promised_epoch = 0
        self.writer_epoch = 0
        self.committed_txid = 0
        self.nodes: tuple[str, ...] = ()  # every JournalNode of this journal (its writer says)
        self._segments: dict[int, _Segment] = {}
        self._writer: FileJournal | None = None  # the open segment's file
        self._open: _Segment | None = None

    # -- loading --------------------------------------------------------------------------

    def load(self) -> None:
        """Read the state files and settle the in-progress segments a crash left (their
        torn tails are cut: a JournalNode acknowledges only what it fsynced)."""
        version = self.current / "VERSION"
        if not version.exists():
            return
        try:
            info = msgspec.json.decode(version.read_bytes(), type=VersionFile)
        except (OSError, msgspec.MsgspecError) as exc:
            raise StorageError(f"cannot read {version}: {exc}") from exc
        if info.journal_id != self.journal_id:
            raise StorageError(f"{version} belongs to journal {info.journal_id!r}")
        self.namespace = info.namespace
        self.promised_epoch = read_number_file(self.current / PROMISED_FILE, "an epoch")
        self.writer_epoch = read_number_file(self.current / WRITER_FILE, "an epoch")
        self.committed_txid = read_number_file(self.current / COMMITTED_FILE, "a txid")
        nodes = self.current / NODES_FILE
        if nodes.exists():
            self.nodes = tuple(nodes.read_text().split())
        for found in segment_index(self.current):
            segment = self._load_segment(found.start, found.end, found.path)
            if segment is not None:
                self._segments[found.start] = segment

    def _load_segment(self, start: int, end: int | None, path: Path) -> _Segment | None:
        """A finalized segment is read (and checked) when first read; an in-progress one
        now, to cut a torn tail (None: only a torn header was there, now deleted)."""
        if end is not None:
            return _Segment(start, end, False, path)
        scan = scan_segment_allowing_torn(path, start)
        if scan is None:
            return None
        return _Segment(start, scan.last_txid, True, path, scan.offsets, scan.header_version)

    @property
    def formatted(self) -> bool:
        return self.namespace is not None

    @property
    def last_txid(self) -> int:
        return max((s.end for s in self._segments.values()), default=0)

    def state(self) -> j.JournalState:
        return j.JournalState(self.formatted, self.namespace, self.promised_epoch,
                              self.writer_epoch, self.committed_txid, self.last_txid)

    # -- checks ---------------------------------------------------------------------------

    def _check_formatted(self) -> None:
        if self.namespace is None:
            raise NotFormatted(f"journal {self.journal_id} is not formatted on this node")

    def _check_namespace(self, namespace: j.JournalNamespace) -> None:
        self._check_formatted()
        if namespace != self.namespace:
            raise WrongCluster(f"journal {self.journal_id} holds namespace {self.namespace}, "
                               f"not {namespace}")

    def _check_request(self, req: j.RequestInfo) -> None:
        """A writer's request: fenced below the promise; a newer epoch raises it."""
        self._check_formatted()
        if req.epoch < self.promised_epoch:
            raise Fenced(f"journal {self.journal_id}: epoch {req.epoch} is below the "
                         f"promised epoch {self.promised_epoch}")
        if req.epoch > self.promised_epoch:
            self._promise(req.epoch)
        self.committed_txid = max(self.committed_txid, req.committed_txid)

    def _check_writer(self, req: j.RequestInfo) -> None:
        """The writer of the open segment. A newer epoch than the one that started it is
        the current writer, which has not started a segment here yet: this node is out of
        sync (it joins at the next segment), not a reason to stop the writer."""
        self._check_request(req)
        if req.epoch != self.writer_epoch:
            raise JournalOutOfSync(
                f"journal {self.journal_id}: epoch {req.epoch} started no segment here "
                f"(the last writer here was epoch {self.writer_epoch})"
            )

    def _promise(self, epoch: int) -> None:
        write_number_file(self.current / PROMISED_FILE, epoch)
        self.promised_epoch = epoch

    def _abort_open_segment(self) -> None:
        """Stop writing the open segment (a new writer arrived); its file stays as is."""
        if self._writer is not None:
            self._writer.close_sync()
        self._writer = None
        self._open = None

    # -- the protocol ---------------------------------------------------------------------

    def format(self, namespace: j.JournalNamespace, *, force: bool,
               nodes: Sequence[str] = ()) -> None:
        leftovers = segment_index(self.current) if self.current.is_dir() else []
        if (self._segments or leftovers) and not force:
            raise InvalidArgument(f"journal {self.journal_id} holds edits (up to txid "
                                  f"{self.last_txid}): refusing to format it without force")
        if self.namespace is not None and self.namespace != namespace and not force:
            raise WrongCluster(f"journal {self.journal_id} belongs to namespace "
                               f"{self.namespace}: refusing to format it without force")
        self._abort_open_segment()
        make_dirs(self.current)
        for leftover in leftovers:
            _unlink(leftover.path)
        self._segments.clear()
        paxos = self.current / PAXOS_DIR
        for entry in paxos.iterdir() if paxos.is_dir() else ():
            _unlink(entry)
        make_dirs(paxos)
        for name in (PROMISED_FILE, WRITER_FILE, COMMITTED_FILE):
            write_number_file(self.current / name, 0)
        atomic_write(self.current / "VERSION",
                     msgspec.json.encode(VersionFile(self.journal_id, namespace)))
        self.namespace = namespace
        self.promised_epoch = self.writer_epoch = self.committed_txid = 0
        self._remember_nodes(nodes)
        log.info("journal %s formatted for namespace %s", self.journal_id, namespace)

    def new_epoch(self, namespace: j.JournalNamespace, epoch: int) -> int:
        self._check_namespace(namespace)
        if epoch <= self.promised_epoch:
            raise Fenced(f"journal {self.journal_id}: proposed epoch {epoch} is not above "
                         f"the promised epoch {self.promised_epoch}")
        self._promise(epoch)
        self._abort_open_segment()
        log.info("journal %s: promised epoch %d", self.journal_id, epoch)
        return max(self._segments, default=0)

    def start_log_segment(self, req: j.RequestInfo, first_txid: int, layout: int,
                          nodes: Sequence[str] = ()) -> None:
        self._check_request(req)
        self._remember_nodes(nodes)
        if first_txid < 1:
            raise InvalidArgument(f"segment start txid {first_txid} < 1")
        self._abort_open_segment()
        for segment in sorted(self._segments.values(), key=lambda s: s.start):
            self._settle_before_start(segment, first_txid, req.epoch)
        if req.epoch != self.writer_epoch:
            write_number_file(self.current / WRITER_FILE, req.epoch)
            self.writer_epoch = req.epoch
        previous_end = self.last_txid
        writer = FileJournal(self.current, layout)
        writer.start_segment_sync(first_txid)
        segment = _Segment(first_txid, first_txid - 1, True,
                           self.current / segment_name(first_txid),
                           [SEGMENT_HEADER_BYTES], layout)
        self._segments[first_txid] = segment
        self._writer, self._open = writer, segment
        if previous_end and first_txid > previous_end + 1:
            log.warning("journal %s: rejoins at txid %d without txids %d-%d (the other "
                        "nodes hold them)", self.journal_id, first_txid, previous_end + 1,
                        first_txid - 1)

    def _remember_nodes(self, nodes: Sequence[str]) -> None:
        if nodes and tuple(nodes) != self.nodes:
            atomic_write(self.current / NODES_FILE, "\n".join(nodes).encode() + b"\n")
            self.nodes = tuple(nodes)

    def _settle_before_start(self, segment: _Segment, first_txid: int, epoch: int) -> None:
        """Make room for a segment at ``first_txid``. Finalized segments must end before
        it. An in-progress one with no record goes. One of an older writer was never
        recovered here, so its records may be ones recovery dropped: moved aside. One of
        this writer (this node fell out of sync) is finalized at its own end, a prefix of
        what the others hold, if it ends before ``first_txid``."""
        if not segment.in_progress:
            if segment.end >= first_txid:
                raise JournalOutOfSync(
                    f"journal {self.journal_id}: a segment at txid {first_txid} would "
                    f"overlap {segment.path.name}"
                )
            return
        if segment.end < segment.start:
            self._forget(segment)
        elif epoch != self.writer_epoch:
            self._move_aside(segment)
        elif segment.end < first_txid:
            self._finalize(segment, segment.end)
        else:
            raise JournalOutOfSync(
                f"journal {self.journal_id}: {segment.path.name} of this writer already "
                f"holds txids {segment.start}-{segment.end}; a segment cannot start at "
                f"{first_txid}"
            )

    def _forget(self, segment: _Segment) -> None:
        """Delete a segment file that holds no record (a crash right after it was made)."""
        _unlink(segment.path)
        fsync_dir(self.current)
        del self._segments[segment.start]

    def _move_aside(self, segment: _Segment) -> None:
        target = segment.path.with_name(segment.path.name + STALE_SUFFIX)
        try:
            os.replace(segment.path, target)
        except OSError as exc:
            raise StorageError(f"cannot move {segment.path} aside: {exc}") from exc
        fsync_dir(self.current)
        del self._segments[segment.start]
        log.warning("journal %s: moved %s aside (txids %d-%d from an older writer, never "
                    "recovered here)", self.journal_id, target.name, segment.start, segment.end)

    def journal(self, req: j.RequestInfo, segment_txid: int, first_txid: int, count: int,
                records: bytes) -> None:
        self._check_writer(req)
        segment = self._open
        if segment is None or segment.start != segment_txid or self._writer is None:
            raise JournalOutOfSync(
                f"journal {self.journal_id}: no open segment at txid {segment_txid}"
                + (f" (the open one starts at {segment.start})" if segment else "")
            )
        if first_txid != segment.end + 1:
            raise JournalOutOfSync(
                f"journal {self.journal_id}: records from txid {first_txid}, expected "
                f"{segment.end + 1} (a gap, an overlap or a reordering)"
            )
        bounds = check_records(records, first_txid, count)
        self._writer.write_sync(records)
        assert segment.offsets is not None
        base = segment.offsets[-1]
        segment.offsets.extend(base + b for b in bounds[1:])
        segment.end = first_txid + count - 1

    def heartbeat(self, req: j.RequestInfo) -> None:
        self._check_writer(req)

    def finalize(self, req: j.RequestInfo, start: int, end: int) -> None:
        self._check_request(req)
        segment = self._segments.get(start)
        if segment is None:
            raise JournalOutOfSync(f"journal {self.journal_id}: no segment starts at {start}")
        if not segment.in_progress:
            if segment.end != end:
                raise JournalOutOfSync(f"journal {self.journal_id}: {segment.path.name} is "
                                       f"finalized, not at txid {end}")
            return
        if segment.end != end:
            raise JournalOutOfSync(f"journal {self.journal_id}: cannot finalize segment "
                                   f"{start} at txid {end}: it holds txids up to {segment.end}")
        if segment is self._open:
            self._abort_open_segment()
        self._finalize(segment, end)
        write_number_file(self.current / COMMITTED_FILE, self.committed_txid)

    def _finalize(self, segment: _Segment, end: int) -> None:
        path = finalize_file(self.current, segment.start, end)
        if path is None:  # no record: the file is gone
            del self._segments[segment.start]
            return
        segment.path, segment.end, segment.in_progress = path, end, False

    def purge(self, req: j.RequestInfo, min_txid: int) -> int:
        self._check_request(req)
        doomed = [s for s in self._segments.values() if not s.in_progress and s.end < min_txid]
        for segment in doomed:
            _unlink(segment.path)
            del self._segments[segment.start]
        stale = [p for p in self.current.iterdir()
                 if p.name.endswith(STALE_SUFFIX) and _stale_start(p) < min_txid]
        paxos = [p for p in (self.current / PAXOS_DIR).iterdir()
                 if p.name.isdigit() and int(p.name) < min_txid]
        for path in (*stale, *paxos):
            _unlink(path)
        if doomed or stale or paxos:
            fsync_dir(self.current)
            fsync_dir(self.current / PAXOS_DIR)
        return len(doomed) + len(stale) + len(paxos)

    def prepare_recovery(
        self, req: j.RequestInfo, segment_txid: int
    ) -> j.PrepareRecoveryResponse:
        self._check_request(req)
        if self._open is not None and self._open.start == segment_txid:
            self._abort_open_segment()
        segment = self._segments.get(segment_txid)
        held = segment is not None and segment.end >= segment.start
        state = segment.state() if segment is not None and held else None
        accepted = self._accepted(segment_txid)
        # the recovery record counts only for the copy it describes
        vouched = accepted is not None and state is not None and accepted.segment == _as_open(state)
        epoch = accepted.accepted_epoch if accepted is not None and vouched else 0
        return j.PrepareRecoveryResponse(state, epoch, self.writer_epoch, self.committed_txid)

    def accept_recovery(self, req: j.RequestInfo, chosen: j.SegmentState, layout: int,
                        records: bytes) -> None:
        self._check_request(req)
        start, end = chosen.start_txid, chosen.end_txid
        if start <= self.committed_txid and end < self.committed_txid:
            raise InvalidArgument(
                f"journal {self.journal_id}: accepting segment {start}-{end} would drop "
                f"txids up to the committed {self.committed_txid}"
            )
        check_records(records, start, end - start + 1)
        if self._open is not None and self._open.start == start:
            self._abort_open_segment()
        for other in [s for s in self._segments.values() if s.in_progress and s.start != start]:
            self._move_aside(other)  # an older writer's, never recovered here
        existing = self._segments.get(start)
        if existing is not None and not existing.in_progress:
            if existing.end != end:
                raise JournalOutOfSync(f"journal {self.journal_id}: {existing.path.name} is "
                                       f"finalized; recovery chose {start}-{end}")
        else:
            self._replace_in_progress(start, end, layout, records)
        atomic_write(self.current / PAXOS_DIR / str(start),
                     msgspec.msgpack.encode(AcceptedRecovery(_as_open(chosen), req.epoch)))

    def _replace_in_progress(self, start: int, end: int, layout: int, records: bytes) -> None:
        path = self.current / segment_name(start)
        atomic_write(path, encode_segment_header(start, layout) + records)
        segment = _Segment(start, end, True, path, None, layout)
        self._segments[start] = segment

    def _accepted(self, segment_txid: int) -> AcceptedRecovery | None:
        path = self.current / PAXOS_DIR / str(segment_txid)
        try:
            return msgspec.msgpack.decode(path.read_bytes(), type=AcceptedRecovery)
        except FileNotFoundError:
            return None
        except (OSError, msgspec.MsgspecError) as exc:
            raise StorageError(f"cannot read the recovery record {path}: {exc}") from exc

    def manifest(self, since_txid: int, in_progress_ok: bool) -> j.ManifestResponse:
        self._check_formatted()
        segments = [
            s.state() for s in sorted(self._segments.values(), key=lambda s: s.start)
            if s.end >= max(since_txid, s.start) and (in_progress_ok or not s.in_progress)
        ]
        return j.ManifestResponse(segments, self.committed_txid)

    def read(
        self, from_txid: int, max_txns: int, max_bytes: int, epoch: int
    ) -> j.ReadEditsResponse:
        self._check_formatted()
        if max_txns < 1 or max_bytes < 1:
            raise InvalidArgument("max_txns and max_bytes must be >= 1")
        if epoch and epoch < self.promised_epoch:
            raise Fenced(f"journal {self.journal_id}: epoch {epoch} is below the promised "
                         f"epoch {self.promised_epoch}")
        segment = self._segment_holding(from_txid)
        if segment is None:
            return j.ReadEditsResponse(from_txid, 0, b"", self.committed_txid, 0)
        last = min(segment.end, from_txid + max_txns - 1)
        if segment.in_progress and not (epoch and epoch == self.promised_epoch):
            # Tailing readers see the open segment of the current writer up to the committed
            # txid; an in-progress segment left by a crash may hold records its recovery
            # drops, so nobody but the writer reads it before it is finalized.
            if segment is not self._open:
                last = from_txid - 1
            last = min(last, self.committed_txid)
        if last < from_txid:
            return j.ReadEditsResponse(from_txid, 0, b"", self.committed_txid, 0)
        offsets = self._offsets(segment)
        first_index = from_txid - segment.start
        stop = first_index + 1
        limit = offsets[first_index] + max_bytes
        while stop <= last - segment.start and offsets[stop + 1] <= limit:
            stop += 1
        data = _read_range(segment.path, offsets[first_index], offsets[stop])
        return j.ReadEditsResponse(from_txid, stop - first_index, data, self.committed_txid,
                                   segment.layout_version)

    def _segment_holding(self, txid: int) -> _Segment | None:
        """The segment holding ``txid``, a finalized one first."""
        holding = [s for s in self._segments.values() if s.start <= txid <= s.end]
        return min(holding, key=lambda s: s.in_progress, default=None)

    def _offsets(self, segment: _Segment) -> list[int]:
        if segment.offsets is None:
            reader = SegmentReader(segment.path, layout_version=None,
                                   expected_start=segment.start,
                                   expected_end=None if segment.in_progress else segment.end)
            offsets = [offset for _txid, _op, _payload, offset in reader]
            offsets.append(reader.valid_bytes)
            segment.offsets = offsets
            segment.layout_version = reader.header.layout_version if reader.header else 0
        return segment.offsets

    # -- catching up from a peer (the syncer) ----------------------------------------------

    def missing(self, peer_segments: Sequence[j.SegmentState]) -> list[j.SegmentState]:
        """A peer's finalized segments that overlap nothing here: gaps this node has (it
        was down, or its disk was replaced) and may fill with the peer's copy, since
        finalized copies of a txid are the same everywhere."""
        return [
            peer for peer in peer_segments
            if not peer.in_progress and peer.txn_count > 0 and not any(
                s.start <= peer.end_txid and peer.start_txid <= s.end
                for s in self._segments.values())
        ]

    def install_finalized(self, segment: j.SegmentState, layout: int, records: bytes) -> bool:
        """Store a peer's finalized segment in a gap (checked again here, under the
        journal's thread); False when the gap is gone meanwhile."""
        self._check_formatted()
        if not self.missing([segment]):
            return False
        check_records(records, segment.start_txid, segment.txn_count)
        path = self.current / segment_name(segment.start_txid, segment.end_txid)
        atomic_write(path, encode_segment_header(segment.start_txid, layout) + records)
        self._segments[segment.start_txid] = _Segment(
            segment.start_txid, segment.end_txid, False, path, None, layout)
        return True

    def close(self) -> None:
        self._abort_open_segment()


def check_records(records: bytes, first_txid: int, count: int) -> list[int]:
    """Offsets of each record in ``records`` plus the end, after checking every frame (CRC)
    and txid: exactly ``count`` records ``first_txid``.. and nothing else."""
    if count < 1:
        raise InvalidArgument(f"a batch needs at least one record, not {count}")
    bounds = [0]
    for index in range(count):
        frame = parse_frame(records, bounds[-1])
        if isinstance(frame, FrameProblem):
            raise InvalidArgument(f"record {index} of the batch (txid {first_txid + index}) at "
                                  f"byte {frame.offset}: {frame.problem.value} ({frame.detail})")
        if frame.txid != first_txid + index:
            raise JournalOutOfSync(f"record {index} of the batch has txid {frame.txid}, "
                                   f"expected {first_txid + index}")
        bounds.append(frame.end)
    if bounds[-1] != len(records):
        raise InvalidArgument(f"{len(records) - bounds[-1]} byte(s) after the batch's "
                              f"{count} record(s)")
    return bounds


class _Scan:
    """What loading learns of an in-progress segment."""

    def __init__(self, last_txid: int, offsets: list[int], header_version: int) -> None:
        self.last_txid = last_txid
        self.offsets = offsets
        self.header_version = header_version


def scan_segment_allowing_torn(path: Path, start: int) -> _Scan | None:
    reader = SegmentReader(path, layout_version=None, expected_start=start, torn_tail="allow")
    offsets = [offset for _txid, _op, _payload, offset in reader]
    if reader.torn is not None:
        log.warning("cutting the torn tail of %s: %s (never acknowledged)", path, reader.torn)
        truncate_segment(path, reader.valid_bytes)
    if reader.header is None:  # a torn header: truncate_segment deleted the file
        return None
    offsets.append(reader.valid_bytes)
    return _Scan(reader.last_txid, offsets, reader.header.layout_version)


def _as_open(state: j.SegmentState) -> j.SegmentState:
    return j.SegmentState(state.start_txid, state.end_txid, True)


def _stale_start(path: Path) -> int:
    digits = path.name.removesuffix(STALE_SUFFIX).rpartition("_")[2]
    return int(digits) if digits.isdigit() else 0


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise StorageError(f"cannot delete {path}: {exc}") from exc


def _read_range(path: Path, start: int, end: int) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read(end - start)
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc}") from exc
    if len(data) != end - start:
        raise StorageError(f"{path}: {len(data)} of {end - start} bytes at offset {start}")
    return data
