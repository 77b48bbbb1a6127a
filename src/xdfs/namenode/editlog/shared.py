"""Shared edits: a NameNode's edits log on the quorum journal (HDFS's QJM, seed 001) next
to its local name dirs (``namenode.shared_edits = "qjournal://h1:p1;h2:p2;h3:p3/<id>"``).

Becoming the writer (:meth:`SharedEdits.take_over`), before the namespace is loaded:

1. a new epoch and the recovery of the newest segment on the JournalNodes
   (:meth:`~xdfs.quorum.writer.QuorumJournalWriter.become_writer`): every older writer is
   fenced and the journal's end ``E`` is fixed; every txid ever acknowledged is at or below
   it (a client hears "ok" only once a majority stored its txid);
2. the local dirs are trimmed to what the journal holds: a local in-progress segment keeps
   its records only as far as the journal has the same records, byte for byte, at the same
   txids (:func:`agreed_txid`), and the rest is cut off (kept beside it as ``.unacked``).
   Being at or below ``E`` is not enough: a NameNode killed after its own dirs synced a
   record that no majority stored finds, after a failover, another writer's record at that
   txid (and cutting only past ``E`` would replay the wrong one). A finalized local
   segment beyond ``E``, or a journal that ends before the newest image, would mean the
   journal lost acknowledged edits: refused;

then the namespace is loaded from the local image and edits, and :meth:`catch_up` reads
what the local dirs miss (at most a batch or two) from the JournalNodes, applies it and
writes it to every local dir as a finalized segment, so they hold the whole log again.

Writing: :class:`QuorumEditsJournal` is one more journal of the edits log, beside the
local ones; a flush is acknowledged only once every local dir and a majority of
JournalNodes have it durably (the EditLog waits for every journal). Losing the majority or
being fenced fails the edits log for good, and the NameNode stops.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from xdfs.common.files import atomic_write, fsync_dir
from xdfs.common.secrets import read_secret_file
from xdfs.config import XdfsConfig
from xdfs.editlog.framing import FrameProblem, parse_frame
from xdfs.editlog.segments import (
    FileJournal,
    SegmentReader,
    read_segment_records,
    segment_index,
    truncate_segment,
)
from xdfs.errors import StorageError, XdfsError
from xdfs.namenode.editlog.codec import decode_frame
from xdfs.namenode.editlog.editlog import NameDir
from xdfs.namenode.namespace.ops import LAYOUT_VERSION, Op
from xdfs.protocol.journal import JOURNAL_USER, JournalNamespace, parse_qjournal_uri
from xdfs.quorum.channel import JournalChannel, RpcJournalChannel
from xdfs.quorum.reader import JournalTailer, read_all, read_txids
from xdfs.quorum.writer import QuorumJournalWriter, WriterSettings
from xdfs.rpc.messages import PROTOCOL_VERSION, Hello
from xdfs.rpc.tls import client_context

log = logging.getLogger(__name__)

#: Largest batch -initializeSharedEdits sends in one ``journal`` call.
_COPY_BATCH_BYTES = 512 * 1024


def journal_channels(config: XdfsConfig, addresses: Sequence[str]) -> list[JournalChannel]:
    """One RPC channel per JournalNode, logged in with the journal secret."""
    secret = read_secret_file(config.journalnode.secret_file, "journalnode.secret_file")
    hello = Hello(PROTOCOL_VERSION, user=JOURNAL_USER, password=secret)
    rpc = config.rpc
    timeout_s = config.namenode.journal_call_timeout_s
    return [RpcJournalChannel(address, rpc, hello, call_timeout_s=timeout_s,
                              ssl_context=client_context(rpc)) for address in addresses]


def journal_tailer(config: XdfsConfig) -> JournalTailer:
    """A reader of ``namenode.shared_edits``' committed edits, long-polling as
    ``namenode.standby_tail_wait_s`` says (a standby NameNode's, a BackupNode's)."""
    addresses, journal_id = parse_qjournal_uri(config.namenode.shared_edits)
    nn = config.namenode
    return JournalTailer(journal_channels(config, addresses), journal_id,
                         batch_bytes=nn.edits_fetch_bytes_max, wait_s=nn.standby_tail_wait_s)


class SharedEdits:
    def __init__(
        self,
        config: XdfsConfig,
        namespace: JournalNamespace,
        *,
        on_fatal: Callable[[XdfsError], None] | None = None,
        channels: Sequence[JournalChannel] | None = None,
    ) -> None:
        addresses, journal_id = parse_qjournal_uri(config.namenode.shared_edits)
        nn = config.namenode
        self.uri = config.namenode.shared_edits
        self.writer = QuorumJournalWriter(
            channels if channels is not None else journal_channels(config, addresses),
            WriterSettings(journal_id, namespace,
                           write_timeout_s=nn.journal_write_timeout_s,
                           lag_max_s=nn.journal_lag_max_s,
                           call_timeout_s=nn.journal_call_timeout_s,
                           commit_notify_s=nn.journal_commit_notify_s,
                           heartbeat_interval_s=nn.journal_heartbeat_interval_s),
            on_fatal=on_fatal,
        )
        self.end: int | None = None

    @property
    def journal_id(self) -> str:
        return self.writer.journal_id

    async def take_over(self, currents: Sequence[Path], image_txid: int, *,
                        local_is_committed: bool = False) -> int | None:
        """Fence older writers, recover the journal, trim the local dirs to what it holds
        (``local_is_committed``: the dirs hold only records read from the journal, a
        standby's or a BackupNode's, so cutting them at its end is enough)."""
        self.end = await self.writer.become_writer()
        channels = None if local_is_committed else list(self.writer.channels.values())
        for current in currents:
            await trim_local(current, self.end, image_txid, channels, self.journal_id,
                             epoch=self.writer.epoch)
        return self.end

    async def catch_up(self, dirs: Sequence[NameDir], namespace: NamespaceTarget,
                       local_last: int,
                       on_applied: Callable[[int, Op], None] | None = None) -> int:
        """Apply and store locally the journal's txids after ``local_last``; returns the last
        txid the namespace now holds. ``on_applied(txid, op)`` after each op."""
        end = self.end
        if end is None or end <= local_last:
            return local_last
        records, _layout = await read_all(
            list(self.writer.channels.values()), self.journal_id, local_last + 1, end,
            epoch=self.writer.epoch,
        )
        for txid, op in decode_records(records, local_last + 1):
            try:
                namespace.apply(op)
            except XdfsError as exc:
                raise StorageError(f"replaying txid {txid} ({op.NAME}) from the shared "
                                   f"journal failed: {exc}") from exc
            if on_applied is not None:
                on_applied(txid, op)
        for directory in dirs:
            write_finalized(directory, local_last + 1, end, records)
        log.info("caught the local dirs up with the shared journal: txids %d..%d",
                 local_last + 1, end)
        return end

    async def initialize(self, current: Path, image_txid: int, *, force: bool) -> int:
        """``-initializeSharedEdits``: format the journal on every JournalNode and copy the
        local edits after the newest image into it; returns the last txid copied."""
        await self.writer.format(force=force)
        await self.writer.become_writer()
        last = image_txid
        for segment in segment_index(current):
            end = segment.end if segment.end is not None else _last_txid(segment.path)
            if end <= image_txid or end < segment.start:
                continue
            data, bounds = read_segment_records(current, segment.start, end,
                                                layout_version=LAYOUT_VERSION)
            await self._copy_segment(segment.start, end, data, bounds)
            last = end
        return last

    async def _copy_segment(self, start: int, end: int, data: bytes, bounds: list[int]) -> None:
        await self.writer.start_segment(start, LAYOUT_VERSION)
        first = 0
        while first < len(bounds) - 1:
            stop = first + 1
            while stop < len(bounds) - 1 and bounds[stop + 1] - bounds[first] <= _COPY_BATCH_BYTES:
                stop += 1
            await self.writer.write(data[bounds[first]:bounds[stop]], start + first,
                                    start + stop - 1)
            first = stop
        await self.writer.finalize_segment(start, end)

    def journal(self) -> QuorumEditsJournal:
        return QuorumEditsJournal(self)

    async def purge(self, min_txid: int) -> None:
        await self.writer.purge_logs_older_than(min_txid)

    async def close(self) -> None:
        await self.writer.close()


class NamespaceTarget(Protocol):
    """What catch_up needs of a namespace."""

    def apply(self, op: Op) -> tuple[int, ...]: ...


class QuorumEditsJournal:
    """The shared journal as one journal of the NameNode's edits log."""

    def __init__(self, shared: SharedEdits) -> None:
        self.shared = shared

    @property
    def name(self) -> str:
        return self.shared.uri

    async def recover_unfinalized(self, next_txid: int) -> None:
        end = self.shared.end
        if end is not None and next_txid != end + 1:
            raise StorageError(f"the shared journal ends at txid {end}; the edits log would "
                               f"start at {next_txid}")

    async def start_segment(self, first_txid: int) -> None:
        await self.shared.writer.start_segment(first_txid, LAYOUT_VERSION)

    async def write(self, data: bytes | bytearray, first_txid: int, last_txid: int) -> None:
        # bytes: a slow JournalNode may still be sending after the buffer is reused
        await self.shared.writer.write(bytes(data), first_txid, last_txid)

    def start_write(self, data: bytes | bytearray, first_txid: int, last_txid: int,
                    done: Callable[[BaseException | None], None]) -> bool:
        return False  # a quorum's answers come to a task: :meth:`write`

    async def finalize_segment(self, first_txid: int, last_txid: int) -> None:
        await self.shared.writer.finalize_segment(first_txid, last_txid)

    async def close(self) -> None:
        await self.shared.close()

    def finalized_ranges(self) -> list[tuple[int, int]]:
        return []


