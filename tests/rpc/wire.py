"""Raw-socket helpers for tests that speak the wire protocol by hand (hostile peers)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from xdfs.common.addresses import parse_address
from xdfs.errors import XdfsError, error_from_code
from xdfs.protocol.system import ECHO, PING, EchoRequest
from xdfs.rpc.client import RpcClient
from xdfs.rpc.connection import encode_frame
from xdfs.rpc.messages import (
    LENGTH_PREFIX,
    PROTOCOL_VERSION,
    Challenge,
    Empty,
    ErrorInfo,
    Hello,
    InEnvelope,
    Kind,
    Welcome,
)
from xdfs.rpc.scram import ClientLogin

#: Generous guard against hangs; never a timing assertion.
GUARD_S = 10.0

_ENVELOPE = msgspec.msgpack.Decoder(InEnvelope)
_ERROR = msgspec.msgpack.Decoder(ErrorInfo)
_WELCOME = msgspec.msgpack.Decoder(Welcome)
_CHALLENGE = msgspec.msgpack.Decoder(Challenge)


class Closed(Exception):
    """The server closed the connection (EOF or reset) while we waited for a frame."""


class RawPeer:
    """A client that writes whatever frames (or bytes) a test wants and reads replies."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, address: str, **kwargs: Any) -> RawPeer:
        host, port = parse_address(address)
        reader, writer = await asyncio.open_connection(host, port, **kwargs)
        return cls(reader, writer)

    def send(self, kind: int, call_id: int, method: str = "", body: Any = None) -> None:
        self.writer.write(encode_frame(kind, call_id, method, body))

    def send_raw(self, data: bytes) -> None:
        self.writer.write(data)

    async def hello(self, **fields: Any) -> Welcome:
        """The handshake; with a ``password``, its SCRAM exchange (the server verified)."""
        login = ClientLogin(Hello(PROTOCOL_VERSION, **fields))
        self.send(Kind.HELLO, 0, "", login.hello)
        envelope = await self.recv()
        if envelope.kind == Kind.CHALLENGE:
            self.send(Kind.PROOF, 0, "", login.answer(_CHALLENGE.decode(envelope.body)))
            envelope = await self.recv()
        assert envelope.kind == Kind.WELCOME, envelope
        welcome = _WELCOME.decode(envelope.body)
        login.verify(welcome)
        return welcome

    async def recv(self, guard_s: float = GUARD_S, *, credits: bool = False) -> InEnvelope:
        """The next frame; raises Closed when the server hung up instead. Window grants
        (CREDIT frames, e.g. the one opening every upload) are skipped unless ``credits``."""
        while True:
            envelope = await self._recv_frame(guard_s)
            if credits or envelope.kind != Kind.CREDIT:
                return envelope

    async def _recv_frame(self, guard_s: float) -> InEnvelope:
        try:
            async with asyncio.timeout(guard_s):
                prefix = await self.reader.readexactly(LENGTH_PREFIX.size)
                (length,) = LENGTH_PREFIX.unpack(prefix)
                payload = await self.reader.readexactly(length)
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            raise Closed(repr(exc)) from None
        return _ENVELOPE.decode(payload)

    async def recv_error(self, guard_s: float = GUARD_S) -> tuple[int, XdfsError]:
        """The next frame, which must be an ERROR: (call id, rebuilt exception)."""
        envelope = await self.recv(guard_s)
        assert envelope.kind == Kind.ERROR, envelope
        info = _ERROR.decode(envelope.body)
        return envelope.id, error_from_code(info.code, info.message)

    async def expect_connection_error(self, error_type: type[XdfsError]) -> XdfsError:
        """The server reports a connection-level error (id 0) of that type, then closes."""
        call_id, error = await self.recv_error()
        assert call_id == 0, (call_id, error)
        assert type(error) is error_type, error
        await self.expect_closed()
        return error

    async def expect_closed(self, guard_s: float = GUARD_S) -> list[InEnvelope]:
        """Read until the server closes the connection; returns frames read meanwhile."""
        frames: list[InEnvelope] = []
        with contextlib.suppress(Closed):
            while True:
                frames.append(await self.recv(guard_s))
        return frames

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()


@contextlib.asynccontextmanager
async def raw_peer(address: str, **kwargs: Any) -> AsyncIterator[RawPeer]:
    peer = await RawPeer.connect(address, **kwargs)
    try:
        yield peer
    finally:
        await peer.close()


async def assert_serves(client: RpcClient) -> None:
    """The server behind ``client`` still answers normal calls."""
    assert await client.call(PING, Empty()) == Empty()
    reply = await client.call(ECHO, EchoRequest(b"still alive"))
    assert reply.payload == b"still alive"
