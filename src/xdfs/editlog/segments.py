"""Edits segment files: names (pure), a validating reader, and :class:`FileJournal`, the writer
of one name dir's segments.

Names (19-digit zero-padded txids)::

    edits_inprogress_<start>     the open segment; records are appended to it
    edits_<start>-<end>          finalized: exactly txids start..end, renamed when closed

A segment file is the 20-byte header ``b"XDFSEDIT" | u32 layout_version | u64 first_txid``
then records with consecutive txids from ``first_txid`` (framing: :mod:`.framing`). An
in-progress segment with no records is deleted rather than finalized. The layout version is
the owner's (the NameNode's, a JournalNode's): writers are given it, readers are told which
one to expect (or None: any).

Reading (:class:`SegmentReader`) verifies the header, every CRC, and txid continuity. A
problem in the *final* record of a file -- the bytes end inside it (``SHORT``), or its length
field or CRC is bad and it reaches the end of the file, or the rest of the file is NUL bytes --
is a *torn tail*: the writer crashed mid-write. Whether a torn tail is acceptable is the
caller's choice (``torn_tail="allow"``, used for the last in-progress segment, where recovery
truncates it); anything else is corruption and raises :class:`~xdfs.errors.StorageError`
naming the file and the byte offset.

Durability in :class:`FileJournal`: a new segment's header is fdatasync'ed and its directory
fsynced before any record is written to it; each flush is ``write`` then ``fdatasync`` (a
flush returns only when durable); finalize renames and fsyncs the directory. An owner that
keeps a ``seen_txid`` (the NameNode) passes a hook, called with the txid to raise it to when
a segment starts (start - 1) and when one is finalized (its end); a JournalNode passes none.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal, TypeVar

import crc32c

from xdfs.common.aio import ALIGN
from xdfs.common.faults import fault_point
from xdfs.common.files import (
    TXID_DIGITS,
    datasync,
    file_system_type,
    fsync_dir,
    honours_dsync_writes,
    sync_data,
    write_all,
    write_dsync,
)
from xdfs.editlog.direct_appends import Appended, DirectAppends
from xdfs.editlog.framing import (
    CRC,
    CRC_BYTES,
    LENGTH_MIN,
    RECORD_BYTES_MAX,
    RECORD_HEAD,
    RECORD_HEAD_BYTES,
    SEGMENT_HEADER_BYTES,
    Frame,
    FrameProblem,
    Problem,
    SegmentHeader,
    decode_segment_header,
    encode_segment_header,
    is_zero_fill,
    parse_frame,
)
from xdfs.errors import StorageError

log = logging.getLogger("xdfs.editlog")

READ_CHUNK_BYTES = 1024 * 1024
#: Zeros a NameNode's segment is extended by ahead of its records (as HDFS does): a flush
#: that overwrites them leaves the file size alone, so its fdatasync writes the data block
#: and not the inode too (one disk write and wait instead of two per lone flush).
EDITS_PREALLOCATE_BYTES = 1024 * 1024
#: How ``SegmentReader.torn`` starts when only zeros follow the last record, nothing of a
#: next one: the preallocated end of a segment a crash left open (not a torn write: logged
#: as news, no warning).
ZEROS_AHEAD = "zeros written ahead of the next record"
T = TypeVar("T")
#: Raises the owner's ``seen_txid`` to the txid given (see the module docstring).
SeenTxidHook = Callable[[int], None]

# --- names (pure) ------------------------------------------------------------------------

_FINALIZED_RE = re.compile(r"^edits_(\d{19})-(\d{19})$")
_INPROGRESS_RE = re.compile(r"^edits_inprogress_(\d{19})$")


def segment_name(start: int, end: int | None = None) -> str:
    if end is None:
        return f"edits_inprogress_{start:0{TXID_DIGITS}d}"
    return f"edits_{start:0{TXID_DIGITS}d}-{end:0{TXID_DIGITS}d}"


def parse_segment_name(name: str) -> tuple[int, int | None] | None:
    """``(start, end)`` of a finalized segment, ``(start, None)`` of an in-progress one,
    None for any other name."""
    match = _FINALIZED_RE.match(name)
    if match:
        start, end = int(match.group(1)), int(match.group(2))
        return (start, end) if end >= start else None
    match = _INPROGRESS_RE.match(name)
    if match:
        return int(match.group(1)), None
    return None


@dataclass(frozen=True, order=True)
class SegmentInfo:
    start: int
    end: int | None  # None while in progress
    path: Path

    @property
    def in_progress(self) -> bool:
        return self.end is None

    @property
    def name(self) -> str:
        return self.path.name


def segment_index(directory: str | os.PathLike[str]) -> list[SegmentInfo]:
    """The segments of a ``current`` directory (or of a name dir: its ``current`` is used),
    sorted by start txid (an in-progress segment after a finalized one with the same start)."""
    path = Path(directory)
    if (path / "current").is_dir():
        path = path / "current"
    try:
        names = os.listdir(path)
    except OSError as exc:
        raise StorageError(f"cannot list {path}: {exc}") from exc
    out = []
    for name in names:
        parsed = parse_segment_name(name)
        if parsed is not None:
            out.append(SegmentInfo(parsed[0], parsed[1], path / name))
    out.sort(key=lambda s: (s.start, s.end is None, s.end or 0))
    return out


# --- reading -----------------------------------------------------------------------------


class SegmentReader:
    """Iterate ``(txid, opcode, payload, file_offset)`` of one segment file, validating as it
    goes. After iteration: ``last_txid`` (``start - 1`` when empty), ``count``,
    ``valid_bytes`` (end of the last good record, the truncation point of a torn tail) and
    ``torn`` (a description of the torn tail, None when the file ends cleanly).

    ``layout_version``: the one the header must carry (None: any, see ``header``).
    ``expected_start``/``expected_end``: what the file name promises (checked).
    ``torn_tail``: ``"error"`` treats a torn tail as corruption; ``"allow"`` stops there.
    """

    def __init__(
        self,
        path: Path,
        *,
        layout_version: int | None,
        expected_start: int | None = None,
        expected_end: int | None = None,
        torn_tail: Literal["error", "allow"] = "error",
        chunk_bytes: int = READ_CHUNK_BYTES,
    ) -> None:
        self.path = path
        self.layout_version = layout_version
        self.expected_start = expected_start
        self.expected_end = expected_end
        self.torn_tail = torn_tail
        self.chunk_bytes = chunk_bytes
        self.header: SegmentHeader | None = None
        self.last_txid = (expected_start or 1) - 1
        self.count = 0
        self.valid_bytes = 0
        self.torn: str | None = None
        self.file_bytes = 0

    def _fail(self, offset: int, what: str) -> StorageError:
        return StorageError(f"corrupt edits segment {self.path} at byte offset {offset}: {what}")

    def _tear(self, offset: int, what: str) -> None:
        if self.torn_tail != "allow":
            raise self._fail(offset, what)
        self.torn = f"{what} at byte offset {offset}"

    def __iter__(self) -> Iterator[tuple[int, int, bytes, int]]:
        try:
            f = open(self.path, "rb")  # noqa: SIM115 -- closed in finally below
        except OSError as exc:
            raise StorageError(f"cannot open edits segment {self.path}: {exc}") from exc
        try:
            yield from self._read(f)
        finally:
            f.close()
        self._check_end()

    def _read_header(self, f: BinaryIO) -> SegmentHeader | None:
        """The header, or None for a torn one (a crash while creating the segment)."""
        self.file_bytes = os.fstat(f.fileno()).st_size
        head = f.read(SEGMENT_HEADER_BYTES)
        header = decode_segment_header(head, self.layout_version)
        if isinstance(header, str):
            if len(head) < SEGMENT_HEADER_BYTES or is_zero_fill(head, 0):
                self._tear(0, header)
                return None
            raise self._fail(0, header)
        if self.expected_start is not None and header.first_txid != self.expected_start:
            raise self._fail(0, f"header says first txid {header.first_txid}, "
                                f"the name says {self.expected_start}")
        self.header = header
        return header

    def _read(self, f: BinaryIO) -> Iterator[tuple[int, int, bytes, int]]:
        header = self._read_header(f)
        if header is None:
            return
        read = f.read
        expected = header.first_txid
        self.last_txid = expected - 1
        self.valid_bytes = SEGMENT_HEADER_BYTES
        buf = b""
        base = SEGMENT_HEADER_BYTES  # file offset of buf[0]
        pos = 0
        eof = False
        need = 0
        unpack_head = RECORD_HEAD.unpack_from
        unpack_crc = CRC.unpack_from
        crc = crc32c.crc32c
        while True:
            if not eof and len(buf) - pos <= need:
                chunk = read(max(self.chunk_bytes, need + 1))
                if chunk:
                    buf = buf[pos:] + chunk
                    base += pos
                    pos = 0
                else:
                    eof = True
            # fast path: every complete, well-formed record already in buf
            size = len(buf)
            view = memoryview(buf)
            try:
                while size - pos >= RECORD_HEAD_BYTES:
                    length, opcode, txid = unpack_head(buf, pos)
                    end = pos + length + 8
                    if (length < LENGTH_MIN or length > RECORD_BYTES_MAX or end > size
                            or crc(view[pos + 4:end - 4]) != unpack_crc(buf, end - 4)[0]):
                        break
                    if txid != expected:
                        raise self._fail(base + pos, f"txid {txid} where {expected} was "
                                                     "expected (a gap or a reordering)")
                    yield txid, opcode, buf[pos + RECORD_HEAD_BYTES:end - CRC_BYTES], base + pos
                    self.last_txid = expected
                    self.count += 1
                    expected += 1
                    pos = end
                    self.valid_bytes = base + pos
            finally:
                view.release()
            # slow path: say exactly what stopped the fast one
            result = parse_frame(buf, pos)
            assert not isinstance(result, Frame), result
            if result.problem is Problem.SHORT and not eof:
                need = result.claimed_end - pos
                continue
            need = 0
            if pos == len(buf) and eof:
                return  # clean end
            self._problem_at_tail(f, buf, pos, base, result)
            return

    def _problem_at_tail(
        self, f: BinaryIO, buf: bytes, pos: int, base: int, result: FrameProblem
    ) -> None:
        offset = base + pos
        if is_zero_fill(buf, pos) and _zero_fill_from(f, base + len(buf), self.chunk_bytes):
            self._tear(offset, ZEROS_AHEAD)
            return
        what = f"{result.problem.value} ({result.detail}) in txid {self.last_txid + 1}"
        claimed_end = base + result.claimed_end
        if result.problem is Problem.SHORT or claimed_end >= self.file_bytes:
            self._tear(offset, what)
            return
        # The record claims to end before the file does: torn only if nothing but zero fill
        # follows what the last write may have left of it. A record with an intact head (a
        # bad CRC) may have a prefix on disk and zeros after it: an append torn inside
        # zeros written ahead (FileJournal's preallocation), or whose pages reached the
        # disk in part; with a bad length field only the head itself may hold non-zero
        # bytes (a head torn across sectors).
        if result.problem is Problem.BAD_CRC:
            zeros_from = claimed_end
        else:
            zeros_from = offset + RECORD_HEAD_BYTES
        if _zero_fill_from(f, zeros_from, self.chunk_bytes):
            self._tear(offset, what + ", followed by NUL fill")
            return
        raise self._fail(offset, what + ", followed by more data")

    def _check_end(self) -> None:
        if self.expected_end is not None and self.last_txid != self.expected_end:
            raise StorageError(
                f"corrupt edits segment {self.path} at byte offset {self.valid_bytes}: "
                f"ends at txid {self.last_txid}, its name says {self.expected_end}"
            )


def tail_log_level(torn: str) -> int:
    """How loudly to log cutting a segment's tail: a torn record is a warning, the zeros
    written ahead (``ZEROS_AHEAD``, every crash of a preallocating writer) only news."""
    return logging.INFO if torn.startswith(ZEROS_AHEAD) else logging.WARNING


def _zero_fill_from(f: BinaryIO, offset: int, chunk_bytes: int) -> bool:
    """Whether every byte of ``f`` from ``offset`` to its end is NUL."""
    f.seek(offset)
    while chunk := f.read(chunk_bytes):
        if not is_zero_fill(chunk, 0):
            return False
    return True


def scan_segment(
    info: SegmentInfo,
    *,
    layout_version: int | None,
    torn_tail: Literal["error", "allow"] = "error",
) -> SegmentReader:
    """Read a whole segment for validation only; returns the finished reader."""
    reader = SegmentReader(info.path, layout_version=layout_version, expected_start=info.start,
                           expected_end=info.end, torn_tail=torn_tail)
    for _ in reader:
        pass
    return reader


def truncate_segment(path: Path, valid_bytes: int) -> None:
    """Cut a torn tail off (``valid_bytes`` below a header: delete the file)."""
    fault_point("recovery.before_truncate")
    try:
        if valid_bytes < SEGMENT_HEADER_BYTES:
            path.unlink()
            fsync_dir(path.parent)
            return
        fd = os.open(path, os.O_WRONLY)
        try:
            os.ftruncate(fd, valid_bytes)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise StorageError(f"cannot truncate {path} to {valid_bytes} bytes: {exc}") from exc


def finalize_file(
    current: Path, start: int, last: int, seen_txid: SeenTxidHook | None = None
) -> Path | None:
    """Rename ``edits_inprogress_<start>`` to ``edits_<start>-<last>`` (or delete it when it
    holds no record, ``last < start``), fsync the directory, raise seen_txid (if kept)."""
    src = current / segment_name(start)
    fault_point("editlog.before_finalize")
    try:
        if last < start:
            src.unlink()
            fsync_dir(current)
            return None
        dst = current / segment_name(start, last)
        if dst.exists():
            raise StorageError(f"cannot finalize {src}: {dst.name} already exists")
        os.rename(src, dst)
    except OSError as exc:
        raise StorageError(f"cannot finalize edits segment {src}: {exc}") from exc
    fsync_dir(current)
    if seen_txid is not None:
        seen_txid(last)
    fault_point("editlog.after_finalize")
    return dst


def read_segment_records(
    current: Path, start: int, end: int, *, layout_version: int | None
) -> tuple[bytes, list[int]]:
    """The framed records ``start..end`` (fewer if the segment is shorter) of the segment
    of ``current`` that starts at ``start``, as one buffer and each record's offset in it
    (plus the end offset). For the edits replicator: CRCs and txid continuity are checked;
    a short record or zeros at the end of an in-progress segment (being written) end the
    read."""
    candidates = [s for s in segment_index(current) if s.start == start]
    if not candidates:
        raise StorageError(f"{current}: no edits segment starts at txid {start}")
    seg = min(candidates, key=lambda s: s.in_progress)  # a finalized copy first
    try:
        data = seg.path.read_bytes()
    except OSError as exc:
        raise StorageError(f"cannot read {seg.path}: {exc}") from exc
    header = decode_segment_header(data, layout_version)
    if isinstance(header, str) or header.first_txid != start:
        raise StorageError(f"{seg.path}: bad segment header ({header})")
    bounds = [SEGMENT_HEADER_BYTES]
    expected = start
    while expected <= end and bounds[-1] < len(data):
        frame = parse_frame(data, bounds[-1])
        if isinstance(frame, FrameProblem):
            if seg.in_progress and (frame.problem is Problem.SHORT
                                    or is_zero_fill(data, frame.offset)):
                break  # the writer's next record, not complete yet (or zeros ahead of it)
            raise StorageError(f"{seg.path} at byte offset {frame.offset}: {frame.detail}")
        if frame.txid != expected:
            raise StorageError(f"{seg.path} at byte offset {frame.offset}: txid "
                               f"{frame.txid}, expected {expected}")
        bounds.append(frame.end)
        expected += 1
    base = bounds[0]
    return data[base : bounds[-1]], [b - base for b in bounds]


# --- writing: one name dir ---------------------------------------------------------------


class FileJournal:
    """Writes the segments of one ``current`` directory. The blocking ``*_sync`` methods do
    the I/O; the async ones run them in a worker thread so the event loop never blocks.
    One writer at a time (its driver, such as the NameNode's ``EditLog``, ensures it).

    ``layout_version``: written into every new segment's header, and the one read back when
    recovering segments left open. ``seen_txid``: the owner's hook, if it keeps one.
    ``preallocate_bytes``: extend the open segment with zeros this many bytes at a time, made
    durable before records overwrite them (0: plain appends). Readers take the zeros after
    the last record for a torn tail, which recovery cuts off; finalize cuts them first."""

    def __init__(
        self,
        current: str | os.PathLike[str],
        layout_version: int,
        *,
        seen_txid: SeenTxidHook | None = None,
        preallocate_bytes: int = 0,
    ) -> None:
        self.current = Path(current)
        self.layout_version = layout_version
        self.seen_txid = seen_txid
        self.preallocate_bytes = preallocate_bytes
        #: Where the open segment's next record goes, and its size (zeros from one to the
        #: other when preallocating).
        self._end_bytes = 0
        self._allocated_bytes = 0
        self._fd: int | None = None
        self._start: int | None = None
        #: The open segment's file (for messages: a flush does not build it again).
        self._path: Path | None = None
        self._io: IoThread | None = None
        #: Whether a batch is written and synced by one ``pwritev`` with ``RWF_DSYNC``
        #: (the directory's file system honours it) instead of a write and an fdatasync.
        file_system = file_system_type(self.current)
        self._dsync_writes = honours_dsync_writes(file_system)
        #: A flush's write handed to the kernel (direct_appends.py): where the write makes
        #: itself durable and the segment is preallocated in whole blocks.
        self._direct = DirectAppends(
            self._dsync_writes and preallocate_bytes > 0 and preallocate_bytes % ALIGN == 0)
        log.info("edits in %s are on %s: each flush is %s", self.current,
                 file_system or "an unknown file system",
                 "a direct write durable when it completes (RWF_DSYNC, Linux AIO)"
                 if self._direct.enabled else
                 "one write durable when it returns (RWF_DSYNC)" if self._dsync_writes
                 else "a write then an fdatasync")

    @property
    def name(self) -> str:
        return str(self.current.parent)

    def __repr__(self) -> str:
        return f"FileJournal({str(self.current)!r})"

    @property
    def segment_start(self) -> int | None:
        return self._start

    # -- blocking core --

    def recover_unfinalized_sync(self, next_txid: int) -> None:
        """Before writing from ``next_txid``: finalize in-progress segments a crash left
        (the last one may have a torn tail, which is truncated) and check that no segment
        already holds ``next_txid`` or later."""
        segments = segment_index(self.current)
        open_ones = [s for s in segments if s.in_progress]
        for seg in open_ones:
            last_one = seg is open_ones[-1]
            reader = scan_segment(seg, layout_version=self.layout_version,
                                  torn_tail="allow" if last_one else "error")
            if reader.torn is not None:
                log.log(tail_log_level(reader.torn), "truncating the tail of %s: %s",
                        seg.path, reader.torn)
                truncate_segment(seg.path, reader.valid_bytes)
            if reader.header is None:
                continue  # deleted by truncate_segment
            log.info("finalizing %s left open (txids %d..%d)",
                     seg.path, seg.start, reader.last_txid)
            finalize_file(self.current, seg.start, reader.last_txid, self.seen_txid)
        for seg in segment_index(self.current):
            assert seg.end is not None
            if seg.end >= next_txid:
                raise StorageError(
                    f"{seg.path} already holds txids up to {seg.end}; "
                    f"cannot start writing at {next_txid}"
                )

    def start_segment_sync(self, first_txid: int) -> None:
        assert self._fd is None, "segment already open"
        path = self.current / segment_name(first_txid)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot create edits segment {path}: {exc}") from exc
        try:
            header = encode_segment_header(first_txid, self.layout_version)
            write_all(fd, header, path)
            self._end_bytes = self._allocated_bytes = SEGMENT_HEADER_BYTES
            if self.preallocate_bytes:
                self._zero_fill(fd, path, SEGMENT_HEADER_BYTES)
            datasync(fd)
            fsync_dir(self.current)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._start = first_txid
        self._path = path
        self._direct.segment_started(header)
        if self.seen_txid is not None:
            self.seen_txid(first_txid - 1)
        fault_point("editlog.segment_created")

    def write_sync(self, data: bytes | bytearray) -> None:
        """Append a batch of framed records and make it durable."""
        fd, path = self._fd, self._path
        assert fd is not None and path is not None, "no open segment"
        fault_point("editlog.before_write")
        end = self._end_bytes + len(data)
        if self.preallocate_bytes and end > self._allocated_bytes:
            # The zeros are durable before a record lands on them: a crash then leaves
            # records, a torn one, zeros; never the old contents of a block the size took in.
            self._zero_fill(fd, path, end)
            sync_data(fd, path)
        if self._dsync_writes:
            write_dsync(fd, data, self._end_bytes, path)
        else:
            write_all(fd, data, path, self._end_bytes)
        self._end_bytes = end
        self._direct.advanced(data, end)
        fault_point("editlog.before_fsync")  # (after a write that synced itself: durable)
        if not self._dsync_writes:
            sync_data(fd, path)
        fault_point("editlog.after_fsync")

    def _zero_fill(self, fd: int, path: Path, end: int) -> None:
        """Extend the open segment with zeros past ``end`` (whole steps of
        ``preallocate_bytes``), not moving the file offset the records are written at."""
        step = self.preallocate_bytes
        new_size = (end // step + 1) * step
        offset = self._allocated_bytes
        zeros = memoryview(bytes(min(step, new_size - offset)))
        try:
            while offset < new_size:
                offset += os.pwrite(fd, zeros[: new_size - offset], offset)
        except OSError as exc:
            raise StorageError(f"cannot extend {path} to {new_size} bytes: {exc}") from exc
        self._allocated_bytes = new_size

    def finalize_segment_sync(self, last_txid: int) -> Path | None:
        assert self._fd is not None and self._start is not None, "no open segment"
        start = self._start
        if self._allocated_bytes > self._end_bytes:
            # A finalized segment ends with its last record: the zeros go first, durably
            # (a finalized file with zeros after its records reads as corrupt).
            fd, path = self._fd, self._path
            assert fd is not None and path is not None
            try:
                os.ftruncate(fd, self._end_bytes)
                os.fsync(fd)
            except OSError as exc:
                raise StorageError(f"cannot cut the preallocated zeros off {path}: {exc}") \
                    from exc
            self._allocated_bytes = self._end_bytes
        self.close_sync()
        return finalize_file(self.current, start, last_txid, self.seen_txid)

    def close_sync(self) -> None:
        """Close the open segment's file without finalizing it (shutdown after a failure)."""
        self._direct.segment_closed()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            self._start = None
            self._path = None

    # -- async wrappers (the Journal protocol) --
    # Each journal has its own I/O thread, so edits never queue behind unrelated blocking
    # work in the loop's default executor (an image save, a block report).

    async def _run(self, fn: Callable[..., T], *args: object) -> T:
        if self._io is None:
            self._io = IoThread(f"edits {self.name}")
        return await self._io.run(fn, *args)

    async def recover_unfinalized(self, next_txid: int) -> None:
        await self._run(self.recover_unfinalized_sync, next_txid)

    async def start_segment(self, first_txid: int) -> None:
        await self._run(self.start_segment_sync, first_txid)

    def start_write(self, data: bytes | bytearray, first_txid: int, last_txid: int,
                    done: Callable[[BaseException | None], None]) -> bool:
        """Start a batch's write without a task: ``done(None)`` once it is durable, or
        ``done(error)``, called from the loop's reaping of the kernel's completion (the
        flush's waiters answered in the same loop turn). False when this batch cannot go
        that way (not a direct append, or one still in flight): :meth:`write` it instead.
        The journal's end moves when the write lands, whoever still waits for it."""
        path, end = self._path, self._end_bytes
        direct = self._direct
        if (path is None or not direct.fits(end, len(data), self._allocated_bytes)
                or direct.busy() or not direct.ready(path)):
            return False
        fault_point("editlog.before_write")

        def appended(outcome: Appended) -> None:
            if outcome is False:  # the kernel refused: through the I/O thread, as before
                _call_when_done(asyncio.ensure_future(self._run(self.write_sync, data)), done)
                return
            if outcome is not True:
                done(outcome)
                return
            self._end_bytes = end + len(data)
            try:
                fault_point("editlog.before_fsync")  # (a write durable by itself: synced)
                fault_point("editlog.after_fsync")
            except Exception as exc:  # an armed fault: the flush fails as a crash test asks
                done(exc)
                return
            done(None)

        direct.start_append(path, end, data, appended)
        return True

    async def write(self, data: bytes | bytearray, first_txid: int, last_txid: int) -> None:
        await self._direct.settled()
        written: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.start_write(data, first_txid, last_txid,
                            lambda error: _settle(written, None, error)):
            await written
            return
        await self._run(self.write_sync, data)

    async def finalize_segment(self, first_txid: int, last_txid: int) -> None:
        assert first_txid == self._start, (first_txid, self._start)
        await self._run(self.finalize_segment_sync, last_txid)

    def finalized_ranges(self) -> list[tuple[int, int]]:
        return [(s.start, s.end) for s in segment_index(self.current) if s.end is not None]

    async def close(self) -> None:
        await self._direct.close()
        if self._io is not None:
            io, self._io = self._io, None
            await io.stop()
        self.close_sync()


class IoThread:
    """One thread running blocking calls for an event loop, handed over with as little as
    a lone edits flush can pay: a queue put that wakes the thread, and one
    ``call_soon_threadsafe`` back with the outcome (``run_in_executor`` adds a concurrent
    future with its condition variable and the callbacks chaining it to an asyncio one)."""

    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put((fn, args, loop, future))
        return await future

    async def stop(self) -> None:
        """Stop once the calls queued before have run."""
        self._queue.put(None)
        await asyncio.to_thread(self._thread.join)

    def _serve(self) -> None:
        while (item := self._queue.get()) is not None:
            fn, args, loop, future = item
            try:
                result = fn(*args)
            except BaseException as exc:  # handed to the caller, whatever it is
                outcome: tuple[object, BaseException | None] = (None, exc)
            else:
                outcome = (result, None)
            with contextlib.suppress(RuntimeError):  # that loop closed: nobody waits
                loop.call_soon_threadsafe(_settle, future, *outcome)


_Call = tuple[Callable[..., Any], tuple[object, ...], asyncio.AbstractEventLoop,
              asyncio.Future[Any]]


def _call_when_done(task: asyncio.Future[None],
                    done: Callable[[BaseException | None], None]) -> None:
    """``done(None)`` or ``done(error)`` once ``task`` ends (cancelled: CancelledError)."""
    def ended(_task: asyncio.Future[None]) -> None:
        done(asyncio.CancelledError() if task.cancelled() else task.exception())
    task.add_done_callback(ended)


def _settle(future: asyncio.Future[Any], result: object, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