def decode_records(records: bytes, first_txid: int) -> list[tuple[int, Op]]:
    """Check and decode framed records ``first_txid``.. (all before any is applied)."""
    out: list[tuple[int, Op]] = []
    pos = 0
    expected = first_txid
    while pos < len(records):
        frame = parse_frame(records, pos)
        if isinstance(frame, FrameProblem) or frame.txid != expected:
            raise StorageError(f"shared journal: bad record where txid {expected} belongs")
        try:
            out.append((expected, decode_frame(records, frame)))
        except ValueError as exc:
            raise StorageError(f"shared journal: txid {expected}: {exc}") from None
        pos = frame.end
        expected += 1
    return out


async def trim_local(current: Path, end: int | None, image_txid: int,
                     channels: Sequence[JournalChannel] | None, journal_id: str, *,
                     epoch: int = 0) -> None:
    """Cut a local dir's edits back to what the journal holds (see the module doc); with
    no ``channels``, to its end."""
    journal_end = image_txid if end is None else end
    if end is not None and end < image_txid:
        raise StorageError(f"the shared journal ends at txid {end}, before the newest image "
                           f"(txid {image_txid}): it has lost acknowledged edits")
    for segment in segment_index(current):
        if segment.end is not None:
            if segment.end > journal_end:
                raise StorageError(
                    f"{segment.path} holds txids up to {segment.end}, beyond the shared "
                    f"journal's end ({journal_end}): "
                    + ("run xdfs namenode -initializeSharedEdits" if end is None
                       else "the journal has lost acknowledged edits")
                )
            continue
        if channels is None or end is None:
            trim_in_progress(segment.path, segment.start, journal_end)
        else:
            await trim_to_journal(segment.path, segment.start, journal_end, channels,
                                  journal_id, epoch=epoch)


