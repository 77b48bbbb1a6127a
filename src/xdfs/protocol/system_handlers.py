"""Handlers of the SYSTEM and DIAGNOSTICS services (declared in xdfs.protocol.system), which
every server adds to its RPC server: the RPC layer below knows no method table."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import crc32c

from xdfs import __version__
from xdfs.errors import InvalidArgument
from xdfs.protocol.system import (
    DIAGNOSTICS,
    SYSTEM,
    EchoRequest,
    EchoResponse,
    ServerInfo,
    SinkResult,
    SourceHead,
    SourceRequest,
)
from xdfs.rpc.handling import CallContext, Download
from xdfs.rpc.messages import PROTOCOL_VERSION, Empty
from xdfs.rpc.server import RpcServer
from xdfs.rpc.streams import StreamReceiver

_DELAY_MAX_S = 60.0


class SystemHandlers:
    def __init__(self, server: RpcServer, role: str) -> None:
        self._server = server
        self._role = role

    def ping(self, ctx: CallContext, request: Empty) -> Empty:
        return request

    def server_info(self, ctx: CallContext, request: Empty) -> ServerInfo:
        server = self._server
        return ServerInfo(
            server.name, self._role, __version__, PROTOCOL_VERSION, server.cluster_id,
            server.started_at_s, len(server.connections),
        )


class DiagnosticHandlers:
    async def echo(self, ctx: CallContext, request: EchoRequest) -> EchoResponse:
        if request.delay_s:
            if not 0 < request.delay_s <= _DELAY_MAX_S:
                raise InvalidArgument(f"delay_s must be in (0, {_DELAY_MAX_S}]")
            await asyncio.sleep(request.delay_s)
        return EchoResponse(request.payload)

    async def sink(self, ctx: CallContext, request: Empty, chunks: StreamReceiver) -> SinkResult:
        count = total = crc = 0
        async for data in chunks:
            count += 1
            total += len(data)
            crc = crc32c.crc32c(data, crc)
        return SinkResult(count, total, crc)

    def source(self, ctx: CallContext, request: SourceRequest) -> Download:
        if request.total_bytes < 0 or not 0 < request.chunk_bytes <= 16 << 20:
            raise InvalidArgument("total_bytes must be >= 0, chunk_bytes in (0, 16 MiB]")
        return Download(SourceHead(request.total_bytes), _zeros(request))


def _zeros(request: SourceRequest) -> Iterator[bytes]:
    block = bytes(request.chunk_bytes)
    full, rest = divmod(request.total_bytes, request.chunk_bytes)
    for _ in range(full):
        yield block
    if rest:
        yield block[:rest]


def add_system_services(server: RpcServer, role: str, *, diagnostics: bool = False) -> None:
    server.add_service(SYSTEM, SystemHandlers(server, role))
    if diagnostics:
        server.add_service(DIAGNOSTICS, DiagnosticHandlers())
