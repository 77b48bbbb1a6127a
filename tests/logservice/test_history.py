"""The seeded history checker on real processes (issue 13): concurrent appenders and a
reader while a nemesis kills storage nodes (kill -9), kills the writer's log service
instance, opens a second writer behind the service's back, and restarts ZooKeeper.

Invariants: every acknowledged record is readable with its bytes at its LSN; the LSNs an
appender is given strictly increase; a fenced writer's later appends never become visible;
reads never go backwards (a reader's positions only grow, and what it saw at an LSN never
changes); a read that starts after an acknowledgement sees the acknowledged record.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.logservice.cluster import LogCluster
from xdfs.common.process import ProcessGroup
from xdfs.config import XdfsConfig
from xdfs.errors import LogFenced, XdfsError
from xdfs.log.client import AsyncLogClient
from xdfs.log.nodes import NodePool
from xdfs.log.writer import AsyncMeta, LogWriter
from xdfs.log.zkmeta import MetaStore, connect
from xdfs.protocol.journal import JOURNAL_USER
from xdfs.protocol.log import LSN_ZERO, LogSettings, Lsn, Record
from xdfs.rpc.messages import PROTOCOL_VERSION, Hello

ROUNDS = int(os.environ.get("XDFS_LOG_HISTORY_ROUNDS", "20"))
SEED = int(os.environ.get("XDFS_LOG_HISTORY_SEED", "13"))
APPENDERS = 3
APPENDS_PER_ROUND = 6
LOG = "history"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LogCluster]:
    with ProcessGroup(tmp_path) as group:
        yield LogCluster(tmp_path, group,
                         extra=["-D", "logservice.ledger_entries_max=25"]).start()


@dataclass
class History:
    acked: dict[bytes, Lsn] = field(default_factory=dict)
    ghosts: set[bytes] = field(default_factory=set)  # a fenced writer's later appends
    seen: dict[Lsn, bytes] = field(default_factory=dict)
    failures: int = 0

    def record_read(self, records: list[tuple[Lsn, bytes]], after: Lsn) -> None:
        previous = after
        for lsn, payload in records:
            assert lsn >= previous, f"read went backwards: {lsn} after {previous}"
            previous = lsn
            assert self.seen.setdefault(lsn, payload) == payload, f"{lsn} changed"


async def appender(client: AsyncLogClient, history: History, round_no: int, who: int) -> None:
    last: Lsn | None = None
    for i in range(APPENDS_PER_ROUND):
        payload = f"r{round_no}-a{who}-{i}".encode()
        try:
            lsn = await client.append(LOG, Record(payload, key=str(who).encode()))
        except XdfsError:
            history.failures += 1  # indeterminate: may or may not be in the log
            continue
        assert last is None or lsn > last, f"LSNs of appender {who} went back: {last} {lsn}"
        last = lsn
        history.acked[payload] = lsn


async def read_to_end(client: AsyncLogClient, history: History, start: Lsn
                      ) -> tuple[list[tuple[Lsn, bytes]], Lsn]:
    out: list[tuple[Lsn, bytes]] = []
    position = start
    while True:
        records, following = await client.read(LOG, position, 64 * 1024)
        got = [(r.lsn, r.record.payload) for r in records]
        history.record_read(got, position)
        assert following >= position, f"next LSN went back: {following} < {position}"
        if not records:
            return out, position
        out += got
        position = following


class Nemesis:
    def __init__(self, cluster: LogCluster, rng: random.Random) -> None:
        self.cluster = cluster
        self.rng = rng
        self.down_storage: int | None = None

    async def heal(self) -> None:
        if self.down_storage is not None:
            await asyncio.to_thread(self.cluster.start_storage, self.down_storage)
            self.down_storage = None

    async def strike(self, history: History, client: AsyncLogClient) -> str:
        action = self.rng.choice(["kill_storage", "kill_writer", "second_writer",
                                  "restart_zookeeper", "restart_keeper"])
        if action == "kill_storage":
            index = self.rng.randrange(self.cluster.storage_count)
            self.cluster.storage[index].kill()
            self.down_storage = index
        elif action == "kill_writer":
            stat = await client.stat(LOG)
            if stat.writer in self.cluster.service_addresses:
                index = self.cluster.service_addresses.index(stat.writer)
                self.cluster.services[index].kill()
                await asyncio.to_thread(self.cluster.start_service, index)
        elif action == "restart_keeper":
            keeper = await asyncio.to_thread(self.keeper_address)
            if keeper in self.cluster.service_addresses:
                index = self.cluster.service_addresses.index(keeper)
                self.cluster.services[index].kill()
                await asyncio.to_thread(self.cluster.start_service, index)
        elif action == "second_writer":
            await self.second_writer(history)
        else:
            self.cluster.zookeeper.kill()
            await asyncio.to_thread(self.cluster.start_zookeeper)
        return action

    def keeper_address(self) -> str:
        zk = connect(self.cluster.zookeeper.address, 10.0,
                     self.cluster.zookeeper_secret)
        try:
            return str(zk.get("/xdfs-log/keeper")[0].decode()) if zk.exists(
                "/xdfs-log/keeper") else ""
        finally:
            zk.stop()
            zk.close()

    async def second_writer(self, history: History) -> None:
        """A writer opened behind the service's back fences the service's writer; once the
        service takes the log back, this writer's appends must fail and never show."""
        zk = await asyncio.to_thread(connect, self.cluster.zookeeper.address, 10.0,
                                     self.cluster.zookeeper_secret)
        secret = self.cluster.secret.read_text().strip()
        pool = NodePool(XdfsConfig().rpc, Hello(PROTOCOL_VERSION, user=JOURNAL_USER,
                                                password=secret), 3.0)
        try:
            store = AsyncMeta(await asyncio.to_thread(MetaStore, zk, "/xdfs-log"))
            rogue = LogWriter(store, pool, self.cluster.storage_addresses, LOG, "rogue", 3.0)
            self.rogue = rogue
            payload = f"rogue-{len(history.acked)}".encode()
            try:
                await rogue.open()
                # acknowledged while it is the writer: must stay readable at its LSN
                history.acked[payload] = await rogue.append(Record(payload))
            except LogFenced:
                # the service's writer, meeting its fenced ledger, re-opened the log while
                # the rogue was still taking it over: the rogue is fenced already
                history.failures += 1
        finally:
            self.rogue_cleanup = (zk, pool)

    async def rogue_after_takeover(self, history: History, client: AsyncLogClient) -> None:
        """Once the service appended again (taking the log back), the rogue is fenced: its
        appends fail and never show."""
        rogue = getattr(self, "rogue", None)
        if rogue is None:
            return
        for attempt in range(10):  # the service's first try meets its own fenced ledger
            payload = f"takeover-{id(rogue)}-{attempt}".encode()
            try:
                history.acked[payload] = await client.append(LOG, Record(payload))
                break
            except XdfsError:  # LogFenced, or a nemesis still settling: indeterminate
                history.failures += 1
        else:
            raise AssertionError("the service did not take the log back")
        for n in range(3):
            ghost = f"ghost-{id(rogue)}-{n}".encode()
            history.ghosts.add(ghost)
            with pytest.raises(LogFenced):
                await rogue.append(Record(ghost))
        zk, pool = self.rogue_cleanup
        await pool.close()
        await asyncio.to_thread(zk.stop)
        del self.rogue


