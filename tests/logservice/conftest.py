"""Fixtures of the log service tests: a real ZooKeeper (one per module), storage nodes
(JournalNodes serving the ``ledger`` service, in-process over real sockets) and log
engines on them, each test under its own ZooKeeper root."""

from __future__ import annotations

import itertools
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Protocol

import pytest

from xdfs.common.secrets import new_secret_file
from xdfs.common.zookeeper import ZooKeeperEnsemble
from xdfs.config import XdfsConfig
from xdfs.journal.server import JournalNode
from xdfs.log.engine import LogEngine
from xdfs.log.nodes import NodePool
from xdfs.log.zkmeta import MetaStore, connect
from xdfs.protocol.journal import JOURNAL_USER
from xdfs.protocol.log import LSN_ZERO, LogSettings, Lsn, ReadRecord
from xdfs.rpc.messages import PROTOCOL_VERSION, Hello

WAIT_S = 60.0
_roots = itertools.count(1)
#: Small ledgers so that tests rotate.
SMALL = LogSettings(ledger_entries_max=50)
#: The ZooKeeper secret of the engines' sessions.
ZK_SECRET = secrets.token_hex(32)


class LogReader(Protocol):
    """What reads a log: a log engine, or a client of the log service."""

    async def read(self, name: str, from_lsn: Lsn, max_bytes: int, /
                   ) -> tuple[list[ReadRecord], Lsn]: ...


async def read_everything(reader: LogReader, name: str, start: Lsn = LSN_ZERO
                          ) -> list[tuple[Lsn, bytes]]:
    """Every record of log ``name`` from ``start`` to its end: (LSN, payload) in order."""
    out: list[tuple[Lsn, bytes]] = []
    position = start
    while True:
        records, position = await reader.read(name, position, 1 << 20)
        if not records:
            return out
        out += [(r.lsn, r.record.payload) for r in records]


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperEnsemble]:
    with ZooKeeperEnsemble(tmp_path_factory.mktemp("zk"), 1, tick_s=0.5) as zk:
        zk.start(WAIT_S)
        yield zk


def node_config(secret: Path) -> XdfsConfig:
    config = XdfsConfig()
    return replace(config, journalnode=replace(config.journalnode, secret_file=str(secret),
                                               sync_interval_s=3600))


class Storage:
    """Storage nodes that a test may stop and start again (same dir and port)."""

    def __init__(self, base: Path, count: int) -> None:
        self.base = base
        self.secret = base / "secret"
        new_secret_file(self.secret)
        self.nodes: list[JournalNode] = [
            JournalNode(node_config(self.secret), base / f"sn{i}") for i in range(count)]
        self.addresses: list[str] = []

    async def start(self) -> None:
        for node in self.nodes:
            self.addresses.append(await node.start())

    async def stop(self, index: int) -> None:
        await self.nodes[index].stop()

    async def restart(self, index: int) -> None:
        old = self.nodes[index]
        port = int(self.addresses[index].rsplit(":", 1)[1])
        self.nodes[index] = JournalNode(old.config, old.journal_dir)
        await self.nodes[index].start(port=port)

    def hello(self) -> Hello:
        return Hello(PROTOCOL_VERSION, user=JOURNAL_USER,
                     password=self.secret.read_text().strip())

    async def close(self) -> None:
        for node in self.nodes:
            await node.stop()


@pytest.fixture
async def storage(tmp_path: Path) -> AsyncIterator[Storage]:
    started = Storage(tmp_path, 4)
    await started.start()
    yield started
    await started.close()


EngineFactory = Callable[..., Awaitable[LogEngine]]


@pytest.fixture
async def engines(zookeeper: ZooKeeperEnsemble, storage: Storage
                  ) -> AsyncIterator[EngineFactory]:
    """``await engines(name)``: a log engine (as one log service instance runs it) on its
    own ZooKeeper session, all of this test under one root."""
    root = f"/test-log-{next(_roots)}"
    made: list[tuple[LogEngine, MetaStore]] = []

    async def make(address: str = "instance-1", *, nodes: list[str] | None = None,
                   add_timeout_s: float = 5.0) -> LogEngine:
        store = MetaStore(connect(zookeeper.hosts, 10.0, ZK_SECRET), root)
        pool = NodePool(XdfsConfig().rpc, storage.hello(), call_timeout_s=5.0)
        engine = LogEngine(store, pool, nodes or storage.addresses, address,
                           LogSettings(), add_timeout_s)
        made.append((engine, store))
        return engine

    yield make
    for engine, store in made:
        await engine.pool.close()
        store.zk.stop()
        store.zk.close()
