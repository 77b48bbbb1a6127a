"""The storage nodes as the log's writers and readers see them (the ``ledger`` service).

One :class:`LedgerNode` per node: adds to a node are *sent* in the order they were made
(a node refuses entries out of order) yet pipelined -- an add does not wait for the one
before it to be answered, so a node's fsyncs cover many adds at once. :class:`NodePool`
keeps one per address and fans calls out with :func:`xdfs.quorum.fanout.quorum_call`, the
journal's quorum driver, counting an *ack quorum* of successes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ssl
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import msgspec

from xdfs.config import RpcConfig
from xdfs.editlog.framing import frame_record
from xdfs.errors import LedgerFenced, LogFenced
from xdfs.protocol import ledger as lp
from xdfs.quorum.calls import QuorumCall
from xdfs.quorum.fanout import QuorumFailed, quorum_call
from xdfs.rpc.client import ClientConnection, RpcClient
from xdfs.rpc.messages import Empty, Hello
from xdfs.rpc.service import Method

Req = TypeVar("Req", bound=msgspec.Struct)
Resp = TypeVar("Resp", bound=msgspec.Struct)
T = TypeVar("T")


def frame_entries(first_entry: int, payloads: Iterable[bytes]) -> tuple[bytes, int]:
    frames = [frame_record(lp.ENTRY_OPCODE, first_entry + i, p) for i, p in enumerate(payloads)]
    return b"".join(frames), len(frames)


class LedgerNode:
    def __init__(self, address: str, config: RpcConfig, hello: Hello, call_timeout_s: float,
                 ssl_context: ssl.SSLContext | None) -> None:
        self.address = address
        self.call_timeout_s = call_timeout_s
        once = dataclasses.replace(config, tries_per_address=1)
        self._rpc = RpcClient(address, once, hello=hello, ssl_context=ssl_context)
        self._order = asyncio.Lock()

    async def call(self, method: Method[Req, Resp], request: Req) -> Resp:
        return await self._rpc.call(method, request, timeout_s=self.call_timeout_s)

    async def add(self, request: lp.AddEntriesRequest, timeout_s: float) -> int:
        """Send in call order; wait for the answer outside the order lock (pipelining)."""
        async with self._order:
            conn: ClientConnection = await self._rpc.connection(self.address)
            answer = asyncio.ensure_future(conn.call(lp.ADD_ENTRIES, request, timeout_s))
            await asyncio.sleep(0)  # the task's first step sends the request, in order
        return (await answer).last_entry

    async def close(self) -> None:
        await self._rpc.close()


class NodePool:
    def __init__(self, config: RpcConfig, hello: Hello, call_timeout_s: float,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self._settings = (config, hello, call_timeout_s, ssl_context)
        self._nodes: dict[str, LedgerNode] = {}
        self.call_timeout_s = call_timeout_s

    def node(self, address: str) -> LedgerNode:
        node = self._nodes.get(address)
        if node is None:
            node = self._nodes[address] = LedgerNode(address, *self._settings)
        return node

    async def quorum(self, what: str, nodes: Iterable[str], needed: int,
                     start: Callable[[LedgerNode], Awaitable[T]],
                     timeout_s: float | None = None, *,
                     on_failure: Callable[[str, BaseException], None] | None = None,
                     ) -> QuorumCall[T]:
        """``start`` on every node; ``needed`` successes. A node's ``LedgerFenced`` means a
        newer writer took the log over: raised as LogFenced once the quorum fails."""
        try:
            return await quorum_call(what, nodes, needed, lambda a: start(self.node(a)),
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
                await self.node(address).call(lp.LIST_LEDGERS, Empty())
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
