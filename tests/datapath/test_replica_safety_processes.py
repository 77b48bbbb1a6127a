"""Issue 17 items 4 and 6 with real processes (a NameNode and two DataNodes as ``xdfs``
subprocesses, replication 2):

* a replica file deleted by hand (``blk_`` or ``.meta``) is found by the directory scanner
  or at the first read, fsck shows the block under-replicated, the replication monitor
  copies it back, and the file survives the other DataNode's death;
* a writer SIGKILLed after 1 MiB of an unfinished block leaves a file that
  ``xdfs debug -recoverLease`` (or the lease hard limit) closes with that 1 MiB.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.datapath.conftest import digest, payload, replication_settled
from tests.datapath.test_processes import ENV, ProcessCluster
from xdfs.client.client import AsyncClient
from xdfs.common.process import ProcessGroup, ServerProcess
from xdfs.config import XdfsConfig
from xdfs.errors import BlockNotFound
from xdfs.protocol.datanode import READ_BLOCK, ReadBlockRequest
from xdfs.rpc.client import RpcClient
from xdfs.rpc.messages import PROTOCOL_VERSION, Hello
from xdfs.testing.poll import eventually

pytestmark = pytest.mark.slow

MiB = 1024 * 1024
#: DataNodes are never declared dead while the test holds one with SIGSTOP (30 s).
PATIENT = ["-D", "namenode.heartbeat_misses_dead=100"]


async def _cluster(procs: ProcessCluster) -> ProcessCluster:
    await asyncio.to_thread(procs.start_namenode)
    for name in ("dn0", "dn1"):
        await asyncio.to_thread(procs.start_datanode, name)
    async with procs.client() as client:
        await eventually(lambda: _live(client, 2), what="2 live DataNodes")
        # both take writes (registered with their block keys in): a block on both of them
        await client.write_file("/warm-up", b"x")
        await eventually(lambda: replication_settled(client, "/warm-up"), what="warmed up")
    return procs


async def _live(client: AsyncClient, count: int) -> bool:
    report = await client.datanode_report()
    return sum(node.state == "live" for node in report.nodes) == count


@pytest.fixture
async def scanned(processes: ProcessGroup, tmp_path: Path) -> AsyncIterator[ProcessCluster]:
    """DataNodes whose directory scanner runs every second."""
    procs = ProcessCluster(processes, tmp_path, nn_options=PATIENT,
                           dn_options=["-D", "datanode.directory_scan_interval_s=1"])
    yield await _cluster(procs)


def _replica_file(procs: ProcessCluster, name: str, block_id: int, lost: str) -> Path:
    pattern = f"blk_{block_id}" if lost == "data" else f"blk_{block_id}_*.meta"
    (path,) = (procs.base / name / "current" / "finalized").glob(f"subdir*/subdir*/{pattern}")
    return path


async def _read_from(address: str, client: AsyncClient, path: str) -> bytes:
    located = (await client.block_locations(path)).blocks[0]
    rpc = RpcClient(address, XdfsConfig().rpc, hello=Hello(PROTOCOL_VERSION, client_name="t"))
    try:
        stream = await rpc.download(READ_BLOCK, ReadBlockRequest(located.block, located.token))
        return await stream.read_all()
    finally:
        await rpc.close()


async def _under_replicated(client: AsyncClient, path: str) -> bool:
    report = await client.fsck(path, files=True, blocks=True)
    return report.under_replicated_blocks == 1 and [
        block.status for entry in report.listed for block in entry.blocks
    ][:1] == ["under_replicated"]


@pytest.mark.parametrize(("lost", "found_by"), [("data", "scan"), ("meta", "read")])
async def test_a_replica_file_deleted_by_hand_is_replaced(
    scanned: ProcessCluster, lost: str, found_by: str
) -> None:
    procs = scanned
    data = payload(3 * MiB // 2, seed=11)
    async with procs.client() as client:
        await client.write_file("/f", data, block_size=MiB)
        await eventually(lambda: replication_settled(client, "/f"), what="2 replicas")
        block_id = (await client.block_locations("/f")).blocks[0].block.block_id
        source = procs.datanodes["dn1"]
        os.kill(source.pid, signal.SIGSTOP)  # no copy can be made until we say so
        try:
            _replica_file(procs, "dn0", block_id, lost).unlink()
            if found_by == "read":
                with pytest.raises(BlockNotFound):
                    await _read_from(procs.address_of("dn0"), client, "/f")
            # fsck tells the truth: one good replica of two
            await eventually(lambda: _under_replicated(client, "/f"), timeout_s=60,
                             what="fsck reports the block under-replicated")
            report = await client.datanode_report()
            assert report.under_replicated >= 1 and report.missing_blocks == 0
        finally:
            os.kill(source.pid, signal.SIGCONT)
        # the replication monitor copies it back (to dn0: the only node without it)
        await eventually(lambda: replication_settled(client, "/f"), timeout_s=60,
                         what="the count restored")
        assert _replica_file(procs, "dn0", block_id, lost).exists()
        source.kill()  # SIGKILL: only dn0 is left
        assert digest(await client.read_file("/f")) == digest(data)


# --- item 6: a writer killed mid-block --------------------------------------------------

WRITER = """
import asyncio, os, sys
from xdfs.client.client import AsyncClient
from xdfs.config import XdfsConfig

