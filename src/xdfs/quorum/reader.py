"""Reading a journal's records back, by txid, from whichever node has them.

A writer recovering reads the chosen copy from its node (with its own epoch: committed or
not); a NameNode catching its local dirs up, ``oev`` and tailing readers read committed
records (epoch 0) from any node: every committed record is on a majority, and a node that
lacks one (it rejoined later) just sends the reader on to the next.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from xdfs.common.files import atomic_write
from xdfs.editlog.framing import encode_segment_header
from xdfs.editlog.segments import segment_name
from xdfs.errors import StorageError, XdfsError
from xdfs.protocol import journal as j
from xdfs.quorum.channel import JournalChannel


async def read_txids(
    channels: Sequence[JournalChannel],
    journal_id: str,
    first_txid: int,
    last_txid: int,
    *,
    epoch: int = 0,
    batch_bytes: int = 1024 * 1024,
) -> AsyncIterator[j.ReadEditsResponse]:
    """Answers covering ``first_txid..last_txid`` in order; each comes from the first node
    (the last one that answered, then the given order) holding the next txid."""
    order = list(channels)
    txid = first_txid
    while txid <= last_txid:
        problems: list[str] = []
        for channel in list(order):
            request = j.ReadEditsRequest(journal_id, txid, last_txid - txid + 1, batch_bytes,
                                         epoch)
            try:
                answer = await channel.get_journaled_edits(request)
            except XdfsError as exc:
                problems.append(f"{channel.name}: {exc.message}")
                continue
            if answer.count:
                order.remove(channel)
                order.insert(0, channel)  # stick to a node that has the records
                yield answer
                txid += answer.count
                break
            problems.append(f"{channel.name}: does not have it")
        else:
            raise StorageError(f"journal {journal_id}: no node has txid {txid} "
                               f"({'; '.join(problems)})")


async def read_all(
    channels: Sequence[JournalChannel], journal_id: str, first_txid: int, last_txid: int,
    *, epoch: int = 0, batch_bytes: int = 1024 * 1024,
) -> tuple[bytes, int]:
    """The records ``first_txid..last_txid`` as one buffer, and their layout version."""
    parts: list[bytes] = []
    layout = 0
    async for answer in read_txids(channels, journal_id, first_txid, last_txid,
                                   epoch=epoch, batch_bytes=batch_bytes):
        parts.append(answer.records)
        layout = answer.layout_version
    return b"".join(parts), layout


async def copy_segments(
    channels: Sequence[JournalChannel], journal_id: str, dest: Path,
    *, batch_bytes: int = 1024 * 1024,
) -> list[j.SegmentState]:
    """Write every committed segment of the journal into ``dest`` as segment files (the
    NameNode's format: finalized ones by their range, the open one up to the committed
    txid as in-progress), for the offline tools; returns what was written."""
    manifests: list[j.ManifestResponse] = []
    for channel in channels:
        try:
            manifests.append(await channel.get_edit_log_manifest(
                j.ManifestRequest(journal_id, 0, in_progress_ok=True)))
        except XdfsError:
            continue
    if not manifests:
        raise StorageError(f"journal {journal_id}: no JournalNode answered")
    committed = max(m.committed_txid for m in manifests)
    segments = sorted({s for m in manifests for s in m.segments if not s.in_progress})
    open_ones = [s for m in manifests for s in m.segments if s.in_progress]
    last_final = max((s.end_txid for s in segments), default=0)
    if open_ones and committed > last_final:
        start = max(s.start_txid for s in open_ones)
        segments.append(j.SegmentState(start, committed, True))
    written = []
    for segment in segments:
        data, layout = await read_all(channels, journal_id, segment.start_txid,
                                      segment.end_txid, batch_bytes=batch_bytes)
        name = segment_name(segment.start_txid,
                            None if segment.in_progress else segment.end_txid)
        atomic_write(dest / name, encode_segment_header(segment.start_txid, layout) + data)
        written.append(segment)
    return written


class JournalTailer:
    """Follows a journal's committed edits (a standby NameNode, a BackupNode): ``next``
    answers the records after a txid, long-polling one node (it answers as soon as the
    writer commits more) and asking the others when that one has nothing (it may have
    fallen out of sync)."""

    def __init__(self, channels: Sequence[JournalChannel], journal_id: str, *,
                 batch_bytes: int = 1024 * 1024, wait_s: float = 1.0) -> None:
        assert channels, "a tailer needs at least one JournalNode"
        self.channels = list(channels)
        self.journal_id = journal_id
        self.batch_bytes = batch_bytes
        self.wait_s = wait_s

    async def next(self, after_txid: int, max_txns: int) -> j.ReadEditsResponse:
        """Committed records from ``after_txid + 1`` (``count`` 0: none within wait_s)."""
        empty = j.ReadEditsResponse(after_txid + 1, 0, b"", 0, 0)
        failures = 0
        for index, channel in enumerate(list(self.channels)):
            request = j.ReadEditsRequest(self.journal_id, after_txid + 1, max_txns,
                                         self.batch_bytes, 0, self.wait_s if index == 0 else 0)
            try:
                answer = await channel.get_journaled_edits(request)
            except XdfsError:
                failures += 1
                continue
            if answer.count:
                if index:  # stick to the node that had them
                    self.channels.remove(channel)
                    self.channels.insert(0, channel)
                return answer
            empty = answer
        if failures == len(self.channels):
            raise StorageError(f"journal {self.journal_id}: no JournalNode answered")
        return empty

    async def close(self) -> None:
        for channel in self.channels:
            await channel.close()