async def trim_to_journal(path: Path, start: int, bound: int,
                          channels: Sequence[JournalChannel], journal_id: str, *,
                          epoch: int = 0) -> None:
    """Cut the local in-progress segment ``path`` after the last record the journal holds
    identically (at most ``bound``)."""
    trim_in_progress(path, start,
                     await agreed_txid(path, start, bound, channels, journal_id, epoch=epoch))


async def agreed_txid(path: Path, start: int, bound: int, channels: Sequence[JournalChannel],
                      journal_id: str, *, epoch: int = 0) -> int:
    """The last txid, at most ``bound``, up to which the local in-progress segment ``path``
    (first txid ``start``) holds the journal's records byte for byte (``start - 1``: none).
    Every record is compared: the journal's readers see only committed records, so a
    record that differs (or that the journal lacks) was never acknowledged, and neither
    was anything this writer logged after it."""
    data, bounds = _local_records(path, start)
    last = min(bound, start + len(bounds) - 2)
    agreed = start - 1
    if last < start:
        return agreed
    try:
        async for answer in read_txids(channels, journal_id, start, last, epoch=epoch):
            theirs = answer.records
            pos = 0
            for index in range(answer.first_txid - start,
                               answer.first_txid - start + answer.count):
                ours = data[bounds[index]:bounds[index + 1]]
                if theirs[pos:pos + len(ours)] != ours:
                    log.warning("%s: txid %d differs from the shared journal's record",
                                path.name, start + index)
                    return agreed
                pos += len(ours)
                agreed = start + index
    except StorageError as exc:
        # Not readable yet (an open segment left by a killed writer is served only once
        # the next writer has recovered it): unverified, so cut; a standby tails those
        # txids once they are served, a writer reads them after its recovery.
        log.info("%s: the shared journal does not serve txid %d yet (%s): the records "
                 "from there are tailed again", path.name, agreed + 1, exc.message)
    return agreed


