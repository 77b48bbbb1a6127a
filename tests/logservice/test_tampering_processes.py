"""A log's metadata rewritten in ZooKeeper by someone else, on real processes (issue 37):
a ledger's ensemble made to name an address that is not a configured storage node -- a
listener that records whatever reaches it. The instance never dials it (no secret goes
there) and says so in its log; reads and a new writer's recovery go on with the
configured nodes; and the keeper deletes no copy the log's own history does not release,
though the ensemble no longer names the node holding it."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from tests.logservice.cluster import WAIT_S, LogCluster
from tests.logservice.conftest import read_everything
from xdfs.common.process import ProcessGroup
from xdfs.log import meta as m
from xdfs.log.zkmeta import MetaStore, connect
from xdfs.protocol.log import LogSettings
from xdfs.testing.net import free_port
from xdfs.testing.poll import eventually


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LogCluster]:
    with ProcessGroup(tmp_path) as group:
        yield LogCluster(tmp_path, group, storage_count=3, service_count=1).start()


class Listener:
    """A TCP server that records every connection and byte it gets (and answers none)."""

    def __init__(self) -> None:
        self.connections = 0
        self.received = bytearray()
        self.address = ""
        self._server: asyncio.Server | None = None

    async def start(self) -> str:
        port = free_port()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", port)
        self.address = f"127.0.0.1:{port}"
        return self.address

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        while data := await reader.read(65536):
            self.received += data
        writer.close()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


def ledger_file(cluster: LogCluster, node: str, ledger_id: int) -> Path:
    index = cluster.storage_addresses.index(node)
    return cluster.base / f"sn{index}" / "ledger.d" / f"{ledger_id:019d}.ledger"


def swap(info: m.LedgerInfo, real: str, fake: str) -> m.LedgerInfo:
    """``info`` with ``fake`` first in each fragment, in ``real``'s place."""
    fragments = tuple(m.Fragment(f.first_entry, (fake, *(n for n in f.nodes if n != real)))
                      for f in info.fragments)
    return msgspec.structs.replace(info, fragments=fragments)


async def test_an_ensemble_naming_an_unconfigured_address_is_refused_and_deletes_nothing(
        cluster: LogCluster) -> None:
    listener = Listener()
    fake = await listener.start()
    zk = await asyncio.to_thread(connect, cluster.zookeeper.address, 10.0,
                                   cluster.zookeeper_secret)
    try:
        async with cluster.client() as client:
            await client.create("t", LogSettings(ledger_entries_max=5))
            for i in range(12):  # ledgers 1 and 2 closed, the third open
                await client.append("t", f"r{i}")
            store = MetaStore(zk, "/xdfs-log")
            meta, _ = await asyncio.to_thread(store.get, "t")
            first, _, open_one = meta.ledgers
            victim = first.fragments[0].nodes[0]
            assert ledger_file(cluster, victim, first.ledger_id).exists()

            def tamper(x: m.LogMeta) -> m.LogMeta:
                ledgers = (swap(first, victim, fake), x.ledgers[1],
                           swap(open_one, open_one.fragments[-1].nodes[0], fake))
                return msgspec.structs.replace(x, ledgers=ledgers)

            await asyncio.to_thread(store.update, "t", tamper)
            # reads go on from the configured nodes; a new writer recovers the open
            # ledger without the stranger; appends and reads still work
            expected = [f"r{i}".encode() for i in range(12)]
            assert [p for _, p in await read_everything(client, "t")] == expected
            await client.open_writer("t")
            await client.append("t", "after")
            assert [p for _, p in await read_everything(client, "t")] == [*expected, b"after"]
        # the keeper, having planned with the tampered metadata, deleted nothing
        service = cluster.services[0]
        kept = re.compile(re.escape(f"{victim} holds ledger {first.ledger_id}") + ".*kept")
        await asyncio.to_thread(service.wait_for, kept, WAIT_S)
        await eventually(lambda: f"refusing storage node {fake}" in service.log_text(),
                         what="the refusal logged")
        assert f"names {fake}, not configured storage nodes: left alone" in service.log_text()
        assert ledger_file(cluster, victim, first.ledger_id).exists()
        assert listener.connections == 0 and not listener.received
    finally:
        await listener.close()
        zk.stop()
        zk.close()
