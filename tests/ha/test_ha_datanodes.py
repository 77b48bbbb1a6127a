"""DataNodes of an HA pair, with real processes (two NameNodes, three JournalNodes, three
DataNodes): every DataNode reports to both NameNodes, so the standby's block map is warm
(the same replicas as the active's, seen through its ``block_map`` dump); after the
active is SIGKILLed the new active serves every read at once, without a single new full
report; and a standby never makes a DataNode delete anything: only the active's commands
are carried out."""

from __future__ import annotations

import asyncio
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from xdfs.errors import XdfsError
from xdfs.protocol.namenode import BlockMapRow

from ..journal.qjm_cluster import make_cluster
from .cluster import HaCluster

pytestmark = pytest.mark.slow

BLOCK = 64 * 1024
DATANODES = 3
FULL_REPORT = "full block report of DataNode"
FORGOTTEN = "NameNode does not know this DataNode"
STALE = "it was fenced by a takeover; not obeying it"
RESUMED = "every DataNode has heartbeated since the failover: deletions resume"


@pytest.fixture
def ha(tmp_path: Path) -> Iterator[HaCluster]:
    """nn1 active, nn2 standby, three DataNodes live on both (fast heartbeats)."""
    qjm = make_cluster(tmp_path, tmp_path)
    qjm.extra += ["-D", "namenode.heartbeat_interval_s=0.5"]
    cluster = HaCluster(qjm, tmp_path)
    try:
        cluster.format()
        cluster.start("nn1")
        cluster.start("nn2")
        result = cluster.admin("-transitionToActive", "nn1")
        assert result.returncode == 0, result.stderr
        for index in range(DATANODES):
            cluster.start_datanode(index)
        cluster.wait(lambda: cluster.writable(DATANODES), "three live DataNodes on nn1")
        cluster.wait(lambda: _live_on(cluster, "nn2") == DATANODES,
                     "three live DataNodes on the standby")
        yield cluster
    finally:
        qjm.group.kill_all()


def _live_on(ha: HaCluster, nn_id: str) -> int:
    async def ask() -> int:
        async with ha.client(nn_id) as client:
            report = await client.datanode_report()
            return sum(node.state == "live" for node in report.nodes)

    try:
        return asyncio.run(ask())
    except XdfsError:
        return -1


def _replicas(ha: HaCluster, nn_id: str) -> set[tuple[int, str, str]]:
    """(block id, DataNode, replica state) of every replica in ``nn_id``'s block map."""
    rows: list[BlockMapRow] = []

    async def dump() -> None:
        async with ha.client(nn_id) as client:
            await client.block_map(rows.extend)

    asyncio.run(dump())
    return {(r.block_id, r.node_id, r.replica_state) for r in rows if r.node_id}


def _same_map(ha: HaCluster) -> bool:
    return _replicas(ha, "nn1") == _replicas(ha, "nn2")


def _data(index: int) -> bytes:
    return bytes([index]) * (BLOCK * (index % 3) + 1000 * index)


async def _write(ha: HaCluster, count: int) -> None:
    async with ha.client() as client:
        for index in range(count):
            await client.write_file(f"/files/f{index}", _data(index), replication=DATANODES,
                                    block_size=BLOCK)


def test_the_standby_map_is_warm_and_the_new_active_serves_reads_at_once(ha: HaCluster) -> None:
    files = 6
    asyncio.run(_write(ha, files))
    ha.wait(lambda: _same_map(ha), "the standby's block map equals the active's")
    replicas = _replicas(ha, "nn2")
    assert len({block for block, _, _ in replicas}) >= files  # every block, three copies
    assert {state for _, _, state in replicas} == {"good"}
    standby = ha.namenodes["nn2"]
    reports_before = standby.log_text().count(FULL_REPORT)

    ha.namenodes["nn1"].kill()
    result = ha.admin("-transitionToActive", "nn2")
    assert result.returncode == 0, result.stderr

    async def read_all() -> tuple[bool, list[bytes]]:
        async with ha.client("nn2") as client:
            on = (await client.safe_mode("get")).on
            return on, [await client.read_file(f"/files/f{i}") for i in range(files)]

    in_safe_mode, contents = asyncio.run(read_all())
    assert not in_safe_mode  # left it from the reports it had as a standby
    assert contents == [_data(i) for i in range(files)]
    # nothing needed a new full report: the map was the standby's
    assert standby.log_text().count(FULL_REPORT) == reports_before
    # deletions, postponed at the takeover, resume once every DataNode has heartbeated
    ha.wait(lambda: RESUMED in standby.log_text(), "deletions resume on the new active")
    # and it takes writes with the same DataNodes
    asyncio.run(_write_one(ha, "/after", b"x" * 5000))


