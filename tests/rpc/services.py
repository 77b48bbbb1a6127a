"""Test-only methods and handlers, served next to SYSTEM/DIAGNOSTICS by MiniCluster."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import cast

import crc32c
import msgspec

from xdfs.errors import CorruptReplica, InvalidArgument, NotActive, Overloaded, error_from_code
from xdfs.protocol.system import SinkResult, SourceHead, SourceRequest
from xdfs.rpc.handling import CallContext, CallKey, Download, current_call, eager
from xdfs.rpc.messages import Empty
from xdfs.rpc.server_connection import ServerConnection
from xdfs.rpc.service import Method, MethodKind, Service
from xdfs.rpc.streams import StreamReceiver


class Count(msgspec.Struct):
    n: int


class FailRequest(msgspec.Struct):
    #: Raise the XdfsError of this wire code; 0 raises a plain ValueError (a handler bug).
    code: int
    message: str = "requested failure"


class Name(msgspec.Struct):
    name: str


class SlowRequest(msgspec.Struct):
    delay_s: float


#: Counts calls; the first call of each kills the connection before answering.
BUMP = Method("test_bump", Empty, Count, idempotent=False)
BUMP_IDEM = Method("test_bump_idem", Empty, Count, idempotent=True)
#: A non-idempotent call that takes delay_s to answer.
SLOW = Method("test_slow", SlowRequest, Count, idempotent=False)
FAIL = Method("test_fail", FailRequest, Empty, idempotent=True)
#: Upload whose consumer takes nothing until the test opens the gate.
HOLD = Method("test_hold", Empty, SinkResult, idempotent=False, kind=MethodKind.UPLOAD)
#: Upload handler that answers without consuming its stream (a server-side bug).
EARLY = Method("test_early", Empty, Empty, idempotent=False, kind=MethodKind.UPLOAD)
#: Download that counts how many chunks the server pulled from its source.
COUNTED = Method(
    "test_counted", SourceRequest, SourceHead, idempotent=True, kind=MethodKind.DOWNLOAD
)

#: Idempotent upload whose first call kills the connection.
BUMP_UPLOAD = Method(
    "test_bump_upload", Empty, SinkResult, idempotent=True, kind=MethodKind.UPLOAD
)
#: Names the answering server; raises NotActive on a standby, Overloaded while busy.
WHOAMI = Method("test_whoami", Empty, Name, idempotent=False)
#: Download that sends two chunks, then fails with CorruptReplica.
BROKEN_SOURCE = Method(
    "test_broken_source", Empty, SourceHead, idempotent=True, kind=MethodKind.DOWNLOAD
)
#: Upload whose handler takes one chunk, then rejects the call with InvalidArgument.
REJECT = Method("test_reject", Empty, Empty, idempotent=False, kind=MethodKind.UPLOAD)
#: A unary call that answers once the test opens the gate.
GATED = Method("test_gated", Empty, Count, idempotent=False)
#: An eager unary call (rpc.server.eager): waits for the gate when asked to.
EAGER = Method("test_eager", SlowRequest, Count, idempotent=False)
#: Download that sends one chunk, then nothing until the test opens the gate.
STALL = Method("test_stall", Empty, SourceHead, idempotent=True, kind=MethodKind.DOWNLOAD)

TEST_SERVICE = Service(
    "test",
    (BUMP, BUMP_IDEM, BUMP_UPLOAD, SLOW, GATED, FAIL, HOLD, EARLY, COUNTED, STALL, WHOAMI,
     BROKEN_SOURCE, REJECT, EAGER),
)


class TestHandlers:
    __test__ = False  # not a pytest class

    def __init__(self, name: str = "") -> None:
        self.name = name
        self.standby = False  # answer NotActive
        self.busy_answers = 0  # answer Overloaded this many more times
        self.calls: dict[str, int] = {}
        self.gate = asyncio.Event()
        self.hold_receivers: list[StreamReceiver] = []
        self.pulled = 0  # chunks COUNTED's source has produced so far
        #: test_eager's view of each call: (phase, a task runs it, its retry key)
        self.eager_seen: list[tuple[str, bool, CallKey | None]] = []

    def _count(self, name: str) -> int:
        self.calls[name] = self.calls.get(name, 0) + 1
        return self.calls[name]

    def _bump(self, name: str, ctx: CallContext) -> Count:
        n = self._count(name)
        if n == 1:
            transport = cast(ServerConnection, ctx.connection).transport
            assert transport is not None
            transport.abort()  # the call ran, but its answer is lost
        return Count(n)

    def test_whoami(self, ctx: CallContext, request: Empty) -> Name:
        self._count("test_whoami")
        if self.standby:
            raise NotActive(f"{self.name} is a standby")
        if self.busy_answers > 0:
            self.busy_answers -= 1
            raise Overloaded(f"{self.name} is busy")
        return Name(self.name)

    async def test_bump_upload(
        self, ctx: CallContext, request: Empty, chunks: StreamReceiver
    ) -> SinkResult:
        self._bump("test_bump_upload", ctx)
        data = await chunks.read_all()
        return SinkResult(self.calls["test_bump_upload"], len(data), crc32c.crc32c(data))

    def test_bump(self, ctx: CallContext, request: Empty) -> Count:
        return self._bump("test_bump", ctx)

    def test_bump_idem(self, ctx: CallContext, request: Empty) -> Count:
        return self._bump("test_bump_idem", ctx)

    async def test_slow(self, ctx: CallContext, request: SlowRequest) -> Count:
        n = self._count("test_slow")
        await asyncio.sleep(request.delay_s)
        return Count(n)

    async def test_gated(self, ctx: CallContext, request: Empty) -> Count:
        n = self._count("test_gated")
        await self.gate.wait()
        return Count(n)

    @eager
    async def test_eager(self, ctx: CallContext, request: SlowRequest) -> Count:
        """``delay_s`` > 0: wait for the gate (cancellable) before answering."""
        n = self._count("test_eager")
        self.eager_seen.append(("start", asyncio.current_task() is not None, current_call()))
        if request.delay_s > 0:
            try:
                await self.gate.wait()
            except asyncio.CancelledError:
                self._count("test_eager_cancelled")
                raise
            self.eager_seen.append(
                ("woken", asyncio.current_task() is not None, current_call())
            )
        return Count(n)

    def test_fail(self, ctx: CallContext, request: FailRequest) -> Empty:
        self._count("test_fail")
        if request.code == 0:
            raise ValueError(request.message)
        raise error_from_code(request.code, request.message)

    async def test_hold(
        self, ctx: CallContext, request: Empty, chunks: StreamReceiver
    ) -> SinkResult:
        self.hold_receivers.append(chunks)
        await self.gate.wait()
        count = total = crc = 0
        async for data in chunks:
            count += 1
            total += len(data)
            crc = crc32c.crc32c(data, crc)
        return SinkResult(count, total, crc)

    async def test_early(self, ctx: CallContext, request: Empty, chunks: StreamReceiver) -> Empty:
        return Empty()

    def test_counted(self, ctx: CallContext, request: SourceRequest) -> Download:
        return Download(SourceHead(request.total_bytes), self._counted_chunks(request))

    def test_broken_source(self, ctx: CallContext, request: Empty) -> Download:
        async def chunks() -> AsyncIterator[bytes]:
            yield b"one"
            yield b"two"
            raise CorruptReplica("replica went bad mid-stream")

        return Download(SourceHead(6), chunks())

    async def test_reject(self, ctx: CallContext, request: Empty, chunks: StreamReceiver) -> Empty:
        await chunks.__anext__()
        raise InvalidArgument("rejected after the first chunk")

    def test_stall(self, ctx: CallContext, request: Empty) -> Download:
        return Download(SourceHead(2), self._stalled_chunks())

    async def _stalled_chunks(self) -> AsyncIterator[bytes]:
        yield b"1"
        self.calls["stall_waiting"] = 1
        try:
            await self.gate.wait()
        except asyncio.CancelledError:
            self.calls["stall_cancelled"] = 1
            raise
        yield b"2"

    async def _counted_chunks(self, request: SourceRequest) -> AsyncIterator[bytes]:
        sent = 0
        while sent < request.total_bytes:
            size = min(request.chunk_bytes, request.total_bytes - sent)
            self.pulled += 1
            yield sent.to_bytes(8, "big")[:size].ljust(size, b"\x01")
            sent += size
