"""Append and truncate with real processes (a NameNode and three DataNodes as ``xdfs``
subprocesses, SIGKILLed and restarted):

* every DataNode killed while a block is continued after an hflush: once they are back
  and the lease is recovered, the file holds every byte acknowledged (closed before the
  append, or hflushed) -- the continued replicas kept them in rbw;
* the appending writer killed after an hflush (and more bytes): lease recovery closes the
  file with at least every byte it hflushed;
* a truncate inside a block whose DataNodes are paused, then killed and restarted: the
  NameNode starts the block recovery again and the file ends at the new length.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.datapath.conftest import BLOCK_BYTES, payload
from tests.datapath.test_processes import ENV, ProcessCluster
from xdfs.client.client import AsyncClient
from xdfs.common.process import ProcessGroup, ServerProcess
from xdfs.testing.poll import eventually

pytestmark = pytest.mark.slow

NAMES = ("dn0", "dn1", "dn2")
#: Paused DataNodes are not declared dead; a recovery whose primary is gone is retried soon.
NN_OPTIONS = [
    "-D", "namenode.heartbeat_misses_dead=100",
    "-D", "namenode.block_recovery_timeout_s=2",
    "-D", "namenode.lease_check_interval_s=0.5",
]


@pytest.fixture
async def procs(processes: ProcessGroup, tmp_path: Path) -> AsyncIterator[ProcessCluster]:
    cluster = ProcessCluster(processes, tmp_path, nn_options=NN_OPTIONS)
    await asyncio.to_thread(cluster.start_namenode)
    for name in NAMES:
        await asyncio.to_thread(cluster.start_datanode, name)
    async with cluster.client() as client:
        await eventually(lambda: _live(client, 3), what="3 live DataNodes")
    yield cluster


async def _live(client: AsyncClient, count: int) -> bool:
    report = await client.datanode_report()
    return sum(node.state == "live" for node in report.nodes) == count


async def _restart_datanodes(procs: ProcessCluster, client: AsyncClient) -> None:
    for name in NAMES:
        procs.datanodes[name].kill()  # SIGKILL (also ends a SIGSTOPped process)
    for name in NAMES:
        await asyncio.to_thread(procs.start_datanode, name)


async def test_hflushed_bytes_survive_every_datanode_killed_mid_append(
    procs: ProcessCluster,
) -> None:
    closed = payload(5000, seed=1)
    flushed = payload(3000, seed=2)
    unflushed = payload(2500, seed=3)
    async with procs.client() as client:
        await client.write_file("/f", closed, block_size=BLOCK_BYTES, replication=3)
        writer = await client.append("/f")
        await writer.write(flushed)
        await writer.hflush()
        await writer.write(unflushed)  # continues the block: every replica back in rbw
        assert writer._current is not None
        block_id = writer._current.located.block.block_id
        rbw = [procs.base / name / "current" / "rbw" / f"blk_{block_id}" for name in NAMES]
        await eventually(lambda: all(path.exists() for path in rbw),
                         what="the block reopened on every DataNode")
        await _restart_datanodes(procs, client)
        await writer.abort()
        await eventually(lambda: _live(client, 3), timeout_s=60, what="DataNodes back")
        await eventually(lambda: client.recover_lease("/f"), timeout_s=60,
                         what="the lease recovered")
        data = await client.read_file("/f")
    acknowledged = closed + flushed
    assert data[: len(acknowledged)] == acknowledged
    assert data == (acknowledged + unflushed)[: len(data)]  # nothing but what was written


APPENDER = """
import asyncio, os, sys
from xdfs.client.client import AsyncClient
from xdfs.config import XdfsConfig

async def main(address, path):
    async with AsyncClient(f"xdfs://{address}", user=os.environ["XDFS_USER"],
                           password=os.environ["XDFS_PASSWORD"], config=XdfsConfig()) as client:
        writer = await client.append(path)
        await writer.write(b"F" * 3000)
        await writer.hflush()
        await writer.write(b"U" * 2000)
        print("flushed", flush=True)
        await asyncio.sleep(3600)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


async def test_hflushed_bytes_survive_the_appender_killed(procs: ProcessCluster) -> None:
    closed = payload(5000, seed=5)
    async with procs.client() as client:
        await client.write_file("/w", closed, block_size=BLOCK_BYTES, replication=3)
        appender = ServerProcess(
            [sys.executable, "-c", APPENDER, procs.nn_address, "/w"],
            log_path=procs.base / "appender.log", ready_pattern=r"flushed", env=ENV,
        )
        await asyncio.to_thread(procs.group.start, appender, 60.0)
        assert await client.read_file("/w") == closed + b"F" * 3000  # visible: hflushed
        appender.kill()
        await eventually(lambda: client.recover_lease("/w"), timeout_s=60,
                         what="the lease recovered")
        data = await client.read_file("/w")
    written = closed + b"F" * 3000 + b"U" * 2000
    assert len(data) >= len(closed) + 3000 and data == written[: len(data)]


async def test_truncate_recovery_finishes_after_the_datanodes_restart(
    procs: ProcessCluster,
) -> None:
    data = payload(BLOCK_BYTES + 5000, seed=4)
    async with procs.client() as client:
        await client.write_file("/t", data, block_size=BLOCK_BYTES, replication=3)
        for name in NAMES:
            os.kill(procs.datanodes[name].pid, signal.SIGSTOP)  # the recovery cannot run
        assert await client.truncate("/t", BLOCK_BYTES + 1000) is False
        assert (await client.stat("/t")).under_construction
        await _restart_datanodes(procs, client)

        async def closed() -> bool:
            return not (await client.stat("/t")).under_construction

        await eventually(closed, timeout_s=60, what="the truncate recovered")
        assert await client.read_file("/t") == data[: BLOCK_BYTES + 1000]
        writer = await client.append("/t")  # and the file takes appends again
        await writer.write(b"more")
        await writer.close()
        assert await client.read_file("/t") == data[: BLOCK_BYTES + 1000] + b"more"
