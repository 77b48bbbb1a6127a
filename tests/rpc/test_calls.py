"""Unary calls over a real connection: roundtrips, multiplexing, typed errors, server_info."""

from __future__ import annotations

import asyncio
import random

import pytest

import xdfs
from tests.rpc.services import FAIL, GATED, Count, FailRequest, TestHandlers
from xdfs.errors import (
    AccessDenied,
    BadRequest,
    InternalError,
    InvalidArgument,
    NotFound,
    RpcTimeout,
    XdfsError,
    known_codes,
)
from xdfs.protocol.system import ECHO, PING, SERVER_INFO, EchoRequest, ServerInfo
from xdfs.rpc.client import RpcClient
from xdfs.rpc.messages import PROTOCOL_VERSION, Empty
from xdfs.rpc.server import RpcServer
from xdfs.testing.minicluster import MiniCluster
from xdfs.testing.poll import eventually


async def test_unary_roundtrip(client: RpcClient) -> None:
    assert await client.call(PING, Empty()) == Empty()
    reply = await client.call(ECHO, EchoRequest(b"hello \x00\xff world"))
    assert reply.payload == b"hello \x00\xff world"
    empty = await client.call(ECHO, EchoRequest(b""))
    assert empty.payload == b""


async def test_large_unary_payload_crosses_receive_buffer(client: RpcClient) -> None:
    # 1 MiB + odd bytes: larger than the 256 KiB receive buffer on both sides.
    payload = random.Random(1).randbytes((1 << 20) + 7)
    reply = await client.call(ECHO, EchoRequest(payload))
    assert reply.payload == payload


async def test_200_concurrent_calls_are_matched_on_one_connection(
    client: RpcClient, server: RpcServer
) -> None:
    rng = random.Random(42)
    requests = [
        EchoRequest(f"call-{i}-".encode() + rng.randbytes(rng.randrange(0, 64)),
                    rng.choice([0.0, rng.uniform(0.001, 0.05)]))
        for i in range(200)
    ]
    replies = await asyncio.gather(*(client.call(ECHO, r) for r in requests))
    assert [r.payload for r in replies] == [r.payload for r in requests]
    # All of it went over one connection.
    assert len(server.connections) == 1
    conn = await client.connection(server.address)
    assert conn._next_id == 201  # 200 calls numbered 1..200
    assert not conn._pending


async def test_a_slow_call_does_not_block_later_ones(
    client: RpcClient, handlers: TestHandlers
) -> None:
    slow = asyncio.create_task(client.call(GATED, Empty()))
    await eventually(lambda: handlers.calls.get("test_gated") == 1)  # running on the server
    for i in range(20):  # no head-of-line blocking behind the unanswered call
        assert (await client.call(ECHO, EchoRequest(bytes([i])))).payload == bytes([i])
    assert not slow.done()
    handlers.gate.set()
    assert await slow == Count(1)


async def test_each_call_expires_at_its_own_deadline(
    client: RpcClient, server: RpcServer, handlers: TestHandlers
) -> None:
    # One timer serves a connection's deadlines: a short deadline after a long one, and
    # one after many answered calls, still expire on their own (long before the first
    # one's); the long one waits on.
    slow = asyncio.create_task(client.call(GATED, Empty(), timeout_s=600.0))
    await eventually(lambda: handlers.calls.get("test_gated") == 1)
    with pytest.raises(RpcTimeout):
        async with asyncio.timeout(60):  # not the long call's deadline
            await client.call(GATED, Empty(), timeout_s=0.2)
    for i in range(50):
        reply = await client.call(ECHO, EchoRequest(bytes([i])), timeout_s=0.1 + i / 100)
        assert reply.payload == bytes([i])
    with pytest.raises(RpcTimeout):
        async with asyncio.timeout(60):
            await client.call(GATED, Empty(), timeout_s=0.3)
    assert not slow.done()
    handlers.gate.set()
    assert (await slow).n >= 1
    conn = await client.connection(server.address)
    assert not conn._pending


async def test_server_error_comes_back_as_the_same_class(client: RpcClient) -> None:
    with pytest.raises(InvalidArgument) as info:
        await client.call(ECHO, EchoRequest(b"x", delay_s=-1))
    assert "delay_s" in str(info.value)
    assert isinstance(info.value, ValueError)  # InvalidArgument is also a ValueError
    # The connection is fine afterwards.
    assert (await client.call(ECHO, EchoRequest(b"ok"))).payload == b"ok"


@pytest.mark.parametrize("error_type", [NotFound, AccessDenied, InvalidArgument, BadRequest])
async def test_handler_errors_keep_their_class_and_message(
    client: RpcClient, handlers: TestHandlers, error_type: type[XdfsError]
) -> None:
    with pytest.raises(error_type, match="the message") as info:
        await client.call(FAIL, FailRequest(error_type.code, "the message"))
    assert type(info.value) is error_type
    assert handlers.calls["test_fail"] == 1  # an answered error is never retried


async def test_unexpected_handler_exception_is_internal_error(
    client: RpcClient, handlers: TestHandlers
) -> None:
    with pytest.raises(InternalError, match="ValueError"):
        await client.call(FAIL, FailRequest(0, "boom"))
    assert handlers.calls["test_fail"] == 1
    assert await client.call(PING, Empty()) == Empty()


def test_every_error_code_round_trips() -> None:
    for code, cls in known_codes().items():
        from xdfs.errors import error_from_code

        rebuilt = error_from_code(code, "msg")
        assert type(rebuilt) is cls
        assert rebuilt.code == code
    unknown = error_from_code(123456, "odd")
    assert type(unknown) is XdfsError
    assert "123456" in str(unknown)


async def test_server_info(minicluster: MiniCluster) -> None:
    server = await minicluster.start_server("info-server", [], role="tester", cluster_id="c-1")
    client = minicluster.client(server.address)
    info = await client.call(SERVER_INFO, Empty())
    assert isinstance(info, ServerInfo)
    assert info.name == "info-server"
    assert info.role == "tester"
    assert info.version == xdfs.__version__
    assert info.protocol_version == PROTOCOL_VERSION
    assert info.cluster_id == "c-1"
    assert info.started_at_s == server.started_at_s
    assert info.connections == 1
    conn = await client.connection(server.address)
    assert conn.welcome is not None
    assert conn.welcome.server_name == "info-server"
    assert conn.welcome.cluster_id == "c-1"
    assert conn.welcome.user == "anonymous"


async def test_each_client_gets_its_own_connection(
    minicluster: MiniCluster, server: RpcServer
) -> None:
    clients = [minicluster.client(server.address) for _ in range(3)]
    for c in clients:
        await c.call(PING, Empty())
    info = await clients[0].call(SERVER_INFO, Empty())
    assert info.connections == 3
    await clients[1].close()
    # The server notices the close and forgets the connection.
    await eventually(lambda: len(server.connections) == 2)
    assert (await clients[0].call(SERVER_INFO, Empty())).connections == 2
