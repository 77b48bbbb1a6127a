"""Routing a client's NameNode calls over the shards of a sharded namespace.

:class:`ShardedRpcClient` is the :class:`~xdfs.rpc.client.RpcClient` of the configured
NameNode address(es) (the *seed*: any one shard is enough), and every other part of the
client (readers, writers, the lease renewer) calls it as it calls one NameNode. Its first
call asks the seed for the slot map (``get_slot_map``): an unsharded NameNode (or one
without the method) says so and every call goes to it as before. On a sharded namespace
each call goes to the shard owning the slot of its routing path
(:func:`xdfs.sharding.routing.routing_path`), over a connection of its own per shard; a
``WrongShard`` answer refreshes the map (from the shard that answered, sending the epoch
this client knows, which makes a shard behind re-read ZooKeeper) and the call is retried
once at the new owner. Top-layer paths (``/``, ``/user``): a listing merges every shard's,
a stat asks the next shard when one has no such directory, ``du``/``count`` add
the shards' totals, changes are refused by the
shards (TopLayerChange). Lease renewals go to every shard this client has talked to.
"""

from __future__ import annotations

import contextlib
import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from xdfs.errors import NotFound, UnknownMethod, WrongShard
from xdfs.protocol import namenode as p
from xdfs.protocol.sharding import GET_SLOT_MAP, SlotMapRequest, SlotMapResponse
from xdfs.rpc.client import RpcClient
from xdfs.rpc.messages import Empty
from xdfs.rpc.service import Method, Req, Resp
from xdfs.sharding.routing import Routing, routing_path
from xdfs.sharding.slotmap import SlotMap, SlotRange
from xdfs.sharding.slots import Partitioning


@dataclass(frozen=True)
class KnownMap:
    routing: Routing
    addresses: dict[str, str] = field(default_factory=dict)

    @property
    def epoch(self) -> int:
        return self.routing.slot_map.epoch

    @classmethod
    def of(cls, answer: SlotMapResponse) -> KnownMap:
        parts = Partitioning(answer.partition_depth, dict(answer.depth_overrides))
        return cls(Routing(parts, slot_map_of(answer)),
                   {info.shard: info.address for info in answer.shards})


def slot_map_of(answer: SlotMapResponse) -> SlotMap:
    """The map a get_slot_map answer carries (SlotMapInvalid when it does not hold)."""
    return SlotMap(answer.epoch, [SlotRange(*r) for r in answer.ranges])


