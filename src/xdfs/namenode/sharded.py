"""A NameNode as one shard of a sharded namespace (``sharding.shard`` set).

:class:`ShardState` holds the slot map the shard routes by, kept current by a ZooKeeper
watch (:mod:`xdfs.sharding.zkmap`: registration, the controller's election, the initial
map), and checks every path of every client and admin call against it before the handler
runs (:func:`guarded`, :meth:`xdfs.sharding.routing.Routing.check`): a path of another
shard's slot is answered ``WrongShard``, never forwarded. ZooKeeper down: the shard keeps
serving the slots of the map it has; map changes wait.

:class:`ShardingHandlers` serves ``get_slot_map`` on every NameNode (an unsharded one
answers that it is not sharded).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from kazoo.client import KazooClient

from xdfs.common.coordination import start_session
from xdfs.common.secrets import read_secret_file
from xdfs.config import ShardingConfig
from xdfs.errors import ConfigError
from xdfs.namenode.namespace.trash import trash_root
from xdfs.namenode.namesystem import Namesystem
from xdfs.protocol import sharding as sp
from xdfs.protocol.namenode import DeleteRequest
from xdfs.rpc.handling import CallContext, Principal, same_markers
from xdfs.rpc.service import Service
from xdfs.sharding.ids import shard_of_id
from xdfs.sharding.routing import Routing, check_trash, require_map
from xdfs.sharding.slotmap import SlotMap
from xdfs.sharding.slots import Partitioning
from xdfs.sharding.zkmap import SECRET_KEY, ShardCoordinator, live_shards, read_map

log = logging.getLogger(__name__)


class ShardState:
    def __init__(self, config: ShardingConfig, *, trash_enabled: bool) -> None:
        self.config = config
        self.trash_enabled = trash_enabled
        self.shard = str(config.shard)
        self.partitioning = Partitioning(config.partition_depth, dict(config.depth_overrides))
        self.routing: Routing | None = None
        self.version = -1  # the map's znode version
        self.addresses: dict[str, str] = {}
        self.zk: KazooClient | None = None
        self.coordinator: ShardCoordinator | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def slot_map(self) -> SlotMap | None:
        return self.routing.slot_map if self.routing is not None else None

    async def start(self, address: str) -> None:
        """Log in to ZooKeeper, register at ``address`` and watch the map (blocking work
        in a thread)."""
        self._loop = asyncio.get_running_loop()
        config = self.config
        secret = read_secret_file(config.zookeeper_secret_file, SECRET_KEY)
        self.zk = await asyncio.to_thread(
            start_session, config.zookeeper, secret, config.zookeeper_session_timeout_s, log)
        self.coordinator = ShardCoordinator(
            self.zk, config.zookeeper_root, config.shard, config.address or address,
            shards_expected=config.shards_expected, on_map=self._seen_map,
            on_members=self._seen_members)
        await asyncio.to_thread(self.coordinator.start)
        log.info("shard %s registered in ZooKeeper at %s%s", self.shard,
                 config.address or address,
                 " (controller)" if self.coordinator.is_controller else "")

    async def stop(self) -> None:
        if self.coordinator is not None:
            self.coordinator.stop()
        if self.zk is not None:
            zk, self.zk = self.zk, None
            await asyncio.to_thread(_close, zk)

    # -- the map, from kazoo's threads ------------------------------------------------------

    def _seen_map(self, slot_map: SlotMap, version: int) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self.install, slot_map, version)

    def _seen_members(self, addresses: dict[str, str]) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self.addresses.update, addresses)

    def install(self, slot_map: SlotMap, version: int) -> None:
        """Take ``slot_map`` unless the one held is newer (watches and refreshes race)."""
        held = self.slot_map
        if held is not None and (held.epoch, self.version) >= (slot_map.epoch, version):
            return
        self.routing = Routing(self.partitioning, slot_map)
        self.version = version
        log.info("slot map epoch %d: shard %s owns %d slots", slot_map.epoch, self.shard,
                 slot_map.counts().get(self.shard, 0))

    async def refresh(self) -> None:
        """Read the map from ZooKeeper now (a client knows a newer epoch). ZooKeeper out of
        reach: the map held stays (bounded by the session timeout; logged)."""
        zk = self.zk
        if zk is None or not zk.connected:
            return
        try:
            async with asyncio.timeout(self.config.zookeeper_session_timeout_s):
                slot_map, version = await asyncio.to_thread(
                    read_map, zk, self.config.zookeeper_root)
        except Exception as exc:  # (kazoo's errors have no xdfs meaning here)
            log.warning("slot map not re-read from ZooKeeper: %s", exc or type(exc).__name__)
            return
        if slot_map is not None:
            self.install(slot_map, version)

    def check(self, method: str, ctx: CallContext, request: object) -> None:
        routing = self.routing
        if routing is None:
            require_map(None)
            return
        routing.check(self.shard, method, request)
        if (isinstance(request, DeleteRequest) and not request.skip_trash
                and self.trash_enabled and ctx.principal.user):
            check_trash(routing, self.shard, request.path, trash_root(ctx.principal.user))

    def check_http(self, request: web.Request, path: str) -> None:
        """A WebHDFS request (the gateway serves this shard's slots only, refusing others'
        with WrongShard; routing HTTP clients to the owner is not offered yet)."""
        method = "stat" if request.method in ("GET", "HEAD") else "webhdfs " + request.method
        self.check(method, _NO_CALL, _HttpPaths(path, request.query.get("destination", "")))

    def live(self) -> set[str]:
        zk = self.zk
        if zk is None or not zk.connected:
            return set(self.addresses)  # (ZooKeeper down: say what was last known)
        try:
            return live_shards(zk, self.config.zookeeper_root)
        except Exception:
            return set(self.addresses)


@dataclass(frozen=True)
class _HttpPaths:
    """The paths of a WebHDFS request, named as RPC requests name theirs."""

    path: str
    dst: str = ""  # a RENAME's destination


#: (a WebHDFS request has no RPC call: no trash check, which needs the caller)
_NO_CALL = CallContext(Principal("", anonymous=True), "", None)  # type: ignore[arg-type]


def check_namespace_shard(next_inode_id: int, shard: int) -> None:
    """A shard serves only a namespace formatted for it (``xdfs namenode -format --shard
    K``): its ids are in the shard's range, so no two shards hand out the same id."""
    formatted = shard_of_id(next_inode_id)
    if formatted != shard:
        raise ConfigError(
            f"sharding.shard is {shard} but this name dir holds shard {formatted}'s "
            f"namespace (formatted with --shard {formatted}): start it as shard {formatted}, "
            f"or format a new one with --shard {shard}")