async def test_history_under_a_nemesis(cluster: LogCluster) -> None:
    rng = random.Random(SEED)
    history = History()
    nemesis = Nemesis(cluster, rng)
    client = cluster.client()
    reader_position = LSN_ZERO
    try:
        await client.create(LOG, LogSettings(ledger_entries_max=25))
        actions = []
        for round_no in range(ROUNDS):
            await nemesis.heal()
            appenders = [asyncio.ensure_future(appender(client, history, round_no, who))
                         for who in range(APPENDERS)]
            await asyncio.sleep(rng.uniform(0.0, 0.3))
            actions.append(await nemesis.strike(history, client))
            await asyncio.gather(*appenders)
            # a read that starts after the acknowledgements sees every one of them
            _, reader_position = await read_to_end(client, history, reader_position)
            missing = [p for p, lsn in history.acked.items() if lsn not in history.seen]
            assert not missing, f"round {round_no}: acknowledged but not read: {missing[:5]}"
            await nemesis.rogue_after_takeover(history, client)
        await nemesis.heal()
        everything, _ = await read_to_end(client, history, LSN_ZERO)
    finally:
        await client.close()
    by_payload = {payload: lsn for lsn, payload in everything}
    for payload, lsn in history.acked.items():
        assert by_payload.get(payload) == lsn, f"{payload!r} acknowledged at {lsn}"
    assert not history.ghosts & set(by_payload), "a fenced writer's append became visible"
    lsns = [lsn for lsn, _ in everything]
    assert lsns == sorted(lsns) and len(set(lsns)) == len(lsns)
    assert len(history.acked) > ROUNDS * APPENDERS  # most appends went through
    assert set(actions) >= {"kill_storage", "kill_writer", "second_writer",
                            "restart_keeper"}, actions
