"""The log service with a storage node down, on real processes (issue 37, seeds 002/004):
kill -9 of one of three storage nodes in the middle of appends leaves the log usable --
open_writer, append and read all work, with the node down and after it is back -- and
every acknowledged record is read back exactly once, in order."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.logservice.cluster import LogCluster
from tests.logservice.conftest import read_everything
from xdfs.common.process import ProcessGroup
from xdfs.errors import XdfsError
from xdfs.log.client import AsyncLogClient
from xdfs.protocol.log import Lsn

#: Appends acknowledged before the kill (the kill lands among the appends that follow).
BEFORE_KILL = 40


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LogCluster]:
    with ProcessGroup(tmp_path) as group:
        yield LogCluster(tmp_path, group, storage_count=3, service_count=1).start()


def check_once_in_order(got: list[tuple[Lsn, bytes]], acked: dict[bytes, Lsn]) -> None:
    """Every acknowledged record exactly once, at its LSN, in LSN order (a record whose
    append failed may be there too, once: it was never acknowledged)."""
    payloads = [p for _, p in got]
    assert len(set(payloads)) == len(payloads), "a record read back twice"
    assert [lsn for lsn, _ in got] == sorted(lsn for lsn, _ in got)
    found = dict((p, lsn) for lsn, p in got)
    missing = [p for p in acked if p not in found]
    assert not missing, f"acknowledged records lost: {missing[:5]}"
    assert all(found[p] == lsn for p, lsn in acked.items())


async def append_some(client: AsyncLogClient, name: str, prefix: str, count: int,
                      acked: dict[bytes, Lsn], after: Callable[[int], None] | None = None
                      ) -> int:
    """``count`` appends, one after the other (``after(i)`` once the i-th was answered);
    failures counted, not raised."""
    failed = 0
    for i in range(count):
        payload = f"{prefix}{i}".encode()
        try:
            acked[payload] = await client.append(name, payload)
        except XdfsError:
            failed += 1
        if after is not None:
            after(i)
    return failed


async def test_kill_9_of_one_of_three_storage_nodes_mid_append_leaves_the_log_usable(
        cluster: LogCluster) -> None:
    acked: dict[bytes, Lsn] = {}
    async with cluster.client() as client:
        await client.create("k")
        assert await append_some(client, "k", "a", BEFORE_KILL, acked) == 0
        # a second appender keeps adds in flight to the node when it is killed
        other = asyncio.ensure_future(append_some(client, "k", "o", 200, acked))

        def kill_at(i: int) -> None:
            if i == 20:
                cluster.storage[0].kill()

        await append_some(client, "k", "b", 200, acked, kill_at)
        await other
        # with the node down: a new writer (recovering the open ledger), appends, reads
        await client.open_writer("k")
        assert await append_some(client, "k", "c", 20, acked) == 0
        check_once_in_order(await read_everything(client, "k"), acked)
        # once more with the node still down (the recovered ledger was written on two)
        await client.open_writer("k")
        assert await append_some(client, "k", "d", 20, acked) == 0
        check_once_in_order(await read_everything(client, "k"), acked)
        # the node returns: still all of it, and more
        cluster.start_storage(0)
        await client.open_writer("k")
        assert await append_some(client, "k", "e", 20, acked) == 0
        check_once_in_order(await read_everything(client, "k"), acked)