async def _write_one(ha: HaCluster, path: str, data: bytes) -> None:
    async with ha.client("nn2") as client:
        await client.write_file(path, data, replication=DATANODES)
        assert await client.read_file(path) == data


def _deleted_by_datanodes(ha: HaCluster) -> int:
    logs = [dn.log_text() for dn in ha.datanodes]
    found = re.findall(r"deleted (\d+) replica\(s\) as the NameNode asked", "\n".join(logs))
    return sum(map(int, found))


def _ignored_commands(ha: HaCluster) -> int:
    logs = [dn.log_text() for dn in ha.datanodes]
    return "\n".join(logs).count("it is not the one believed active")


def _files_of(ha: HaCluster, block_id: int) -> int:
    return sum(1 for i in range(DATANODES)
               for _ in (ha.base / f"dn{i}").rglob(f"blk_{block_id}"))


def test_only_the_active_makes_datanodes_delete(ha: HaCluster) -> None:
    async def write() -> int:
        async with ha.client("nn1") as client:
            await client.write_file("/r", b"r" * 10_000, replication=DATANODES)
            located = await client.block_locations("/r")
            return int(located.blocks[0].block.block_id)

    block_id = asyncio.run(write())

    def copies(nn_id: str) -> int:
        return sum(1 for block, _, _ in _replicas(ha, nn_id) if block == block_id)

    ha.wait(lambda: copies("nn2") == DATANODES, "the standby knows the three replicas")
    assert _deleted_by_datanodes(ha) == 0

    async def setrep() -> None:
        async with ha.client("nn1") as client:
            await client.set_replication("/r", 1)

    asyncio.run(setrep())
    ha.wait(lambda: _files_of(ha, block_id) == 1, "two replicas deleted on the DataNodes")
    ha.wait(lambda: copies("nn1") == 1 and copies("nn2") == 1,
            "both NameNodes learn of the deletions")
    # exactly the active's two deletions, and the standby never sent a command
    assert _deleted_by_datanodes(ha) == 2
    assert _ignored_commands(ha) == 0
    # a paused active: the standby sees the DataNodes alone, and still deletes nothing
    old = ha.namenodes["nn1"]
    os.kill(old.pid, signal.SIGSTOP)
    try:
        ha.wait(lambda: _live_on(ha, "nn2") == DATANODES, "the standby still hears them")
        assert _files_of(ha, block_id) == 1
        assert _deleted_by_datanodes(ha) == 2
    finally:
        os.kill(old.pid, signal.SIGCONT)


def test_graceful_failovers_keep_both_block_maps(ha: HaCluster) -> None:
    """nn1 -> nn2 -> nn1 through -transitionToStandby/-transitionToActive: each new active
    reads everything at once from its warm map, and the one gone standby keeps its map
    (and follows the new active's writes)."""
    asyncio.run(_write(ha, 3))
    reports = [proc.log_text().count(FULL_REPORT) for proc in ha.namenodes.values()]
    for round_, (old, new) in enumerate((("nn1", "nn2"), ("nn2", "nn1"))):
        ha.wait(lambda: _same_map(ha), f"round {round_}: the standby's map is the active's")
        for step in (("-transitionToStandby", old), ("-transitionToActive", new)):
            result = ha.admin(*step)
            assert result.returncode == 0, result.stderr

        async def check(new: str = new, round_: int = round_) -> None:
            async with ha.client(new) as client:
                assert not (await client.safe_mode("get")).on
                for i in range(3):
                    assert await client.read_file(f"/files/f{i}") == _data(i)
                await client.write_file(f"/round{round_}", b"w" * 3000, replication=DATANODES)

        asyncio.run(check())
    ha.wait(lambda: _same_map(ha), "the standby follows the last active's writes")
    after = [proc.log_text().count(FULL_REPORT) for proc in ha.namenodes.values()]
    # No failover needs a full report, not even when a DataNode hears the new standby answer
    # at the epoch it had before it tailed the new active's (failovers 0.5 s apart): that
    # standby lags, it was not fenced. One comes only from a DataNode a NameNode declared
    # dead meanwhile (heartbeats every 0.5 s here, 3 missed = dead: a loaded machine can do
    # that), which registers again and reports everything.
    forgotten = sum(proc.log_text().count(FORGOTTEN) for proc in ha.datanodes)
    assert sum(after) - sum(reports) <= forgotten, (reports, after, forgotten)
    assert not any(STALE in proc.log_text() for proc in ha.datanodes)
    assert all(a >= r for a, r in zip(after, reports, strict=True))