async def main(address, path, size):
    async with AsyncClient(f"xdfs://{address}", user=os.environ["XDFS_USER"],
                           password=os.environ["XDFS_PASSWORD"], config=XdfsConfig()) as client:
        writer = await client.open_write(path, block_size=4 * size)
        await writer.write(bytes(range(256)) * (size // 256))
        print("written", writer._current.located.block.block_id, flush=True)
        await asyncio.sleep(3600)

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""
WRITTEN = bytes(range(256)) * (MiB // 256)


async def _write_and_die(procs: ProcessCluster, path: str) -> int:
    """A writer process streams 1 MiB into a file's first (4 MiB) block and is SIGKILLed
    once both DataNodes hold that MiB; returns the block id."""
    writer = ServerProcess(
        [sys.executable, "-c", WRITER, procs.nn_address, path, str(MiB)],
        log_path=procs.base / "writer.log", ready_pattern=r"written (\d+)", env=ENV,
    )
    match = await asyncio.to_thread(procs.group.start, writer, 60.0)
    assert match.match is not None
    block_id = int(match.match.group(1))

    async def both_hold_it() -> bool:
        files = [procs.base / dn / "current" / "rbw" / f"blk_{block_id}" for dn in ("dn0", "dn1")]
        return all(f.exists() and f.stat().st_size == MiB for f in files)

    await eventually(both_hold_it, what="1 MiB on both DataNodes")
    writer.kill()
    return block_id


async def _closed(client: AsyncClient, path: str) -> bool:
    return not (await client.stat(path)).under_construction


async def _check_recovered(procs: ProcessCluster, path: str) -> None:
    async with procs.client() as client:
        status = await client.stat(path)
        assert not status.under_construction and status.length == MiB
        assert await client.read_file(path) == WRITTEN
        (located,) = (await client.block_locations(path)).blocks
        assert located.block.num_bytes == MiB and len(located.locations) == 2


async def test_recover_lease_closes_an_abandoned_file_with_its_mib(
    processes: ProcessGroup, tmp_path: Path
) -> None:
    procs = await _cluster(ProcessCluster(processes, tmp_path))
    await _write_and_die(procs, "/abandoned")
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "xdfs", "-D", "client.recover_lease_retry_interval_s=0.5",
         "debug", "-fs", f"xdfs://{procs.nn_address}", "-recoverLease", "/abandoned",
         "-retries", "60"],
        env={**os.environ, **ENV}, capture_output=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert b"recoverLease SUCCEEDED on /abandoned" in done.stdout
    await _check_recovered(procs, "/abandoned")


async def test_the_hard_limit_recovers_the_mib_too(
    processes: ProcessGroup, tmp_path: Path
) -> None:
    limits = ["-D", "namenode.lease_soft_limit_s=1", "-D", "namenode.lease_hard_limit_s=2",
              "-D", "namenode.lease_check_interval_s=0.5"]
    procs = await _cluster(ProcessCluster(processes, tmp_path, nn_options=limits))
    await _write_and_die(procs, "/silent")
    async with procs.client() as client:
        await eventually(lambda: _closed(client, "/silent"), timeout_s=60,
                         what="closed by the lease monitor")
    await _check_recovered(procs, "/silent")
