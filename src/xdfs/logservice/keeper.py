"""The keeper (seed 004's HAKeeper): the one log service instance elected through an
ephemeral znode (``<root>/keeper``, holding its address) hears the storage nodes'
heartbeats and answers with commands (:mod:`xdfs.logservice.rules` decides them).

Storage nodes send a heartbeat every ``logservice.heartbeat_interval_s`` to any instance
of ``logservice.instances``; one that is not the keeper answers
:class:`~xdfs.errors.NotKeeper` naming it, and the node goes there. Every
``logservice.keeper_interval_s`` the keeper reads every log's metadata and plans:
re-replication of closed ledgers that lost a copy, deletion of copies nothing needs,
metadata CASes for finished copies. A keeper that dies leaves the znode with its
session; another instance is elected and starts from what the next heartbeats say.
"""

from __future__ import annotations

import asyncio
import logging
import time

from kazoo.exceptions import NodeExistsError, NoNodeError

from xdfs.common.faults import FAULTS, fault_point
from xdfs.errors import InvalidArgument, LogNotFound, NotKeeper, XdfsError
from xdfs.log import meta as m
from xdfs.log.engine import LogEngine
from xdfs.logservice.rules import Forget, KeeperState, MetaRepair
from xdfs.protocol import log as lg
from xdfs.rpc.handling import CallContext

log = logging.getLogger(__name__)

FAULTS.register("logservice.keeper_repaired",
                "the keeper named a spare in a ledger's metadata; other repairs may be pending")


class Keeper:
    def __init__(self, engine: LogEngine, interval_s: float, dead_after_s: float,
                 copy_timeout_s: float) -> None:
        self.engine = engine
        self.interval_s = interval_s
        self.dead_after_s = dead_after_s
        self.copy_timeout_s = copy_timeout_s
        self.state: KeeperState | None = None  # while elected
        self.holder = ""  # the keeper's address, as last read
        self.repairs = 0
        self._noted: set[str] = set()  # notes of the rules logged already

    @property
    def path(self) -> str:
        return f"{self.engine.store.root}/keeper"

    def _elect(self) -> str:
        """Take the keeper znode if free; the keeper's address ("" if none)."""
        zk = self.engine.store.zk
        try:
            zk.create(self.path, self.engine.address.encode(), ephemeral=True)
            return self.engine.address
        except NodeExistsError:
            try:
                data, stat = zk.get(self.path)
            except NoNodeError:
                return ""
            if stat.ephemeralOwner == zk.client_id[0]:
                return self.engine.address
            # our own address under an older session: our previous run, not us
            return "" if data.decode() == self.engine.address else str(data.decode())

    async def run(self) -> None:
        while True:
            try:
                await self.tick()
            except XdfsError as exc:
                # ZooKeeper out of reach: another instance may be elected meanwhile, so
                # stop answering heartbeats until this one knows it is still the keeper.
                log.warning("keeper: %s", exc.message)
                self.state = None
            await asyncio.sleep(self.interval_s)

    async def tick(self) -> None:
        self.holder = await self.engine._thread(self._elect)
        elected = self.holder == self.engine.address
        if elected != (self.state is not None):
            log.info("keeper: %s", "elected" if elected else "no longer the keeper")
            self.state = KeeperState(self.dead_after_s, self.copy_timeout_s,
                                     time.monotonic(),
                                     frozenset(self.engine.storage_nodes)) if elected else None
        if self.state is not None:
            await self.plan(self.state)

    async def plan(self, state: KeeperState) -> None:
        read_at = time.monotonic()
        metas = await self._metas()
        for change in state.plan(metas, time.monotonic(), read_at):
            if isinstance(change, Forget):
                await self._forget(change)
            else:
                await self._apply(change)
        for note in state.notes:
            if note not in self._noted:
                log.warning("keeper: %s", note)
        self._noted = set(state.notes)

    async def _forget(self, change: Forget) -> None:
        try:
            await self.engine.meta.update(change.log, lambda x: m.forget_released(
                x, change.ledger_id, change.nodes))
        except LogNotFound:
            return

    async def _apply(self, change: MetaRepair) -> None:
        repair = change.repair
        try:
            await self.engine.meta.update(change.log, lambda x: m.apply_repair(x, repair))
        except (InvalidArgument, LogNotFound) as exc:  # reclaimed or deleted meanwhile
            log.info("keeper: repair of ledger %d dropped: %s", repair.ledger_id, exc.message)
            return
        self.repairs += 1
        fault_point("logservice.keeper_repaired")
        log.info("keeper: ledger %d of %s re-replicated to %s (in place of %s)",
                 repair.ledger_id, change.log, repair.spare,
                 repair.lost or "none: it had fewer than E copies")

    async def _metas(self) -> list[m.LogMeta]:
        """Every log's metadata; any failure but a log deleted meanwhile fails the whole
        read (a log missing from the plan would have its ledgers deleted)."""
        metas = []
        for name in await self.engine.names():
            try:
                metas.append(await self.engine.meta.get(name))
            except LogNotFound:
                continue
        return metas

    def heartbeat(self, beat: lg.HeartbeatRequest) -> lg.HeartbeatResponse:
        if beat.node not in self.engine.storage_nodes:
            # A node under another name than the metadata's (say localhost vs 127.0.0.1)
            # would look like a stranger holding ledgers nobody gave it: refused loudly
            # rather than have its copies deleted.
            raise InvalidArgument(f"storage node {beat.node} is not in logservice."
                                  "storage_nodes of the keeper: add it there, under the "
                                  "address it serves on")
        if self.state is None:
            raise NotKeeper(f"keeper at {self.holder or '?'}: {self.engine.address} is not "
                            "the keeper")
        commands = self.state.heard(beat, time.monotonic())
        for command in commands:
            log.info("keeper: %s ledger %d on %s", command.kind, command.ledger_id, beat.node)
        return lg.HeartbeatResponse(self.engine.address, commands)


class KeeperHandlers:
    def __init__(self, keeper: Keeper) -> None:
        self.keeper = keeper

    async def heartbeat(self, ctx: CallContext, req: lg.HeartbeatRequest
                        ) -> lg.HeartbeatResponse:
        return self.keeper.heartbeat(req)
