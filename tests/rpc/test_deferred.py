"""Deferred answers of plain handlers (rpc.server.Deferred, deferring): answered later
with no task, or by a task running what the handler deferred; typed errors, the call's
retry key, cancellation by the client and by a lost connection, slots freed."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from xdfs.errors import InvalidArgument, RpcTimeout
from xdfs.rpc.client import RpcClient
from xdfs.rpc.handling import CallContext, CallKey, Deferred, call_key, current_call, deferring
from xdfs.rpc.server import RpcServer
from xdfs.rpc.service import Method, Service
from xdfs.testing.minicluster import MiniCluster
from xdfs.testing.poll import eventually


class Ask(msgspec.Struct):
    #: "later": settled by the test; "fail": failed later; "now": settled before returning;
    #: "task": an awaitable run in a task.
    how: str


class Told(msgspec.Struct):
    n: int
    client_id: bytes = b""
    call: int = 0


LATER = Method("test_later", Ask, Told, idempotent=False, at_most_once=True)
SERVICE = Service("test.deferred", (LATER,))


class Handlers:
    def __init__(self) -> None:
        self.waiting: list[Deferred] = []
        self.cancelled = 0
        self.keys: list[CallKey | None] = []

    @deferring
    def test_later(self, ctx: CallContext, request: Ask) -> Deferred | Told:
        key = call_key(ctx)
        self.keys.append(key)
        told = Told(len(self.keys), *(key or (b"", 0)))
        deferred = Deferred()
        if request.how == "now":
            deferred.resolve(told)
            return deferred
        if request.how == "task":
            return Deferred.running(self._in_task(told))
        deferred.on_cancel = self._cancelled
        self.waiting.append(deferred)
        return deferred

    async def _in_task(self, told: Told) -> Told:
        await asyncio.sleep(0)
        key = current_call()  # the task runs with the call's key, as an async handler
        assert key is not None and key == (told.client_id, told.call)
        return told

    def _cancelled(self) -> None:
        self.cancelled += 1


@pytest.fixture
def handlers() -> Handlers:
    return Handlers()


@pytest.fixture
async def server(minicluster: MiniCluster, handlers: Handlers) -> RpcServer:
    return await minicluster.start_server("deferred", [(SERVICE, handlers)])


@pytest.fixture
def client(minicluster: MiniCluster, server: RpcServer) -> RpcClient:
    return minicluster.client(server.address)


async def test_answered_when_settled_without_a_task(
    client: RpcClient, server: RpcServer, handlers: Handlers
) -> None:
    calls = [asyncio.create_task(client.call(LATER, Ask("later"))) for _ in range(3)]
    await eventually(lambda: len(handlers.waiting) == 3)
    (conn,) = server.connections
    assert not conn._calls and len(conn._deferred) == 3  # waiting, with no task
    await asyncio.sleep(0.01)
    assert not any(call.done() for call in calls)  # nothing answers before it is settled
    for n, deferred in enumerate(handlers.waiting, 1):
        deferred.resolve(Told(n))  # settled together: their replies leave together
    assert [told.n for told in await asyncio.gather(*calls)] == [1, 2, 3]
    assert not conn._deferred and handlers.cancelled == 0


async def test_settled_before_returning_and_by_a_task_with_the_call_key(
    client: RpcClient, server: RpcServer, handlers: Handlers
) -> None:
    now = await client.call(LATER, Ask("now"))
    in_task = await client.call(LATER, Ask("task"))
    assert now.call > 0 and in_task.call > now.call  # each saw its own retry key
    assert now.client_id and in_task.client_id == now.client_id
    (conn,) = server.connections
    await eventually(lambda: not conn._calls and not conn._unary_calls)


async def test_a_failure_is_a_typed_error(
    client: RpcClient, server: RpcServer, handlers: Handlers
) -> None:
    call = asyncio.create_task(client.call(LATER, Ask("later")))
    await eventually(lambda: handlers.waiting)
    handlers.waiting[0].fail(InvalidArgument("no such thing"))
    with pytest.raises(InvalidArgument, match="no such thing"):
        await call
    handlers.waiting[0].resolve(Told(9))  # a second outcome is ignored


async def test_cancelled_by_the_client_frees_its_slot(
    client: RpcClient, server: RpcServer, handlers: Handlers
) -> None:
    conn = await client.connection(server.address)
    with pytest.raises(RpcTimeout):
        await conn.call(LATER, Ask("later"), timeout_s=0.2)
    (server_conn,) = server.connections
    await eventually(lambda: handlers.cancelled == 1 and not server_conn._deferred)
    handlers.waiting[0].resolve(Told(1))  # settled after the cancel: nothing is sent
    assert (await conn.call(LATER, Ask("now"), timeout_s=10)).n == 2


async def test_cancelled_with_their_connection(
    client: RpcClient, server: RpcServer, handlers: Handlers
) -> None:
    calls = [asyncio.create_task(client.call(LATER, Ask("later"))) for _ in range(3)]
    await eventually(lambda: len(handlers.waiting) == 3)
    (server_conn,) = server.connections
    assert server_conn.transport is not None
    server_conn.transport.abort()
    await eventually(lambda: handlers.cancelled == 3)
    assert not server_conn._deferred
    for deferred in handlers.waiting:
        deferred.resolve(Told(0))  # nobody listens any more
    for call in calls:
        call.cancel()
    await asyncio.gather(*calls, return_exceptions=True)


async def test_deferred_calls_hold_their_slots(
    minicluster: MiniCluster, handlers: Handlers
) -> None:
    """At the in-flight limit further calls wait (parked), and run as slots free."""
    server = await minicluster.start_server(
        "deferred-small", [(SERVICE, handlers)], inflight_per_connection_max=2
    )
    client = minicluster.client(server.address)
    calls = [asyncio.create_task(client.call(LATER, Ask("later"))) for _ in range(3)]
    await eventually(lambda: len(handlers.waiting) == 2)
    (conn,) = server.connections
    await eventually(lambda: len(conn._parked) == 1)
    handlers.waiting[0].resolve(Told(1))
    await eventually(lambda: len(handlers.waiting) == 3)  # the parked call ran
    for deferred in handlers.waiting[1:]:
        deferred.resolve(Told(2))
    assert len(await asyncio.gather(*calls)) == 3