def _close(zk: KazooClient) -> None:
    zk.stop()
    zk.close()


Check = Callable[[str, CallContext, object], None]


def guarded(impl: object, service: Service, check: Check) -> object:
    """``impl`` with every handler of ``service`` checking its request with ``check(method
    name, ctx, request)`` first: a refused call runs nothing. The wrappers keep each handler's
    kind (plain or async) and markers, so the server runs them as it ran the originals."""
    namespace: dict[str, Any] = {}
    for method in service:
        namespace[method.name] = _guard(impl, method.name, check)
    return type(f"Sharded{type(impl).__name__}", (), namespace)()


def _guard(impl: object, name: str, check: Check) -> Any:
    handler = getattr(impl, name)
    declared = getattr(type(impl), name)
    if inspect.iscoroutinefunction(handler):
        async def run_async(self: object, ctx: CallContext, req: Any) -> Any:
            check(name, ctx, req)
            return await handler(ctx, req)

        return same_markers(declared, run_async)

    def run(self: object, ctx: CallContext, req: Any) -> Any:
        check(name, ctx, req)
        return handler(ctx, req)

    return same_markers(declared, run)


class ShardingHandlers:
    """``get_slot_map``; ``shards`` None: this NameNode is not sharded."""

    def __init__(self, fs: Namesystem, shards: ShardState | None) -> None:
        self.fs = fs
        self.shards = shards

    async def get_slot_map(self, ctx: CallContext, req: sp.SlotMapRequest
                           ) -> sp.SlotMapResponse:
        # (no login needed: the map is not secret, and a client asks it before anything)
        shards = self.shards
        if shards is None:
            return sp.SlotMapResponse("", 0, [], [], inodes=self.fs.ns.inode_count())
        held = shards.slot_map
        if held is None or req.epoch > held.epoch:
            await shards.refresh()
        slot_map = require_map(shards.slot_map)
        live = shards.live()
        counts = slot_map.counts()
        infos = [sp.ShardInfo(shard, shards.addresses.get(shard, ""), shard in live,
                              counts.get(shard, 0))
                 for shard in sorted({*counts, *shards.addresses}, key=_number)]
        parts = shards.partitioning
        return sp.SlotMapResponse(
            shards.shard, slot_map.epoch, [(r.first, r.last, r.shard) for r in slot_map.ranges],
            infos, parts.depth,
            dict(parts.overrides), self.fs.ns.inode_count())


def _number(shard: str) -> tuple[int, str]:
    return (int(shard), "") if shard.isdigit() else (1 << 62, shard)
