"""Eager unary handlers (rpc.server.eager): started in the loop turn their request arrived
in, a task taking over only when they wait; same answers, retry keys and cancellation."""

from __future__ import annotations

import asyncio

import pytest

from tests.rpc.services import EAGER, Count, SlowRequest, TestHandlers
from xdfs.errors import RpcTimeout
from xdfs.rpc.client import RpcClient
from xdfs.rpc.server import RpcServer
from xdfs.rpc.server_connection import _Resume
from xdfs.testing.poll import eventually


async def test_an_eager_call_that_does_not_wait_needs_no_task(
    client: RpcClient, server: RpcServer, handlers: TestHandlers
) -> None:
    assert await client.call(EAGER, SlowRequest(0.0)) == Count(1)
    assert await client.call(EAGER, SlowRequest(0.0)) == Count(2)
    (first, second) = handlers.eager_seen
    assert first[0] == "start" and not first[1]  # ran before (without) any task
    assert first[2] is not None and second[2] is not None  # it saw its own retry key
    assert first[2] != second[2]
    (server_conn,) = server.connections
    assert not server_conn._calls and not server_conn._unary_calls


async def test_an_eager_call_that_waits_goes_on_in_a_task_with_its_key(
    client: RpcClient, server: RpcServer, handlers: TestHandlers
) -> None:
    waiting = asyncio.create_task(client.call(EAGER, SlowRequest(1.0)))
    await eventually(lambda: handlers.eager_seen)
    (server_conn,) = server.connections
    assert len(server_conn._calls) == 1  # a task carries it while it waits
    handlers.gate.set()
    assert await waiting == Count(1)
    (start, woken) = handlers.eager_seen
    assert start[:2] == ("start", False)
    assert woken[:2] == ("woken", True)
    assert start[2] is not None and woken[2] == start[2]  # the same call's key throughout
    await eventually(lambda: not server_conn._calls and not server_conn._unary_calls)


async def test_an_eager_call_is_cancelled_where_it_waits(
    client: RpcClient, server: RpcServer, handlers: TestHandlers
) -> None:
    conn = await client.connection(server.address)
    with pytest.raises(RpcTimeout):
        await conn.call(EAGER, SlowRequest(1.0), timeout_s=0.2)
    (server_conn,) = server.connections
    # the client's CANCEL reaches the handler where it waits, and frees the call's slot
    await eventually(lambda: handlers.calls.get("test_eager_cancelled") == 1)
    await eventually(lambda: not server_conn._calls and not server_conn._unary_calls)
    assert (await conn.call(EAGER, SlowRequest(0.0), timeout_s=10)) == Count(2)


async def test_eager_calls_cancelled_with_their_connection(
    client: RpcClient, server: RpcServer, handlers: TestHandlers
) -> None:
    calls = [asyncio.create_task(client.call(EAGER, SlowRequest(1.0))) for _ in range(3)]
    await eventually(lambda: len(handlers.eager_seen) == 3)
    (server_conn,) = server.connections
    assert server_conn.transport is not None
    server_conn.transport.abort()
    await eventually(lambda: handlers.calls.get("test_eager_cancelled") == 3)
    for call in calls:
        call.cancel()
    await asyncio.gather(*calls, return_exceptions=True)


async def test_a_task_cancelled_before_its_first_step_cancels_the_eager_coroutine() -> None:
    seen: list[str] = []
    gate = asyncio.Event()

    async def handler() -> None:
        try:
            await gate.wait()
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    coro = handler()
    awaited = coro.send(None)  # the eager first step, up to its wait
    task = asyncio.get_running_loop().create_task(_Resume(coro, awaited))
    task.cancel()  # before the task ever ran
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled"]
