"""The wire side of retries: a client id in the handshake, a call number in request
envelopes that every retry of a call keeps, and frames of older peers still accepted."""

from __future__ import annotations

from typing import cast

import msgspec
import pytest

from xdfs.errors import BadRequest, ConnectionLost
from xdfs.rpc.client import RpcClient
from xdfs.rpc.connection import encode_frame
from xdfs.rpc.handling import CallContext, CallKey, current_call
from xdfs.rpc.messages import PROTOCOL_VERSION, Chunk, Hello, InEnvelope, Kind
from xdfs.rpc.server_connection import ServerConnection
from xdfs.rpc.service import Method, Service
from xdfs.testing.minicluster import MiniCluster


class Seen(msgspec.Struct):
    client_id: bytes
    call: int


class Empty(msgspec.Struct):
    pass


#: Answers the retry key its handler task sees; the first try of each call number loses
#: the connection instead of answering, so the client must retry.
WHO = Method("test_who", Empty, Seen, idempotent=False, at_most_once=True)
#: The same, for a method that may not be retried.
WHO_ONCE = Method("test_who_once", Empty, Seen, idempotent=False)
SERVICE = Service("test.retrykeys", (WHO, WHO_ONCE))


class Handlers:
    def __init__(self) -> None:
        self.keys: list[CallKey | None] = []

    async def test_who(self, ctx: CallContext, request: Empty) -> Seen:
        key = current_call()
        self.keys.append(key)
        if key is None:
            return Seen(b"", 0)
        if self.keys.count(key) == 1:
            # the answer is lost: a retry must follow
            cast(ServerConnection, ctx.connection).close()
        return Seen(key[0], key[1])

    async def test_who_once(self, ctx: CallContext, request: Empty) -> Seen:
        return await self.test_who(ctx, request)


def _decode(frame: bytes) -> InEnvelope:
    return msgspec.msgpack.decode(frame[4:], type=InEnvelope)


def test_request_frames_carry_the_call_number_others_keep_their_shape() -> None:
    numbered = _decode(bytes(encode_frame(Kind.REQUEST, 3, "m", Empty(), 42)))
    assert (numbered.kind, numbered.id, numbered.method, numbered.call) == (Kind.REQUEST, 3,
                                                                            "m", 42)
    plain = bytes(encode_frame(Kind.REQUEST, 3, "m", Empty()))
    assert msgspec.msgpack.decode(plain[4:]) == [Kind.REQUEST, 3, "m", {}]  # as before
    assert _decode(plain).call == 0  # an older client's frame: no number
    chunk = bytes(encode_frame(Kind.CHUNK, 3, "", Chunk(0, 1, memoryview(b"xy"))))
    assert len(msgspec.msgpack.decode(chunk[4:])) == 4


async def test_retries_keep_the_call_number_and_the_client_id(
    minicluster: MiniCluster,
) -> None:
    handlers = Handlers()
    server = await minicluster.start_server("keys", [(SERVICE, handlers)])
    client = minicluster.client(server.address)
    assert len(client.hello.client_id) == 16
    first = await client.call(WHO, Empty())
    second = await client.call(WHO, Empty())
    assert first == Seen(client.hello.client_id, 1)
    assert second == Seen(client.hello.client_id, 2)
    # each call was tried twice (the first answer lost), both tries with one key
    assert handlers.keys == [(client.hello.client_id, 1)] * 2 + [
        (client.hello.client_id, 2)
    ] * 2
    # a method neither idempotent nor at most once is still not retried
    with pytest.raises(ConnectionLost):
        await client.call(WHO_ONCE, Empty())


async def test_a_client_id_of_the_wrong_length_is_refused(minicluster: MiniCluster) -> None:
    server = await minicluster.start_server("keys", [(SERVICE, Handlers())])
    client = minicluster.client(
        server.address, hello=Hello(PROTOCOL_VERSION, client_id=b"abc"), tries_per_address=1
    )
    with pytest.raises(BadRequest, match="client id has 3 bytes"):
        await client.connection(server.address)


async def test_an_older_client_without_id_gets_no_retry_key(minicluster: MiniCluster) -> None:
    handlers = Handlers()
    server = await minicluster.start_server("keys", [(SERVICE, handlers)])
    client = minicluster.client(server.address)
    conn = await client.connection(server.address)
    conn.close()
    old = RpcClient(server.address, minicluster.config.rpc)
    old.hello = Hello(PROTOCOL_VERSION)  # what an older client sends: no client id
    try:
        conn = await old.connection(server.address)
        assert await conn.call(WHO_ONCE, Empty(), 10.0, 7) == Seen(b"", 0)
    finally:
        await old.close()
    assert handlers.keys == [None]  # a call number without a client id is no key
