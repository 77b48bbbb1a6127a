"""Deadlines, retries and failover of RpcClient, including a SIGKILLed server process."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.rpc.services import (
    BUMP,
    BUMP_IDEM,
    BUMP_UPLOAD,
    SLOW,
    TEST_SERVICE,
    WHOAMI,
    Count,
    Name,
    SlowRequest,
    TestHandlers,
)
from xdfs.common.process import ProcessGroup, ServerProcess
from xdfs.errors import ConnectionLost, RpcTimeout, Unavailable
from xdfs.protocol.system import ECHO, PING, SOURCE, EchoRequest, SourceRequest
from xdfs.rpc.client import RpcClient
from xdfs.rpc.messages import Empty
from xdfs.rpc.server import RpcServer
from xdfs.testing.minicluster import MiniCluster
from xdfs.testing.poll import eventually

FAST_RETRIES: dict[str, Any] = {"retry_backoff_initial_s": 0.001, "retry_backoff_max_s": 0.004}


def dead_address() -> str:
    """An address nobody listens on (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


class CountingListener:
    """Accepts TCP connections and closes them at once: up, but never completes a handshake."""

    def __init__(self) -> None:
        self.accepted = 0
        self._server: asyncio.Server | None = None
        self.address = ""

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()

    async def __aenter__(self) -> CountingListener:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.address = f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()


@pytest.fixture
async def listeners() -> AsyncIterator[tuple[CountingListener, CountingListener]]:
    async with CountingListener() as a, CountingListener() as b:
        yield a, b


# -- deadlines -------------------------------------------------------------------------------


async def test_call_timeout_leaves_the_connection_usable(
    client: RpcClient, server: RpcServer
) -> None:
    conn = await client.connection(server.address)
    with pytest.raises(RpcTimeout):
        await conn.call(ECHO, EchoRequest(b"late", delay_s=30), timeout_s=0.2)
    assert not conn.is_closing
    assert not conn._pending
    # The client cancelled the call, so the server stops running it.
    (server_conn,) = server.connections
    await eventually(lambda: not server_conn._calls)
    reply = await conn.call(ECHO, EchoRequest(b"next"), timeout_s=10)
    assert reply.payload == b"next"
    assert await client.connection(server.address) is conn


async def test_late_answer_after_timeout_is_dropped(client: RpcClient, server: RpcServer) -> None:
    conn = await client.connection(server.address)
    with pytest.raises(RpcTimeout):
        await conn.call(SLOW, SlowRequest(0.0), timeout_s=0)  # expires before any answer
    # The answer of the expired call arrives (or its cancellation does) and is ignored;
    # the next calls get their own answers.
    for i in range(5):
        assert (await conn.call(ECHO, EchoRequest(bytes([i])), timeout_s=10)).payload == bytes([i])


async def test_non_idempotent_call_is_not_retried_after_timeout(
    minicluster: MiniCluster, server: RpcServer, handlers: TestHandlers
) -> None:
    client = minicluster.client(server.address, **FAST_RETRIES)
    with pytest.raises(RpcTimeout):
        await client.call(SLOW, SlowRequest(30), timeout_s=0.2)
    assert handlers.calls["test_slow"] == 1
    assert await client.call(PING, Empty()) == Empty()


async def test_idempotent_call_is_retried_after_timeout(
    minicluster: MiniCluster, server: RpcServer
) -> None:
    client = minicluster.client(server.address, tries_per_address=2, **FAST_RETRIES)
    # Every try times out; after tries_per_address tries the client gives up.
    with pytest.raises(Unavailable, match="no answer within") as info:
        await client.call(ECHO, EchoRequest(b"x", delay_s=30), timeout_s=0.2)
    assert str(info.value).count("no answer within") == 2


async def test_a_timeout_sends_the_next_call_to_the_next_address(
    minicluster: MiniCluster, server: RpcServer, handlers: TestHandlers
) -> None:
    """A server that does not answer in time (paused: TCP open, nothing read) is left like
    one whose connection broke, also after a call that could not be repeated."""
    other = await minicluster.start_server("other", [(TEST_SERVICE, TestHandlers("other"))])
    client = minicluster.client(server.address, other.address, **FAST_RETRIES)
    with pytest.raises(RpcTimeout):
        await client.call(SLOW, SlowRequest(30), timeout_s=0.2)  # not repeated anywhere
    assert handlers.calls["test_slow"] == 1
    assert client.current_address == other.address
    assert await client.call(WHOAMI, Empty()) == Name("other")


async def test_idempotent_call_fails_over_at_once_after_a_timeout(
    minicluster: MiniCluster, server: RpcServer
) -> None:
    other = await minicluster.start_server("other", [(TEST_SERVICE, TestHandlers("other"))])
    client = minicluster.client(server.address, other.address, tries_per_address=3,
                                **FAST_RETRIES)
    with pytest.raises(Unavailable) as info:  # both too slow: one try each, not three
        await client.call(ECHO, EchoRequest(b"x", delay_s=30), timeout_s=0.2)
    text = str(info.value)
    assert text.count("no answer within") == 2
    assert server.address in text and other.address in text


# -- retries and failover --------------------------------------------------------------------


async def test_fails_over_from_a_dead_address_to_a_live_one(
    minicluster: MiniCluster, server: RpcServer
) -> None:
    dead = dead_address()
    client = minicluster.client(dead, server.address, **FAST_RETRIES)
    assert client.current_address == dead
    reply = await client.call(ECHO, EchoRequest(b"via failover"))
    assert reply.payload == b"via failover"
    assert client.current_address == server.address  # remembered for the next call


async def test_only_dead_addresses_raise_unavailable_after_n_tries_each(
    minicluster: MiniCluster, listeners: tuple[CountingListener, CountingListener]
) -> None:
    a, b = listeners
    client = minicluster.client(a.address, b.address, tries_per_address=3, **FAST_RETRIES)
    with pytest.raises(Unavailable) as info:
        await client.call(PING, Empty())
    assert type(info.value) is Unavailable
    assert (a.accepted, b.accepted) == (3, 3)
    assert a.address in str(info.value)

    client1 = minicluster.client(a.address, tries_per_address=1, **FAST_RETRIES)
    with pytest.raises(Unavailable):
        await client1.call(PING, Empty())
    assert a.accepted == 4


async def test_refused_addresses_raise_unavailable(minicluster: MiniCluster) -> None:
    client = minicluster.client(dead_address(), dead_address(), **FAST_RETRIES)
    with pytest.raises(Unavailable, match="cannot connect"):
        await client.call(PING, Empty())


async def test_retry_backoff_doubles_per_address(
    minicluster: MiniCluster,
    listeners: tuple[CountingListener, CountingListener],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a, b = listeners
    delays: list[float] = []
    real_sleep = asyncio.sleep

    async def recording_sleep(delay: float, *args: object) -> None:
        delays.append(delay)
        await real_sleep(0)

    monkeypatch.setattr(asyncio, "sleep", recording_sleep)  # as xdfs.rpc.client sees it
    client = minicluster.client(
        a.address, b.address, tries_per_address=4,
        retry_backoff_initial_s=0.25, retry_backoff_max_s=0.75,
    )
    with pytest.raises(Unavailable):
        await client.call(PING, Empty())
    monkeypatch.undo()
    # Per address: no wait before the first try, then 0.25, 0.5, capped at 0.75.
    assert delays == [0.25, 0.5, 0.75, 0.25, 0.5, 0.75]


async def test_non_idempotent_call_is_not_retried_after_connection_lost(
    client: RpcClient, handlers: TestHandlers
) -> None:
    with pytest.raises(ConnectionLost):
        await client.call(BUMP, Empty())
    assert handlers.calls["test_bump"] == 1
    # The client reconnects for the next call.
    assert await client.call(BUMP, Empty()) == Count(2)


async def test_idempotent_call_is_retried_after_connection_lost(
    client: RpcClient, handlers: TestHandlers
) -> None:
    assert await client.call(BUMP_IDEM, Empty()) == Count(2)
    assert handlers.calls["test_bump_idem"] == 2


async def test_idempotent_upload_of_a_list_is_retried_after_connection_lost(
    client: RpcClient, handlers: TestHandlers
) -> None:
    data = bytes(range(256)) * 1000
    result = await client.upload(BUMP_UPLOAD, Empty(), [data])
    assert (result.chunks, result.total_bytes) == (2, len(data))  # chunks: the call count
    assert handlers.calls["test_bump_upload"] == 2


async def test_upload_from_a_generator_is_not_retried(
    client: RpcClient, handlers: TestHandlers
) -> None:
    def pieces() -> Iterator[bytes]:
        yield b"can be read only once"

    with pytest.raises(ConnectionLost):
        await client.upload(BUMP_UPLOAD, Empty(), pieces())
    assert handlers.calls["test_bump_upload"] == 1


async def test_a_closed_connection_is_replaced(client: RpcClient, server: RpcServer) -> None:
    await client.call(PING, Empty())
    conn = await client.connection(server.address)
    conn.close()
    await conn.wait_closed()
    assert await client.call(PING, Empty()) == Empty()
    assert await client.connection(server.address) is not conn


async def test_not_active_moves_to_the_next_address_at_once(minicluster: MiniCluster) -> None:
    standby, active = TestHandlers("standby"), TestHandlers("active")
    standby.standby = True
    s1 = await minicluster.start_server("standby", [(TEST_SERVICE, standby)])
    s2 = await minicluster.start_server("active", [(TEST_SERVICE, active)])
    client = minicluster.client(s1.address, s2.address, tries_per_address=3, **FAST_RETRIES)
    assert await client.call(WHOAMI, Empty()) == Name("active")
    assert standby.calls["test_whoami"] == 1  # not tried three times
    assert client.current_address == s2.address
    assert await client.call(WHOAMI, Empty()) == Name("active")
    assert standby.calls["test_whoami"] == 1  # the active one is asked first now


async def test_overloaded_is_retried_even_for_non_idempotent_methods(
    minicluster: MiniCluster,
) -> None:
    busy = TestHandlers("busy")
    busy.busy_answers = 2
    server = await minicluster.start_server("busy", [(TEST_SERVICE, busy)])
    client = minicluster.client(server.address, tries_per_address=3, **FAST_RETRIES)
    assert await client.call(WHOAMI, Empty()) == Name("busy")
    assert busy.calls["test_whoami"] == 3

    busy.busy_answers = 10
    with pytest.raises(Unavailable, match="busy"):
        await client.call(WHOAMI, Empty())
    assert busy.calls["test_whoami"] == 6


# -- a real server process killed with SIGKILL ----------------------------------------------


def echo_server(tmp_path: Path, port: int) -> ServerProcess:
    return ServerProcess(
        [sys.executable, "-m", "xdfs.testing.echo_server", "--port", str(port)],
        log_path=tmp_path / "echo.log",
        ready_pattern=r"serving on (\S+)",
    )


async def test_kill_9_mid_call_then_restart_on_the_same_port(
    minicluster: MiniCluster, processes: ProcessGroup, tmp_path: Path
) -> None:
    proc = await asyncio.to_thread(processes.start, echo_server(tmp_path, 0), 60)
    assert proc.match is not None
    address = proc.match.group(1)
    port = int(address.rsplit(":", 1)[1])
    client = minicluster.client(address, tries_per_address=2, **FAST_RETRIES)
    assert await client.call(PING, Empty()) == Empty()

    conn = await client.connection(address)
    echo = asyncio.create_task(conn.call(ECHO, EchoRequest(b"x", delay_s=30), 60))
    stream = await conn.download(SOURCE, SourceRequest(1 << 40), timeout_s=60)
    assert len(await stream.__anext__()) > 0
    # Frames are handled in order, so once this answer is back the echo call is running.
    assert await conn.call(PING, Empty(), 10) == Empty()

    proc.kill()
    assert not proc.alive()
    with pytest.raises(ConnectionLost):
        await echo
    with pytest.raises(ConnectionLost):
        async for _ in stream:
            pass
    # The retrying client finds nobody listening.
    with pytest.raises(Unavailable):
        await client.call(ECHO, EchoRequest(b"anyone?"))

    restarted = await asyncio.to_thread(processes.start, echo_server(tmp_path, port), 60)
    assert restarted.match is not None
    assert restarted.match.group(1) == address
    reply = await client.call(ECHO, EchoRequest(b"back again"))
    assert reply.payload == b"back again"
    restarted.terminate()
