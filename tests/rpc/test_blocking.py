"""Unary calls made inline by synchronous callers (LoopThread.run_inline): from the calling
thread over a blocking connection taken from the client's idle ones, with the failover
rules of RpcClient (tests/rpc/test_failover for the loop path)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine, Generator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, TypeVar

import pytest

from tests.rpc.services import (
    BUMP,
    BUMP_IDEM,
    FAIL,
    GATED,
    SLOW,
    TEST_SERVICE,
    WHOAMI,
    Count,
    FailRequest,
    SlowRequest,
    TestHandlers,
)
from xdfs.errors import ConnectionLost, NotFound, RpcTimeout
from xdfs.rpc.client import RpcClient
from xdfs.rpc.messages import Empty
from xdfs.rpc.server import RpcServer
from xdfs.rpc.sync import LoopThread, NotInline
from xdfs.testing.minicluster import MiniCluster
from xdfs.testing.poll import eventually

T = TypeVar("T")
FAST_RETRIES: dict[str, Any] = {"retry_backoff_initial_s": 0.001, "retry_backoff_max_s": 0.004}


class Caller:
    """An RpcClient driven as the synchronous Client drives it: its loop in a LoopThread,
    its calls made inline from worker threads (never the test's loop thread)."""

    def __init__(self, rpc: RpcClient) -> None:
        self.rpc = rpc
        self.loop = LoopThread("test-client", use_uvloop=False)

    async def inline(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """``make()`` run inline on a worker thread."""
        return await asyncio.to_thread(lambda: self.loop.run_inline(make()))

    async def close(self) -> None:
        await asyncio.to_thread(self.loop.run, self.rpc.close())
        self.loop.close()


@pytest.fixture
async def caller_of(minicluster: MiniCluster) -> AsyncIterator[Callable[..., Caller]]:
    made: list[Caller] = []

    def make(*addresses: str, **rpc_overrides: Any) -> Caller:
        config = replace(minicluster.config.rpc, **{**FAST_RETRIES, **rpc_overrides})
        made.append(Caller(RpcClient(list(addresses), config)))
        return made[-1]

    yield make
    for caller in made:
        await caller.close()


async def test_calls_at_once_get_a_connection_each_and_later_threads_reuse_them(
    server: RpcServer, handlers: TestHandlers, caller_of: Callable[..., Caller]
) -> None:
    caller = caller_of(server.address)

    def call_together() -> Any:
        # held by the server until all three run: three calls at once need three connections
        return caller.loop.run_inline(caller.rpc.call(GATED, Empty()))

    def in_new_threads(threads: int, calls: int, call: Callable[[], Any]) -> list[Any]:
        # (in a worker thread: the servers run on this test's loop)
        with ThreadPoolExecutor(threads) as pool:
            return list(pool.map(lambda _i: call(), range(calls)))

    together = asyncio.ensure_future(asyncio.to_thread(in_new_threads, 3, 3, call_together))
    await eventually(lambda: handlers.calls.get("test_gated") == 3, what="3 calls at once")
    handlers.gate.set()
    assert sorted(count.n for count in await together) == [1, 2, 3]
    assert len(server.connections) == 3
    # Threads that come later (the pool above is gone) take idle connections: no new
    # handshake; none was made by the client's event loop (no call hopped to it).
    for _ in range(3):
        await asyncio.to_thread(in_new_threads, 2, 4, lambda: caller.loop.run_inline(
            caller.rpc.call(WHOAMI, Empty())))
    assert handlers.calls["test_whoami"] == 12
    assert len(server.connections) == 3
    assert not caller.rpc._connections


async def test_an_error_answer_raises_and_keeps_the_connection(
    server: RpcServer, caller_of: Callable[..., Caller]
) -> None:
    caller = caller_of(server.address)

    def calls() -> Count:
        with pytest.raises(NotFound, match="no such thing"):
            caller.loop.run_inline(caller.rpc.call(FAIL, FailRequest(NotFound.code,
                                                                      "no such thing")))
        return caller.loop.run_inline(caller.rpc.call(SLOW, SlowRequest(0.0)))

    assert await asyncio.to_thread(calls) == Count(1)
    assert len(server.connections) == 1


async def test_a_standby_answer_moves_the_call_to_the_next_address(
    minicluster: MiniCluster, caller_of: Callable[..., Caller]
) -> None:
    standby, active = TestHandlers("a"), TestHandlers("b")
    standby.standby = True
    a = await minicluster.start_server("a", [(TEST_SERVICE, standby)])
    b = await minicluster.start_server("b", [(TEST_SERVICE, active)])
    caller = caller_of(a.address, b.address)
    assert (await caller.inline(lambda: caller.rpc.call(WHOAMI, Empty()))).name == "b"
    assert caller.rpc.current_address == b.address
    assert (await caller.inline(lambda: caller.rpc.call(WHOAMI, Empty()))).name == "b"
    assert standby.calls["test_whoami"] == 1  # the second call went to b at once


async def test_a_lost_connection_repeats_only_calls_that_may_be_repeated(
    server: RpcServer, handlers: TestHandlers, caller_of: Callable[..., Caller]
) -> None:
    caller = caller_of(server.address)
    # The first call of each kills the connection after running: may have run.
    with pytest.raises(ConnectionLost):
        await caller.inline(lambda: caller.rpc.call(BUMP, Empty()))
    assert handlers.calls["test_bump"] == 1
    assert await caller.inline(lambda: caller.rpc.call(BUMP_IDEM, Empty())) == Count(2)


async def test_a_timeout_fails_a_call_that_may_not_be_repeated_and_the_next_works(
    server: RpcServer, handlers: TestHandlers, caller_of: Callable[..., Caller]
) -> None:
    caller = caller_of(server.address, call_timeout_s=0.2)
    with pytest.raises(RpcTimeout):
        await caller.inline(lambda: caller.rpc.call(SLOW, SlowRequest(5.0)))
    # The late answer, if any, is dropped; the connection keeps serving.
    assert await caller.inline(lambda: caller.rpc.call(SLOW, SlowRequest(0.0))) == Count(2)
    assert handlers.calls["test_slow"] == 2


async def test_a_connection_the_server_closed_while_idle_is_replaced_before_sending(
    server: RpcServer, handlers: TestHandlers, caller_of: Callable[..., Caller]
) -> None:
    caller = caller_of(server.address)
    await caller.inline(lambda: caller.rpc.call(WHOAMI, Empty()))
    for conn in list(server.connections):
        conn.close()
    await eventually(lambda: not server.connections, what="the server closed the connection")
    # A call that may not be repeated: sent on the dead connection it would fail as lost.
    assert (await caller.inline(lambda: caller.rpc.call(WHOAMI, Empty()))).name == ""
    assert handlers.calls["test_whoami"] == 2


async def test_a_call_that_may_be_repeated_is_repeated_when_its_connection_was_lost(
    server: RpcServer, handlers: TestHandlers, caller_of: Callable[..., Caller]
) -> None:
    # A connection that answered moments ago is taken for a call that may be repeated
    # without the idle check's read: found closed, the call is repeated on a new one
    # (the server ran it once).
    caller = caller_of(server.address)
    missing = FailRequest(NotFound.code, "no such thing")
    with pytest.raises(NotFound):
        await caller.inline(lambda: caller.rpc.call(FAIL, missing))
    for conn in list(server.connections):
        conn.close()
    await eventually(lambda: not server.connections, what="the server closed the connection")
    with pytest.raises(NotFound):
        await caller.inline(lambda: caller.rpc.call(FAIL, missing))
    assert handlers.calls["test_fail"] == 2


async def test_closing_the_client_closes_every_thread_connection(
    server: RpcServer, caller_of: Callable[..., Caller]
) -> None:
    caller = caller_of(server.address)
    await asyncio.gather(*(caller.inline(lambda: caller.rpc.call(WHOAMI, Empty()))
                           for _ in range(3)))
    assert server.connections
    await asyncio.to_thread(caller.loop.run, caller.rpc.close())
    await eventually(lambda: not server.connections, what="every connection closed")


class _Suspend:
    def __await__(self) -> Generator[str, None, None]:
        yield "a future of some loop"


def test_run_inline_refuses_a_coroutine_that_waits_on_a_loop() -> None:
    async def waits() -> None:
        await _Suspend()

    async def answers() -> int:
        return 7

    with LoopThread(use_uvloop=False) as loop:
        assert loop.run_inline(answers()) == 7
        with pytest.raises(NotInline):
            loop.run_inline(waits())
