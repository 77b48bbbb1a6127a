"""Issue 13's guarantees on real processes, through two log service instances: reads are
linearizable whichever instance a client asks (also right after the writer's instance is
killed), the TSO stays strictly increasing across kill -9 of the instances and of
ZooKeeper, and malformed messages get typed errors and change nothing."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from tests.logservice.cluster import LogCluster, through
from xdfs.common.process import ProcessGroup
from xdfs.errors import BadRequest
from xdfs.protocol import log as lg
from xdfs.protocol.log import Lsn
from xdfs.rpc.client import RpcClient
from xdfs.rpc.service import Method


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LogCluster]:
    with ProcessGroup(tmp_path) as group:
        yield LogCluster(tmp_path, group, storage_count=3, service_count=2).start()


async def test_a_read_through_either_instance_sees_every_acknowledged_append(
        cluster: LogCluster) -> None:
    clients = [through(cluster, 0), through(cluster, 1)]
    try:
        await clients[1].create("lin")
        acked: list[tuple[Lsn, bytes]] = []
        for i in range(20):
            payload = f"r{i}".encode()
            lsn = await clients[i % 2].append("lin", payload)
            acked.append((lsn, payload))
            records, _ = await clients[(i + 1) % 2].read("lin", lsn)
            assert [(r.lsn, r.record.payload) for r in records] == [(lsn, payload)]
        # the writer's instance dies: the other takes the log over, recovering the open
        # ledger; nothing acknowledged is missing from its first read
        writer = (await clients[0].stat("lin")).writer
        survivor = 1 - cluster.service_addresses.index(writer)
        cluster.services[1 - survivor].kill()
        records, _ = await clients[survivor].read("lin", acked[0][0])
        assert [(r.lsn, r.record.payload) for r in records] == acked
        lsn = await clients[survivor].append("lin", b"after")
        assert lsn > acked[-1][0]
    finally:
        for client in clients:
            await client.close()


async def test_tso_ranges_strictly_increase_across_kill_9_of_instances_and_zookeeper(
        cluster: LogCluster) -> None:
    ranges: list[tuple[int, int]] = []

    async def take(count: int) -> None:
        async with cluster.client() as client:
            ranges.append((await client.tso(count), count))

    await take(10)
    for index in range(cluster.service_count):
        cluster.services[index].kill()
        cluster.start_service(index)
        await take(3)
    cluster.zookeeper.kill()
    cluster.start_zookeeper()
    await take(1)
    await take(7)
    for (first, count), (after, _) in itertools.pairwise(ranges):
        assert after >= first + count, ranges


class BadAppend(msgspec.Struct):
    name: str
    records: list[int]


async def test_malformed_messages_get_typed_errors_and_change_nothing(
        cluster: LogCluster) -> None:
    async with cluster.client() as client:
        await client.create("m")
        lsn = await client.append("m", b"ok")
        wrong = Method(lg.APPEND.name, BadAppend, lg.AppendResponse, idempotent=False)
        raw = RpcClient(cluster.service_addresses, client.config.rpc, hello=client.hello)
        try:
            with pytest.raises(BadRequest):
                await raw.call(wrong, BadAppend("m", [1, 2]))
        finally:
            await raw.close()
        records, following = await client.read("m", lsn)
        assert [r.record.payload for r in records] == [b"ok"]
        assert (await client.stat("m")).end_lsn == following
