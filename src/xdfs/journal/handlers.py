"""RPC handlers of the ``journal`` service (xdfs.protocol.journal) on a JournalNode.

Each handler hands its call to the journal's worker thread before its first ``await`` (see
server.py), so a journal's calls run in the order they arrived; the storage class does the
checking and the durable change.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from xdfs.errors import InvalidArgument
from xdfs.protocol import journal as j
from xdfs.protocol.journal import check_journal_id
from xdfs.rpc.handling import CallContext
from xdfs.rpc.messages import Empty
from xdfs.rpc.streams import StreamReceiver

if TYPE_CHECKING:
    from xdfs.config import JournalNodeConfig
    from xdfs.journal.workers import Journals


class JournalHandlers:
    def __init__(self, journals: Journals, settings: JournalNodeConfig) -> None:
        self.journals = journals
        self.settings = settings

    async def get_journal_state(self, ctx: CallContext, req: j.JournalIdRequest) -> j.JournalState:
        check_journal_id(req.journal_id)
        if req.journal_id not in self.journals:
            return j.JournalState(False, None, 0, 0, 0, 0)
        return await self.journals.worker(req.journal_id).submit(lambda jn: jn.state())

    async def format_journal(self, ctx: CallContext, req: j.FormatRequest) -> Empty:
        await self.journals.worker(req.journal_id, create=True).submit(
            lambda jn: jn.format(req.namespace, force=req.force, nodes=req.nodes))
        return Empty()

    async def new_epoch(self, ctx: CallContext, req: j.NewEpochRequest) -> j.NewEpochResponse:
        last = await self.journals.worker(req.journal_id).submit(
            lambda jn: jn.new_epoch(req.namespace, req.epoch), fresh_start=True)
        return j.NewEpochResponse(last)

    async def start_log_segment(self, ctx: CallContext, req: j.StartSegmentRequest) -> Empty:
        await self.journals.worker(req.req.journal_id).submit(
            lambda jn: jn.start_log_segment(req.req, req.first_txid, req.layout_version,
                                            req.nodes), fresh_start=True)
        return Empty()

    async def journal(self, ctx: CallContext, req: j.JournalRecordsRequest) -> Empty:
        worker = self.journals.worker(req.req.journal_id)
        try:
            await worker.submit(lambda jn: jn.journal(
                req.req, req.segment_txid, req.first_txid, req.count, req.records))
        finally:
            worker.notify()  # its committed txid may have moved even if the batch failed
        return Empty()

    async def heartbeat(self, ctx: CallContext, req: j.RequestOnly) -> Empty:
        worker = self.journals.worker(req.req.journal_id)
        try:
            await worker.submit(lambda jn: jn.heartbeat(req.req))
        finally:
            worker.notify()
        return Empty()

    async def finalize_log_segment(self, ctx: CallContext, req: j.FinalizeRequest) -> Empty:
        await self.journals.worker(req.req.journal_id).submit(
            lambda jn: jn.finalize(req.req, req.start_txid, req.end_txid))
        return Empty()

    async def purge_logs_older_than(
        self, ctx: CallContext, req: j.PurgeRequest
    ) -> j.PurgeResponse:
        purged = await self.journals.worker(req.req.journal_id).submit(
            lambda jn: jn.purge(req.req, req.min_txid_to_keep))
        return j.PurgeResponse(purged)

    async def prepare_recovery(
        self, ctx: CallContext, req: j.PrepareRecoveryRequest
    ) -> j.PrepareRecoveryResponse:
        return await self.journals.worker(req.req.journal_id).submit(
            lambda jn: jn.prepare_recovery(req.req, req.segment_txid))

    async def accept_recovery(
        self, ctx: CallContext, req: j.AcceptRecoveryRequest, chunks: StreamReceiver
    ) -> Empty:
        worker = self.journals.worker(req.req.journal_id)
        limit = self.settings.recovery_bytes_max
        parts: list[bytes] = []
        size = 0
        async for chunk in chunks:
            size += len(chunk)
            if size > limit:
                raise InvalidArgument(f"recovered segment larger than "
                                      f"journalnode.recovery_bytes_max ({limit} bytes)")
            parts.append(bytes(chunk))
        records = b"".join(parts)
        await worker.submit(
            lambda jn: jn.accept_recovery(req.req, req.segment, req.layout_version, records))
        return Empty()

    async def get_edit_log_manifest(
        self, ctx: CallContext, req: j.ManifestRequest
    ) -> j.ManifestResponse:
        return await self.journals.worker(req.journal_id).submit(
            lambda jn: jn.manifest(req.since_txid, req.in_progress_ok))

    async def get_journaled_edits(
        self, ctx: CallContext, req: j.ReadEditsRequest
    ) -> j.ReadEditsResponse:
        settings = self.settings
        max_bytes = min(req.max_bytes, settings.read_bytes_max)
        worker = self.journals.worker(req.journal_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(max(req.wait_s, 0.0), settings.read_wait_max_s)
        while True:
            changed = worker.changed
            answer = await worker.submit(
                lambda jn: jn.read(req.from_txid, req.max_txns, max_bytes, req.epoch))
            if answer.count or loop.time() >= deadline:
                return answer
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(deadline):
                    await changed.wait()