class ShardedRpcClient(RpcClient):
    def __init__(self, addresses: str | Sequence[str], *args: Any, **kwargs: Any) -> None:
        super().__init__(addresses, *args, **kwargs)
        self._args, self._kwargs = args, kwargs
        #: None: not asked yet; False: the NameNode is not sharded.
        self.known: KnownMap | bool | None = None
        self._shards: dict[str, RpcClient] = {}  # address -> its client

    async def call(
        self, method: Method[Req, Resp], request: Req, *, timeout_s: float | None = None
    ) -> Resp:
        known = self.known
        if known is None:
            known = await self.learn(self)
        if known is False or method is GET_SLOT_MAP:
            return await RpcClient.call(self, method, request, timeout_s=timeout_s)
        assert isinstance(known, KnownMap)
        if method is p.RENEW_LEASE:
            return await self._renew_everywhere(request, timeout_s)  # type: ignore[return-value]
        path = routing_path(request)
        owner = None if path is None else known.routing.owner_of(path)
        if owner is None:
            if path is not None and method is p.LIST:
                return await self._merged_list(known, request, timeout_s)  # type: ignore
            if path is not None and method is p.CONTENT_SUMMARY:
                return await self._summed(known, request, timeout_s)  # type: ignore
            if path is not None and method is p.STAT:
                return await self._any_shard(known, method, request, timeout_s)
            return await RpcClient.call(self, method, request, timeout_s=timeout_s)
        target = self.shard_client(known, owner)
        try:
            return await self._call_one(target, method, request, timeout_s)
        except WrongShard:
            refreshed = await self.learn(target, known.epoch)
            assert isinstance(refreshed, KnownMap) and path is not None
            owner = refreshed.routing.owner_of(path)
            assert owner is not None
            return await self._call_one(self.shard_client(refreshed, owner), method, request,
                                        timeout_s)

    async def learn(self, source: RpcClient, epoch: int = 0) -> KnownMap | bool:
        """Ask ``source`` for the slot map (telling it the epoch known here)."""
        try:
            answer = await RpcClient.call(source, GET_SLOT_MAP, SlotMapRequest(epoch))
        except UnknownMethod:  # a NameNode older than sharding: not sharded
            self.known = False
            return False
        self.known = KnownMap.of(answer) if answer.shard else False
        return self.known

    def shard_client(self, known: KnownMap, shard: str) -> RpcClient:
        """The client of ``shard``'s address (this one for the seed's own address)."""
        address = known.addresses.get(shard, "")
        if not address or address in self.addresses:
            return self
        client = self._shards.get(address)
        if client is None:
            client = self._shards[address] = RpcClient(
                address, *self._args, **{**self._kwargs, "hello": self.hello})
        return client

    def _every_shard(self, known: KnownMap) -> list[RpcClient]:
        seen: dict[int, RpcClient] = {}
        for shard in known.addresses:
            client = self.shard_client(known, shard)
            seen[id(client)] = client
        return list(seen.values()) or [self]

    async def _call_one(self, client: RpcClient, method: Method[Req, Resp], request: Req,
                        timeout_s: float | None) -> Resp:
        if client is self:
            return await RpcClient.call(self, method, request, timeout_s=timeout_s)
        return await client.call(method, request, timeout_s=timeout_s)

    async def _any_shard(self, known: KnownMap, method: Method[Req, Resp], request: Req,
                         timeout_s: float | None) -> Resp:
        """A top-layer read: the first shard that has the path (every shard holds the
        directories above its partitions)."""
        missing: NotFound | None = None
        for client in self._every_shard(known):
            try:
                return await self._call_one(client, method, request, timeout_s)
            except NotFound as exc:
                missing = exc
        assert missing is not None
        raise missing

    async def _merged_list(self, known: KnownMap, request: p.ListRequest,
                           timeout_s: float | None) -> p.Listing:
        """One page of a top-layer directory: the shards' pages merged by name (a name
        several shards hold, e.g. ``/user``'s ``alice`` made on one, listed once)."""
        pages: list[p.Listing] = []
        missing: NotFound | None = None
        for client in self._every_shard(known):
            try:
                pages.append(await self._call_one(client, p.LIST, request, timeout_s))
            except NotFound as exc:
                missing = exc
        if not pages:
            assert missing is not None
            raise missing
        merged: dict[str, p.FileStatus] = {}
        for entry in heapq.merge(*(page.entries for page in pages), key=lambda e: e.path):
            merged.setdefault(entry.path, entry)
        entries = list(merged.values())
        limit = request.limit if request.limit > 0 else len(entries)
        left = len(entries) - min(limit, len(entries))
        return p.Listing(entries[:limit], left + sum(page.remaining for page in pages))

    async def _summed(self, known: KnownMap, request: p.PathRequest,
                      timeout_s: float | None) -> p.ContentSummary:
        """``du``/``count`` of a top-layer directory: every shard's totals added (the
        directory itself counted once; a top-layer directory below it, on several shards,
        once per shard)."""
        parts: list[p.ContentSummary] = []
        for client in self._every_shard(known):
            with contextlib.suppress(NotFound):
                parts.append(await self._call_one(client, p.CONTENT_SUMMARY, request,
                                                  timeout_s))
        if not parts:
            raise NotFound(f"{request.path}: no such file or directory")
        return p.ContentSummary(
            sum(s.length for s in parts), sum(s.file_count for s in parts),
            sum(s.directory_count for s in parts) - (len(parts) - 1),
            sum(s.space_consumed for s in parts), parts[0].ns_quota, parts[0].ds_quota)

    async def _renew_everywhere(self, request: Any, timeout_s: float | None) -> Empty:
        """A client's leases may be on every shard it wrote to: renew on each."""
        clients = [self, *self._shards.values()]
        for client in clients:
            await self._call_one(client, p.RENEW_LEASE, request, timeout_s)
        return Empty()

    async def shard_maps(self) -> list[SlotMapResponse]:
        """Every shard's answer to get_slot_map (its map, and its own inode count): one
        answer, the seed's, when the NameNode is not sharded."""
        first = await RpcClient.call(self, GET_SLOT_MAP, SlotMapRequest())
        if not first.shard:
            return [first]
        known = KnownMap.of(first)
        self.known = known
        answers = [first]
        for client in self._every_shard(known):
            if client is not self:
                answers.append(await client.call(GET_SLOT_MAP, SlotMapRequest(known.epoch)))
        return answers

    async def close(self) -> None:
        shards, self._shards = list(self._shards.values()), {}
        for client in shards:
            await client.close()
        await super().close()
