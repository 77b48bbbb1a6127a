"""NameNode mutations made in one step (handlers answer through rpc.server.Deferred once
the edits are synced): no answer before the sync, a retry meanwhile gets the same answer
once durable, and a fatal edits error fails every waiting call."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from xdfs.errors import AlreadyExists, ConnectionLost, StorageError
from xdfs.namenode.editlog.editlog import Journal
from xdfs.namenode.server import NameNode
from xdfs.protocol import namenode as p
from xdfs.rpc.client_connection import ClientConnection
from xdfs.rpc.messages import PROTOCOL_VERSION, Hello
from xdfs.rpc.service import Method
from xdfs.testing.minicluster import MiniCluster

TIMEOUT_S = 30.0


class GatedJournal:
    """The NameNode's journal, its writes held until the test opens the gate (or failed)."""

    def __init__(self, inner: Journal) -> None:
        self.inner = inner
        self.gate = asyncio.Event()
        self.entered = asyncio.Event()
        self.fail_with: BaseException | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def start_write(self, data: bytes | bytearray, first_txid: int, last_txid: int,
                    done: Callable[[BaseException | None], None]) -> bool:
        return False  # every write through the gate

    async def write(self, data: bytes | bytearray, first_txid: int, last_txid: int) -> None:
        self.entered.set()
        await self.gate.wait()
        if self.fail_with is not None:
            raise self.fail_with
        await self.inner.write(data, first_txid, last_txid)


@pytest.fixture
async def nn(minicluster: MiniCluster) -> NameNode:
    return await minicluster.start_namenode()


async def connection(minicluster: MiniCluster, nn: NameNode) -> ClientConnection:
    hello = Hello(PROTOCOL_VERSION, client_name="one-step", user="root", password="rootpw")
    return await minicluster.client(nn.address, hello=hello).connection(nn.address)


def gate(nn: NameNode) -> GatedJournal:
    assert nn.edits is not None
    gated = GatedJournal(nn.edits.journals[0])
    nn.edits.journals[0] = gated
    return gated


def send(conn: ClientConnection, method: Method[Any, Any], request: Any, call: int) -> Any:
    return asyncio.create_task(conn.call(method, request, TIMEOUT_S, call))


async def test_answered_once_durable_and_a_retry_meanwhile_gets_the_same(
    minicluster: MiniCluster, nn: NameNode
) -> None:
    conn = await connection(minicluster, nn)
    journal = gate(nn)
    request = p.CreateRequest("/tmp/f", "writer-1", overwrite=False)
    first = send(conn, p.CREATE, request, 5)
    await journal.entered.wait()  # applied and being written
    retry = send(conn, p.CREATE, request, 5)
    other = send(conn, p.MKDIRS, p.MkdirsRequest("/tmp/d", parents=True), 6)
    await asyncio.sleep(0.05)
    assert not first.done() and not retry.done() and not other.done()  # none before durable
    journal.gate.set()
    status = await first
    assert await retry == status  # the first answer, not a second create
    assert (await other).path == "/tmp/d"
    with pytest.raises(AlreadyExists):
        await send(conn, p.CREATE, request, 7)  # a new call number: a second create


async def test_a_fatal_edits_error_fails_every_waiting_call(
    minicluster: MiniCluster, nn: NameNode
) -> None:
    conn = await connection(minicluster, nn)
    journal = gate(nn)
    calls = [send(conn, p.CREATE, p.CreateRequest(f"/tmp/f{i}", "w"), 10 + i) for i in range(3)]
    calls.append(send(conn, p.RENAME, p.RenameRequest("/tmp", "/tmp2"), 20))
    await journal.entered.wait()
    journal.fail_with = OSError(5, "Input/output error")
    journal.gate.set()
    results = await asyncio.gather(*calls, return_exceptions=True)
    # never a success: the stopping NameNode drops its connections before it tells its
    # waiting calls (their edits may be on disk or not: the client retries, and a restarted
    # NameNode answers from its edits), an error reply at most
    assert all(isinstance(r, StorageError | ConnectionLost) for r in results), results
    assert isinstance(nn.fatal, StorageError)


async def test_the_one_step_handlers_keep_their_marks_in_either_build(nn: NameNode) -> None:
    # A compiled handler's method takes no attribute: rpc.handling.deferring keeps the
    # marked methods in a set, which must find them whether the handlers are compiled.
    assert nn.server is not None
    routes = nn.server.routes
    one_step = {"mkdirs", "create", "create_with_block", "complete", "delete", "rename"}
    assert {name for name, route in routes.items() if route.deferring} == one_step
    assert all(routes[name].inline for name in one_step)
    assert routes["add_block"].is_async and not routes["add_block"].inline
