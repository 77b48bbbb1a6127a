"""A storage node's heartbeats to the log service's keeper, and the keeper's commands.

Every ``logservice.heartbeat_interval_s`` the node sends its ledgers (first and last entry
of each), the ledgers it is copying, and its disk's free space to the keeper. It finds the
keeper through ``logservice.instances``: any instance answers, one that is not the keeper
names it (NotKeeper) and the node follows; when the keeper stops answering the node tries
the next instance, which names the newly elected one. Commands run one at a time, in the
order received, on a task of their own (a long copy never delays a heartbeat):

* ``replicate``: copy the given entry ranges of a closed ledger from the nodes named,
  starting after what this node holds already (recovery adds, fsynced as any add);
* ``delete``: remove this node's copy of the ledger.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import shutil
import ssl

from xdfs.config import RpcConfig, XdfsConfig
from xdfs.errors import LogError, NotKeeper, XdfsError
from xdfs.ledger.handlers import LedgerWorker
from xdfs.log.nodes import NodePool
from xdfs.log.writer import copy_entries
from xdfs.protocol import log as lg
from xdfs.protocol.journal import JOURNAL_USER
from xdfs.rpc.client import RpcClient
from xdfs.rpc.messages import PROTOCOL_VERSION, Hello
from xdfs.rpc.tls import client_context

log = logging.getLogger(__name__)


class KeeperLink:
    def __init__(self, worker: LedgerWorker, address: str, instances: list[str],
                 rpc: RpcConfig, keeper_hello: Hello, pool: NodePool, interval_s: float,
                 ssl_context: ssl.SSLContext | None) -> None:
        self.worker = worker
        self.address = address
        self.instances = instances
        self.pool = pool
        self.interval_s = interval_s
        self._client_args = (rpc, keeper_hello, ssl_context)
        self._clients: dict[str, RpcClient] = {}
        self._next = itertools.cycle(instances)
        self.keeper = next(self._next)
        self.commands: asyncio.Queue[lg.KeeperCommand] = asyncio.Queue()
        self.copying: list[int] = []  # replicate commands queued or running, in order

    def _client(self, address: str) -> RpcClient:
        client = self._clients.get(address)
        if client is None:
            rpc, hello, context = self._client_args
            client = RpcClient(address, rpc, hello=hello, ssl_context=context)
            self._clients[address] = client
        return client

    async def run(self) -> None:
        worker = asyncio.ensure_future(self._work())
        try:
            while True:
                try:
                    await self.beat()
                except XdfsError as exc:
                    log.warning("heartbeat to the keeper at %s: %s", self.keeper, exc.message)
                    self.keeper = next(self._next)
                await asyncio.sleep(self.interval_s)
        finally:
            worker.cancel()

    async def beat(self) -> None:
        ledgers = await self.worker.submit(lambda store: store.held())
        disk = await asyncio.to_thread(shutil.disk_usage, self.worker.store.root)
        request = lg.HeartbeatRequest(self.address, ledgers, list(self.copying), disk.free,
                                      disk.total)
        try:
            answer = await self._client(self.keeper).call(lg.HEARTBEAT, request)
        except NotKeeper as exc:
            if exc.holder in ("?", self.keeper):
                return  # none elected yet (or our instance's previous run): next beat
            if exc.holder not in self.instances:
                # Named by the keeper znode only: the secret goes to configured instances.
                log.error("keeper at %s is not in logservice.instances: not followed",
                          exc.holder)
                return
            self.keeper = exc.holder
            answer = await self._client(self.keeper).call(lg.HEARTBEAT, request)
        for command in answer.commands:
            if command.kind == lg.REPLICATE:
                self.copying.append(command.ledger_id)
            self.commands.put_nowait(command)

    async def _work(self) -> None:
        while True:
            command = await self.commands.get()
            try:
                await self._run(command)
            except XdfsError as exc:
                log.warning("keeper command %s ledger %d failed: %s", command.kind,
                            command.ledger_id, exc.message)
            finally:
                if command.kind == lg.REPLICATE:
                    self.copying.remove(command.ledger_id)

    async def _run(self, command: lg.KeeperCommand) -> None:
        ledger_id = command.ledger_id
        if command.kind == lg.DELETE_LEDGER:
            await self.worker.submit(lambda store: store.delete(ledger_id))
            log.info("keeper: deleted ledger %d", ledger_id)
            return
        for part in command.ranges:
            held = await self.worker.submit(lambda store: store.state(ledger_id))
            first = max(part.first_entry, held.last_entry + 1) if held.exists \
                else part.first_entry
            if first > part.last_entry:
                continue
            await self._copy(ledger_id, part, first)
        log.info("keeper: ledger %d copied here", ledger_id)

    async def _copy(self, ledger_id: int, part: lg.CopyRange, first: int) -> None:
        failures = []
        for source in part.sources:
            try:
                await copy_entries(self.pool, ledger_id, source, self.address, first,
                                   part.last_entry)
                return
            except XdfsError as exc:
                failures.append(f"{source}: {exc.message}")
        raise LogError(f"entries {first}..{part.last_entry}: no source could be copied "
                        f"from ({'; '.join(failures)})")

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()
        await self.pool.close()


def start_keeper_link(config: XdfsConfig, worker: LedgerWorker, address: str, secret: str
                      ) -> KeeperLink | None:
    """The heartbeats of the storage node at ``address`` (None when
    ``logservice.instances`` names no instance). The node logs in to the keeper as the log
    service's user and to its peers as a JournalNode, with the one secret."""
    settings = config.logservice
    if not settings.instances:
        return None
    rpc = config.rpc
    context = client_context(rpc)
    # Copy sources come from the keeper (a configured instance, which checks them against
    # its storage nodes); checked here too when this node is told the storage nodes.
    pool = NodePool(rpc, Hello(PROTOCOL_VERSION, user=JOURNAL_USER, password=secret),
                    settings.call_timeout_s, context,
                    allowed=settings.storage_nodes or None)
    return KeeperLink(worker, address, list(settings.instances), rpc,
                      Hello(PROTOCOL_VERSION, user=lg.LOG_USER, password=secret), pool,
                      settings.heartbeat_interval_s, context)
