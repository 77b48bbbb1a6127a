"""The keeper (seed 004's HAKeeper): one log service instance, elected through an ephemeral
znode (``<root>/keeper``), watches the storage nodes and restores lost copies.

Every ``logservice.keeper_interval_s`` it asks each storage node for its ledger list (the
node's heartbeat, pulled: the storage nodes are JournalNodes and need no keeper address);
a node that missed ``logservice.keeper_misses_dead`` in a row is dead. For each log, the
first closed ledger that lost a copy on a dead node, or never had E copies (a ledger
written while a node was down), is copied from a live holder to a spare live node and
the metadata updated by CAS (:func:`xdfs.log.meta.plan_repair`). Open ledgers are left to
their writer (its ensemble change). A keeper that dies leaves the znode with its session;
another instance is elected and starts from scratch (its first misses count anew).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from kazoo.exceptions import NodeExistsError

from xdfs.errors import XdfsError
from xdfs.log import meta as m
from xdfs.log.engine import LogEngine
from xdfs.log.writer import copy_entries
from xdfs.protocol import ledger as lp
from xdfs.rpc.messages import Empty

log = logging.getLogger(__name__)


@dataclass
class Liveness:
    """Missed heartbeats per storage node (pure)."""

    misses_dead: int
    misses: dict[str, int] = field(default_factory=dict)

    def heard(self, node: str, ok: bool) -> None:
        self.misses[node] = 0 if ok else self.misses.get(node, 0) + 1

    def live(self, nodes: list[str]) -> list[str]:
        return [n for n in nodes if self.misses.get(n, 0) < self.misses_dead]


class Keeper:
    def __init__(self, engine: LogEngine, interval_s: float, misses_dead: int) -> None:
        self.engine = engine
        self.interval_s = interval_s
        self.liveness = Liveness(misses_dead)
        self.elected = False
        self.repairs = 0

    @property
    def path(self) -> str:
        return f"{self.engine.store.root}/keeper"

    def _try_elect(self) -> bool:
        zk = self.engine.store.zk
        try:
            zk.create(self.path, self.engine.address.encode(), ephemeral=True)
            return True
        except NodeExistsError:
            _, stat = zk.get(self.path)
            return bool(stat.ephemeralOwner == zk.client_id[0])

    async def run(self) -> None:
        while True:
            try:
                await self.tick()
            except XdfsError as exc:
                log.warning("keeper: %s", exc.message)
            await asyncio.sleep(self.interval_s)

    async def tick(self) -> None:
        elected = await self.engine._thread(self._try_elect)
        if elected != self.elected:
            log.info("keeper: %s", "elected" if elected else "no longer the keeper")
            self.elected = elected
            self.liveness.misses.clear()
        if not elected:
            return
        nodes = self.engine.storage_nodes
        answers = await asyncio.gather(*(self._heartbeat(n) for n in nodes))
        for node, ok in zip(nodes, answers, strict=True):
            self.liveness.heard(node, ok)
        alive = self.liveness.live(nodes)
        answering = [n for n, ok in zip(nodes, answers, strict=True) if ok]
        for name in await self.engine.names():
            await self._repair(name, alive, answering)

    async def _heartbeat(self, node: str) -> bool:
        try:
            await self.engine.pool.node(node).call(lp.LIST_LEDGERS, Empty())
        except XdfsError:
            return False
        return True

    async def _repair(self, name: str, alive: list[str], live: list[str]) -> None:
        """``alive``: not declared dead (one missed heartbeat is no loss); ``live``: the
        nodes that answered now (sources and spares)."""
        meta = await self.engine.meta.get(name)
        repair = m.plan_repair(meta, alive, live)
        if repair is None:
            return
        info = m.ledger(meta, repair.ledger_id)
        for index in repair.fragments:
            fragment = info.fragments[index]
            sources = [n for n in fragment.nodes if n in live and n != repair.lost]
            if not sources:
                log.error("keeper: ledger %d of %s has no live copy of entries from %d",
                          info.ledger_id, name, fragment.first_entry)
                return
            await copy_entries(self.engine.pool, info.ledger_id, sources[0], repair.spare,
                               fragment.first_entry, m.fragment_end(info, index))
        await self.engine.meta.update(name, lambda x: m.apply_repair(x, repair))
        self.repairs += 1
        log.info("keeper: ledger %d of %s re-replicated to %s (lost: %s)", info.ledger_id,
                 name, repair.spare, repair.lost or "none, it had fewer than E copies")
