"""The balancer's driver: one at a time, iterations until balanced, throttled moves.

One balancer per cluster, as HDFS keeps it: the balancer creates ``/system/balancer.id``
and holds it open (its lease is renewed while it runs); a second one fails with
BalancerRunning; a balancer killed with SIGKILL stops renewing, and after the NameNode's
lease soft limit the next one overwrites the file. Every move is carried out by the
NameNode and the DataNodes (:mod:`xdfs.namenode.blocks.balancing`): the balancer holds no
state a kill could lose, so a rerun simply starts from the cluster's state then.

Each iteration reads the DataNodes' usage, plans pairs and blocks (:mod:`.plan`), runs the
moves (at most ``moves_in_flight_max`` at once, at most ``bandwidth`` bytes per second on
average), then waits ``iteration_wait_s`` for heartbeats to carry the new usage. It ends
when no node is further than the threshold from the mean (exit 0), or after
``idle_iterations_max`` iterations in a row that moved nothing (exit 3).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from xdfs.balancer import plan
from xdfs.client.client import AsyncClient
from xdfs.client.writer import FileWriter
from xdfs.config import BalancerConfig
from xdfs.errors import BalancerRunning, LeaseError, MoveRefused, XdfsError
from xdfs.protocol import namenode as p

log = logging.getLogger(__name__)

ID_PATH = "/system/balancer.id"
BALANCED, NO_PROGRESS = 0, 3


@dataclass
class Outcome:
    status: int
    iterations: int = 0
    moved_bytes: int = 0
    moved_blocks: int = 0


class Throttle:
    """Paces moves at ``rate`` bytes per second: a move of n bytes starts once the moves
    before it had their n / rate seconds (no credit is saved up while idle)."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.clock = clock
        self.next_s = clock()

    def delay_for(self, num_bytes: int) -> float:
        now = self.clock()
        start = max(now, self.next_s)
        self.next_s = start + num_bytes / self.rate
        return start - now


class Balancer:
    def __init__(
        self, client: AsyncClient, config: BalancerConfig, say: Callable[[str], None]
    ) -> None:
        self.client = client
        self.config = config
        self.say = say
        self.throttle = Throttle(config.bandwidth_bytes_per_s)
        self.outcome = Outcome(NO_PROGRESS)

    async def run(self) -> Outcome:
        writer = await self._take_lock()
        renewer = asyncio.ensure_future(self._renew_lock())
        try:
            self.outcome.status = await self._iterations()
        finally:
            renewer.cancel()
            await asyncio.gather(renewer, return_exceptions=True)
            await writer.abort()
            await self.client.delete(ID_PATH, skip_trash=True)
        return self.outcome

    async def _renew_lock(self) -> None:
        """Renew the lock's lease more often than writers do (a short soft limit then
        lets a rerun take over soon after a kill)."""
        request = p.RenewLeaseRequest(self.client.client_name)
        while True:
            await asyncio.sleep(self.config.lock_renew_interval_s)
            try:
                await self.client.rpc.call(p.RENEW_LEASE, request)
            except XdfsError as exc:
                log.warning("renewing the lease on %s failed: %s", ID_PATH, exc.message)

    async def _take_lock(self) -> FileWriter:
        try:
            return await self.client.open_write(ID_PATH, overwrite=True, replication=1)
        except LeaseError as exc:
            raise BalancerRunning(
                f"another balancer is running ({ID_PATH} is held: {exc.message})"
            ) from None

    async def _iterations(self) -> int:
        idle = 0
        while True:
            nodes = await self._nodes()
            off = plan.out_of_balance(nodes, self.config.threshold_percent)
            mean = plan.mean_utilization(nodes)
            if not off:
                self.say(f"The cluster is balanced (mean utilization {mean:.2f}%, "
                         f"threshold {self.config.threshold_percent}%). Exiting...")
                return BALANCED
            self.outcome.iterations += 1
            moved = await self._iteration(nodes)
            self.say(f"Iteration {self.outcome.iterations}: {len(off)} node(s) off the mean "
                     f"{mean:.2f}%, moved {moved} byte(s)")
            idle = 0 if moved else idle + 1
            if idle >= self.config.idle_iterations_max:
                self.say("No block can be moved (too few nodes, racks or room). Exiting...")
                return NO_PROGRESS
            await asyncio.sleep(self.config.iteration_wait_s)

    async def _nodes(self) -> list[plan.NodeUse]:
        report = await self.client.datanode_report()
        return [
            plan.NodeUse(n.node_id, n.address, n.rack, n.capacity_bytes, n.used_bytes)
            for n in report.nodes
            if n.state == "live" and n.admin_state == "normal" and n.capacity_bytes > 0
        ]

    async def _iteration(self, nodes: list[plan.NodeUse]) -> int:
        racks = {n.node_id: n.rack for n in nodes}
        planned: set[int] = set()
        moves: list[plan.Move] = []
        for pair in plan.pairs(nodes, self.config.threshold_percent,
                               self.config.iteration_bytes_max):
            blocks = await self.client.balancer_blocks(pair.source, 2 * pair.bytes)
            moves.extend(plan.choose_moves(pair, blocks, racks, planned))
        slots = asyncio.Semaphore(self.config.moves_in_flight_max)
        per_node = {
            node_id: asyncio.Semaphore(self.config.moves_per_node_max)
            for move in moves for node_id in (move.source, move.target)
        }
        done = await asyncio.gather(*(
            self._move(move, slots, per_node[move.source], per_node[move.target])
            for move in moves
        ))
        return sum(done)

    async def _move(self, move: plan.Move, *slots: asyncio.Semaphore) -> int:
        """One move, holding a slot of the balancer and one on each of its two nodes (the
        NameNode refuses a node at its stream limit: better to wait here)."""
        async with contextlib.AsyncExitStack() as held:
            for slot in slots:
                await held.enter_async_context(slot)
            await asyncio.sleep(self.throttle.delay_for(move.num_bytes))
            log.info("move of block %d from %s to %s (%d bytes)", move.block_id, move.source,
                     move.target, move.num_bytes)
            try:
                answer = await self.client.move_replica(move.block_id, move.source, move.target)
            except MoveRefused as exc:
                log.info("move of block %d refused: %s", move.block_id, exc.message)
                return 0
            except XdfsError as exc:
                log.warning("move of block %d failed: %s", move.block_id, exc.message)
                return 0
        if not answer.moved:
            log.info("move of block %d did not complete: %s", move.block_id, answer.detail)
            return 0
        self.outcome.moved_blocks += 1
        self.outcome.moved_bytes += move.num_bytes
        return move.num_bytes

