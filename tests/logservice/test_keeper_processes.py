"""The keeper on real processes: the storage nodes send heartbeats to the elected log
service instance, which answers with commands. A storage node holding closed ledgers is
killed (kill -9); the keeper has each of them copied to a spare node and the metadata
names the spare; the keeper itself is killed (kill -9) half-way and the other instance,
elected in its place, finishes. The dead node, back with its old copies, is told to
delete them; so is a node that was down while truncation reclaimed ledgers."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.logservice.cluster import LogCluster
from xdfs.common.process import ProcessGroup
from xdfs.config import XdfsConfig
from xdfs.log import meta as m
from xdfs.log.nodes import NodePool
from xdfs.log.zkmeta import MetaStore, connect
from xdfs.protocol import ledger as lp
from xdfs.protocol.journal import JOURNAL_USER
from xdfs.protocol.log import LogSettings
from xdfs.rpc.messages import PROTOCOL_VERSION, Empty, Hello
from xdfs.testing.poll import eventually

RECORDS = 60
KEEPER_DIES = "logservice.keeper_repaired=kill"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LogCluster]:
    with ProcessGroup(tmp_path) as group:
        cluster = LogCluster(tmp_path, group, storage_count=4, service_count=2)
        cluster.start_zookeeper()
        for index in range(cluster.storage_count):
            cluster.start_storage(index)
        for index in range(cluster.service_count):  # a keeper dies after its first repair
            cluster.start_service(index, faults=KEEPER_DIES)
        yield cluster


class Look:
    """The test's own view: the log's metadata (ZooKeeper) and the nodes' copies."""

    def __init__(self, cluster: LogCluster) -> None:
        self.cluster = cluster
        self.zk = connect(cluster.zookeeper.address, 10.0, cluster.zookeeper_secret)
        self.store = MetaStore(self.zk, "/xdfs-log")
        secret = cluster.secret.read_text().strip()
        self.pool = NodePool(XdfsConfig().rpc,
                             Hello(PROTOCOL_VERSION, user=JOURNAL_USER, password=secret), 3.0)

    async def closed(self, name: str) -> list[m.LedgerInfo]:
        meta, _ = await asyncio.to_thread(self.store.get, name)
        return [x for x in meta.ledgers if x.state == m.CLOSED]

    def keeper(self) -> str:
        return str(self.zk.get("/xdfs-log/keeper")[0].decode())

    async def holds(self, node: str, info: m.LedgerInfo) -> bool:
        state = await self.pool.node(node).call(lp.LEDGER_STATE,
                                                lp.LedgerIdRequest(info.ledger_id))
        return state.exists and state.first_entry == 0 and state.last_entry >= info.last_entry

    async def close(self) -> None:
        await self.pool.close()
        self.zk.stop()
        self.zk.close()


async def test_the_keeper_restores_e_copies_after_a_node_dies_even_when_it_dies_itself(
        cluster: LogCluster) -> None:
    look = Look(cluster)
    try:
        async with cluster.client() as client:
            await client.create("k", LogSettings(ledger_entries_max=5))
            lsns = [await client.append("k", f"r{i}") for i in range(RECORDS)]
        closed = await look.closed("k")
        counts = {n: sum(n in x.all_nodes() for x in closed) for n in cluster.storage_addresses}
        victim = max(counts, key=lambda n: counts[n])
        index = cluster.storage_addresses.index(victim)
        cluster.storage[index].kill()

        def keeper_died() -> list[int]:
            return [i for i, p in cluster.services.items() if not p.alive()]

        dead = await eventually(keeper_died, timeout_s=120.0, what="the keeper killed")
        assert any(victim in x.all_nodes() for x in await look.closed("k")), "not mid-way"

        async def whole() -> bool:
            for i, proc in cluster.services.items():  # the killed keeper(s) come back
                if not proc.alive():
                    await asyncio.to_thread(cluster.start_service, i)
            ledgers = await look.closed("k")
            if any(victim in x.all_nodes() or len(x.all_nodes()) != 3 for x in ledgers):
                return False
            checks = [look.holds(n, x) for x in ledgers for n in x.all_nodes()]
            return all(await asyncio.gather(*checks))

        await eventually(whole, timeout_s=180.0, what="every closed ledger on 3 live nodes")
        assert dead  # at least one keeper was killed half-way
        # the copies are real: with one more original node down, everything reads
        other = next(n for n in cluster.storage_addresses if n != victim)
        cluster.storage[cluster.storage_addresses.index(other)].kill()
        async with cluster.client() as client:
            records, _ = await client.read("k", lsns[0], 1 << 20)
            assert [r.record.payload for r in records] == [
                f"r{i}".encode() for i in range(RECORDS)]
        # the victim comes back with its old copies: nothing names it there, they go
        cluster.start_storage(index)
        ids = {x.ledger_id for x in closed if victim in x.all_nodes()}

        async def old_copies_deleted() -> bool:
            held = await look.pool.node(victim).call(lp.LIST_LEDGERS, Empty())
            return not ids & set(held.ledgers)

        await eventually(old_copies_deleted, timeout_s=120.0, what="the old copies deleted")
    finally:
        await look.close()


def ledger_ids_on(cluster: LogCluster, index: int) -> set[int]:
    return {int(p.stem) for p in (cluster.base / f"sn{index}" / "ledger.d").glob("*.ledger")}


async def test_ledgers_reclaimed_while_a_node_was_down_are_deleted_once_it_is_back(
        tmp_path: Path) -> None:
    with ProcessGroup(tmp_path) as group:
        cluster = LogCluster(tmp_path, group, storage_count=3, service_count=1,
                             extra=["-D", "logservice.reclaim_interval_s=0.3"]).start()
        async with cluster.client() as client:
            await client.create("r", LogSettings(ledger_entries_max=5))
            lsns = [await client.append("r", f"r{i}") for i in range(30)]
            doomed = set((await client.stat("r")).ledger_ids[:4])  # entries 0-19
            assert doomed <= ledger_ids_on(cluster, 2)
            cluster.storage[2].kill()
            await client.truncate("r", lsns[20])

            async def forgotten() -> bool:  # the node that is down does not hold it up
                return not doomed & set((await client.stat("r")).ledger_ids)

            await eventually(forgotten, timeout_s=60.0, what="the metadata forgets them")
            assert doomed <= ledger_ids_on(cluster, 2)
            cluster.start_storage(2)
            await eventually(lambda: not doomed & ledger_ids_on(cluster, 2), timeout_s=60.0,
                             what="the keeper has the node delete them")
            records, _ = await client.read("r", lsns[20])
            assert [r.record.payload for r in records] == [
                f"r{i}".encode() for i in range(20, 30)]