def _local_records(path: Path, start: int) -> tuple[bytes, list[int]]:
    """An in-progress segment's bytes and the offsets of its whole records (plus their end;
    a torn tail is left out)."""
    reader = SegmentReader(path, layout_version=None, expected_start=start, torn_tail="allow")
    bounds = [offset for _txid, _opcode, _payload, offset in reader]
    bounds.append(reader.valid_bytes)
    try:
        return path.read_bytes(), bounds
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc}") from exc


def trim_in_progress(path: Path, start: int, end: int) -> None:
    """Cut the in-progress segment ``path`` after txid ``end``: the records after it are
    not in the shared journal, so they were never acknowledged. Nothing is deleted: the
    bytes cut go to a ``.unacked`` file beside it."""
    if start > end:  # nothing of it was acknowledged
        target = _unused(path.with_name(f"{path.name}.unacked"))
        os.replace(path, target)
        fsync_dir(path.parent)
        log.warning("moved %s aside as %s: the shared journal holds none of it (it agrees "
                    "up to txid %d), so none of it was acknowledged", path.name, target.name,
                    end)
        return
    reader = SegmentReader(path, layout_version=None, expected_start=start, torn_tail="allow")
    cut = next((offset for txid, _op, _payload, offset in reader if txid > end), None)
    if cut is None:
        return
    kept = _unused(path.with_name(f"{path.name}.unacked"))
    atomic_write(kept, path.read_bytes()[cut:])
    truncate_segment(path, cut)
    log.warning("cut txids after %d from %s: never acknowledged (the shared journal does not "
                "hold them); the bytes are kept in %s", end, path.name, kept.name)


def _unused(path: Path) -> Path:
    """``path``, or ``path.1``, ``path.2``... whichever does not exist yet (an earlier cut's
    bytes are never overwritten)."""
    candidate, n = path, 0
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}.{n}")
    return candidate


def write_finalized(directory: NameDir, first: int, last: int, records: bytes) -> None:
    """Store ``first..last`` in a local dir as a finalized segment (after finalizing what a
    crash left open there)."""
    journal = FileJournal(directory.current, LAYOUT_VERSION, seen_txid=directory.write_seen_txid)
    journal.recover_unfinalized_sync(first)
    journal.start_segment_sync(first)
    journal.write_sync(records)
    journal.finalize_segment_sync(last)


def _last_txid(path: Path) -> int:
    reader = SegmentReader(path, layout_version=None, torn_tail="allow")
    for _ in reader:
        pass
    return reader.last_txid

