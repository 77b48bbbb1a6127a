"""One JournalNode as a writer or reader sees it.

:class:`JournalChannel` is the interface the quorum client uses, one method per protocol
call; :class:`RpcJournalChannel` speaks it over xdfs RPC, and the tests' simulator
implements it in memory with injected faults. Calls on one channel reach the node in the
order they were made (HDFS's AsyncLogger runs one call at a time per logger for the same
reason): the node refuses records out of order, and a call must never overtake the one
before it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ssl
from typing import Protocol, TypeVar

import msgspec

from xdfs.config import RpcConfig
from xdfs.protocol import journal as j
from xdfs.rpc.client import RpcClient
from xdfs.rpc.messages import Hello
from xdfs.rpc.service import Method

Req = TypeVar("Req", bound=msgspec.Struct)
Resp = TypeVar("Resp", bound=msgspec.Struct)


class JournalChannel(Protocol):
    @property
    def name(self) -> str: ...

    async def get_journal_state(self, journal_id: str) -> j.JournalState: ...

    async def format_journal(self, request: j.FormatRequest) -> None: ...

    async def new_epoch(self, request: j.NewEpochRequest) -> j.NewEpochResponse: ...

    async def start_log_segment(self, request: j.StartSegmentRequest) -> None: ...

    async def journal(self, request: j.JournalRecordsRequest) -> None: ...

    async def heartbeat(self, request: j.RequestOnly) -> None: ...

    async def finalize_log_segment(self, request: j.FinalizeRequest) -> None: ...

    async def purge_logs_older_than(self, request: j.PurgeRequest) -> int: ...

    async def prepare_recovery(
        self, request: j.PrepareRecoveryRequest
    ) -> j.PrepareRecoveryResponse: ...

    async def accept_recovery(self, request: j.AcceptRecoveryRequest, records: bytes) -> None: ...

    async def get_edit_log_manifest(self, request: j.ManifestRequest) -> j.ManifestResponse: ...

    async def get_journaled_edits(self, request: j.ReadEditsRequest) -> j.ReadEditsResponse: ...

    async def close(self) -> None: ...


#: Chunk size of an accept_recovery upload.
_UPLOAD_CHUNK_BYTES = 1024 * 1024


class RpcJournalChannel:
    """A JournalNode over xdfs RPC; one call at a time, in order (a FIFO lock)."""

    def __init__(
        self,
        address: str,
        config: RpcConfig,
        hello: Hello,
        *,
        call_timeout_s: float,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.address = address
        self.call_timeout_s = call_timeout_s
        # One try per call: the quorum does not wait for a node that is down, and a retry
        # would hold up the calls queued behind it on this channel.
        once = dataclasses.replace(config, tries_per_address=1)
        self._rpc = RpcClient(address, once, hello=hello, ssl_context=ssl_context)
        self._order = asyncio.Lock()  # asyncio locks wake waiters first come, first served

    @property
    def name(self) -> str:
        return self.address

    async def _call(self, method: Method[Req, Resp], request: Req) -> Resp:
        async with self._order:
            return await self._rpc.call(method, request, timeout_s=self.call_timeout_s)

    async def get_journal_state(self, journal_id: str) -> j.JournalState:
        return await self._call(j.GET_JOURNAL_STATE, j.JournalIdRequest(journal_id))

    async def format_journal(self, request: j.FormatRequest) -> None:
        await self._call(j.FORMAT_JOURNAL, request)

    async def new_epoch(self, request: j.NewEpochRequest) -> j.NewEpochResponse:
        return await self._call(j.NEW_EPOCH, request)

    async def start_log_segment(self, request: j.StartSegmentRequest) -> None:
        await self._call(j.START_LOG_SEGMENT, request)

    async def journal(self, request: j.JournalRecordsRequest) -> None:
        await self._call(j.JOURNAL, request)

    async def heartbeat(self, request: j.RequestOnly) -> None:
        await self._call(j.HEARTBEAT, request)

    async def finalize_log_segment(self, request: j.FinalizeRequest) -> None:
        await self._call(j.FINALIZE_LOG_SEGMENT, request)

    async def purge_logs_older_than(self, request: j.PurgeRequest) -> int:
        return (await self._call(j.PURGE_LOGS_OLDER_THAN, request)).purged_files

    async def prepare_recovery(
        self, request: j.PrepareRecoveryRequest
    ) -> j.PrepareRecoveryResponse:
        return await self._call(j.PREPARE_RECOVERY, request)

    async def accept_recovery(self, request: j.AcceptRecoveryRequest, records: bytes) -> None:
        view = memoryview(records)
        chunks = [view[i : i + _UPLOAD_CHUNK_BYTES]
                  for i in range(0, len(view), _UPLOAD_CHUNK_BYTES)]
        async with self._order:
            await self._rpc.upload(j.ACCEPT_RECOVERY, request, chunks,
                                   timeout_s=self.call_timeout_s)

    async def get_edit_log_manifest(self, request: j.ManifestRequest) -> j.ManifestResponse:
        return await self._call(j.GET_EDIT_LOG_MANIFEST, request)

    async def get_journaled_edits(self, request: j.ReadEditsRequest) -> j.ReadEditsResponse:
        return await self._call(j.GET_JOURNALED_EDITS, request)

    async def close(self) -> None:
        await self._rpc.close()
