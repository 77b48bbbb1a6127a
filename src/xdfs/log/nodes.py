"""The storage nodes as the log's writers and readers see them (the ``ledger`` service).

One :class:`LedgerNode` per node: adds to a node are *sent* in the order they were made
(a node refuses entries out of order) yet pipelined -- an add does not wait for the one
before it to be answered -- and, under load, merged: adds made while requests are in
flight go together as one request, so a node's fsyncs cover many adds at once. :class:`NodePool`
keeps one per address and fans calls out with :func:`xdfs.quorum.fanout.quorum_call`, the
journal's quorum driver, counting an *ack quorum* of successes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import ssl
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import msgspec

from xdfs.config import RpcConfig
from xdfs.editlog.framing import frame_record
from xdfs.errors import LedgerFenced, LogFenced, UnknownStorageNode
from xdfs.protocol import ledger as lp
from xdfs.quorum.calls import QuorumCall
from xdfs.quorum.fanout import QuorumFailed, quorum_call
from xdfs.rpc.client import RpcClient
from xdfs.rpc.client_connection import ClientConnection
from xdfs.rpc.messages import Empty, Hello
from xdfs.rpc.service import Method

Req = TypeVar("Req", bound=msgspec.Struct)
Resp = TypeVar("Resp", bound=msgspec.Struct)
T = TypeVar("T")

log = logging.getLogger(__name__)


def frame_entries(first_entry: int, payloads: Iterable[bytes]) -> tuple[bytes, int]:
    frames = [frame_record(lp.ENTRY_OPCODE, first_entry + i, p) for i, p in enumerate(payloads)]
    return b"".join(frames), len(frames)


#: Add requests on their way to one node at once; more adds wait and are merged.
ADDS_IN_FLIGHT = 2


def _continues(before: lp.AddEntriesRequest, after: lp.AddEntriesRequest) -> bool:
    return (after.ledger_id == before.ledger_id and not after.recovery and not before.recovery
            and after.first_entry == before.first_entry + before.count)


class LedgerNode:
    def __init__(self, address: str, config: RpcConfig, hello: Hello, call_timeout_s: float,
                 ssl_context: ssl.SSLContext | None) -> None:
        self.address = address
        self.call_timeout_s = call_timeout_s
        once = dataclasses.replace(config, tries_per_address=1)
        self._rpc = RpcClient(address, once, hello=hello, ssl_context=ssl_context)
        self._order = asyncio.Lock()
        self._waiting: list[tuple[lp.AddEntriesRequest, asyncio.Future[int]]] = []
        self._in_flight = 0
        self._sending: set[asyncio.Future[None]] = set()

    async def call(self, method: Method[Req, Resp], request: Req) -> Resp:
        return await self._rpc.call(method, request, timeout_s=self.call_timeout_s)

    async def add(self, request: lp.AddEntriesRequest, timeout_s: float) -> int:
        """Add entries, in call order. While :data:`ADDS_IN_FLIGHT` requests are on their
        way to the node, later adds wait and go together as one request (consecutive
        entries of one ledger): fewer calls and fsyncs under load, none of the waiting
        when idle."""
        answer: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiting.append((request, answer))
        self._pump(timeout_s)
        return await answer

    def _pump(self, timeout_s: float) -> None:
        while self._waiting and self._in_flight < ADDS_IN_FLIGHT:
            group = [self._waiting.pop(0)]
            while self._waiting and _continues(group[-1][0], self._waiting[0][0]):
                group.append(self._waiting.pop(0))
            self._in_flight += 1
            task = asyncio.ensure_future(self._send(group, timeout_s))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(self, group: list[tuple[lp.AddEntriesRequest, asyncio.Future[int]]],
                    timeout_s: float) -> None:
        requests = [r for r, _ in group]
        merged = requests[0] if len(requests) == 1 else lp.AddEntriesRequest(
            requests[0].ledger_id, requests[0].first_entry, sum(r.count for r in requests),
            b"".join(r.entries for r in requests), max(r.lac for r in requests))
        try:
            async with self._order:  # sends leave in the order the groups were formed
                conn: ClientConnection = await self._rpc.connection(self.address)
                answer = asyncio.ensure_future(conn.call(lp.ADD_ENTRIES, merged, timeout_s))
                await asyncio.sleep(0)  # the task's first step sends the request
            last = (await answer).last_entry
        except Exception as exc:  # every add of the group fails the same way
            for _, waiter in group:
                if not waiter.done():
                    waiter.set_exception(exc)
        else:
            for _, waiter in group:
                if not waiter.done():
                    waiter.set_result(last)
        finally:
            self._in_flight -= 1
            self._pump(timeout_s)

    async def close(self) -> None:
        await self._rpc.close()


class NodePool:
    """The storage nodes this process speaks to. ``allowed``: the configured ones
    (``logservice.storage_nodes``); any other address -- one that only the metadata in
    ZooKeeper names -- is refused before it is dialled, so the secret in ``hello`` never
    goes there (None: no list to check against)."""

    def __init__(self, config: RpcConfig, hello: Hello, call_timeout_s: float,
                 ssl_context: ssl.SSLContext | None = None, *,
                 allowed: Iterable[str] | None = None) -> None:
        self._settings = (config, hello, call_timeout_s, ssl_context)
        self._nodes: dict[str, LedgerNode] = {}
        self.call_timeout_s = call_timeout_s
        self.allowed = None if allowed is None else frozenset(allowed)
        self._refused: set[str] = set()

    def node(self, address: str) -> LedgerNode:
        node = self._nodes.get(address)
        if node is None:
            self.check(address)
            node = self._nodes[address] = LedgerNode(address, *self._settings)
        return node

    def check(self, address: str) -> None:
        """UnknownStorageNode unless ``address`` is a configured storage node (logged
        once per address: someone rewrote the metadata)."""
        if self.allowed is None or address in self.allowed:
            return
        if address not in self._refused:
            self._refused.add(address)
            log.error("refusing storage node %s: not in logservice.storage_nodes (the "
                      "metadata naming it was not written by this service; nothing is "
                      "sent there)", address)
        raise UnknownStorageNode(f"{address} is not a configured storage node")

    async def quorum(self, what: str, nodes: Iterable[str], needed: int,
                     start: Callable[[LedgerNode], Awaitable[T]],
                     timeout_s: float | None = None, *,
                     on_failure: Callable[[str, BaseException], None] | None = None,
                     ) -> QuorumCall[T]:
        """``start`` on every node; ``needed`` successes. A node's ``LedgerFenced`` means a
        newer writer took the log over: raised as LogFenced once the quorum fails."""
        async def one(address: str) -> T:
            return await start(self.node(address))  # an unknown node: that call fails

        try:
            return await quorum_call(what, nodes, needed, one,
                                     timeout_s or self.call_timeout_s, on_failure=on_failure)
        except QuorumFailed as exc:
            if any(isinstance(e, LedgerFenced) for e in exc.call.failures.values()):
                raise LogFenced(f"{what}: the ledger was fenced by a newer writer "
                                f"({exc.message})") from exc
            raise

    async def live(self, addresses: Iterable[str]) -> list[str]:
        """The nodes that answer now (in the order given)."""
        addresses = list(addresses)

        async def probe(address: str) -> bool:
            try:
                node = self.node(address)
                await node.call(lp.LIST_LEDGERS, Empty())
            except Exception:  # any failure: not live for this purpose
                return False
            return True

        answers = await asyncio.gather(*(probe(a) for a in addresses))
        return [a for a, ok in zip(addresses, answers, strict=True) if ok]

    async def close(self) -> None:
        nodes = list(self._nodes.values())
        self._nodes.clear()
        for node in nodes:
            await node.close()

    def __contains__(self, address: Any) -> bool:
        return address in self._nodes
