"""The JournalNode's syncer (HDFS's JournalNodeSyncer): a node that was down, or whose disk
was replaced, fills its gaps with finalized segments fetched from the other JournalNodes.

The writer only sends new segments to a node that rejoins (at the next segment start),
so without this a node that missed txids never holds them again, and those txids stay on
fewer copies until they are purged. Every ``journalnode.sync_interval_s``, for each
journal: ask one peer (in turn) for its finalized segments, and fetch each that overlaps
nothing here (:meth:`Journal.missing`); the journal's thread installs it atomically after
checking every record. Finalized copies of a txid are the same on every node (the
protocol's invariant), so a gap may be filled from any of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Sequence

from xdfs.errors import XdfsError
from xdfs.journal.storage import Journal
from xdfs.journal.workers import JournalWorker
from xdfs.protocol import journal as j
from xdfs.quorum.channel import JournalChannel
from xdfs.quorum.reader import read_all

log = logging.getLogger(__name__)


class Syncer:
    def __init__(
        self,
        workers: Callable[[], Sequence[JournalWorker]],
        channel_to: Callable[[str], JournalChannel],
        own_address: str,
        interval_s: float,
        batch_bytes: int,
    ) -> None:
        self.workers = workers
        self.channel_to = channel_to
        self.own_address = own_address
        self.interval_s = interval_s
        self.batch_bytes = batch_bytes
        self.synced_segments = 0
        self._turn = 0

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            for worker in self.workers():
                with contextlib.suppress(XdfsError):
                    await self.sync_journal(worker)

    async def sync_journal(self, worker: JournalWorker) -> int:
        """One round for one journal; returns the segments fetched."""
        journal = worker.journal
        peers = [node for node in journal.nodes if node != self.own_address]
        if not peers or not journal.formatted:
            return 0
        peer = peers[self._turn % len(peers)]
        self._turn += 1
        channel = self.channel_to(peer)
        try:
            manifest = await channel.get_edit_log_manifest(
                j.ManifestRequest(journal.journal_id, 0, in_progress_ok=False))
            missing = await worker.submit(lambda jn: jn.missing(manifest.segments))
            fetched = 0
            for segment in missing:
                records, layout = await read_all([channel], journal.journal_id,
                                                 segment.start_txid, segment.end_txid,
                                                 batch_bytes=self.batch_bytes)
                installed = await worker.submit(
                    functools.partial(Journal.install_finalized, segment=segment, layout=layout,
                                      records=records))
                if installed:
                    fetched += 1
                    log.info("journal %s: fetched missing segment %d-%d (%d bytes) from %s",
                             journal.journal_id, segment.start_txid, segment.end_txid,
                             len(records), peer)
            self.synced_segments += fetched
            return fetched
        except XdfsError as exc:
            log.warning("journal %s: syncing from %s failed: %s", journal.journal_id, peer,
                        exc.message)
            raise
        finally:
            await channel.close()
