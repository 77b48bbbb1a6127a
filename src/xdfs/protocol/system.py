"""Methods every xdfs server answers (``SYSTEM``), and the diagnostics service used by
tests and benchmarks to exercise the RPC layer itself (``DIAGNOSTICS``)."""

from __future__ import annotations

import msgspec

from xdfs.rpc.messages import Empty
from xdfs.rpc.service import Method, MethodKind, Service


class ServerInfo(msgspec.Struct):
    name: str
    role: str
    version: str
    protocol_version: int
    cluster_id: str
    started_at_s: float
    connections: int


class EchoRequest(msgspec.Struct, array_like=True):
    payload: bytes = b""
    #: Seconds the server waits before answering (tests of timeouts and concurrency).
    delay_s: float = 0.0


class EchoResponse(msgspec.Struct, array_like=True):
    payload: bytes = b""


class SinkResult(msgspec.Struct):
    chunks: int
    total_bytes: int
    crc32c: int


class SourceRequest(msgspec.Struct):
    total_bytes: int
    chunk_bytes: int = 1 << 20


class SourceHead(msgspec.Struct):
    total_bytes: int


PING = Method("ping", Empty, Empty, idempotent=True, doc="Liveness check.")
SERVER_INFO = Method(
    "server_info", Empty, ServerInfo, idempotent=True, doc="Name, role, version, uptime."
)
SYSTEM = Service("system", (PING, SERVER_INFO))

ECHO = Method("echo", EchoRequest, EchoResponse, idempotent=True, doc="Returns its payload.")
SINK = Method(
    "sink",
    Empty,
    SinkResult,
    idempotent=True,
    kind=MethodKind.UPLOAD,
    doc="Consumes an uploaded stream; returns its size and CRC32C.",
)
SOURCE = Method(
    "source",
    SourceRequest,
    SourceHead,
    idempotent=True,
    kind=MethodKind.DOWNLOAD,
    doc="Streams total_bytes of zeros.",
)
DIAGNOSTICS = Service("diagnostics", (ECHO, SINK, SOURCE))
