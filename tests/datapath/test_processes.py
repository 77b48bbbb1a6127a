"""The data path with real processes: a NameNode and DataNodes as ``xdfs`` subprocesses,
killed with SIGKILL and restarted; and ``xdfs dev`` with its cluster.json."""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.datapath.conftest import BLOCK_BYTES, digest, payload, replica_files, replication_settled
from xdfs.client.client import AsyncClient
from xdfs.common.process import ProcessGroup, ServerProcess
from xdfs.config import XdfsConfig
from xdfs.errors import DataError, SafeModeError, Unavailable
from xdfs.testing.lazyfs import CrashSite
from xdfs.testing.poll import eventually

pytestmark = pytest.mark.slow

USER, PASSWORD = "root", "rootpw"
ENV = {"XDFS_USER": USER, "XDFS_PASSWORD": PASSWORD}
FAST = [
    "-D", "namenode.heartbeat_interval_s=0.3",
    "-D", "namenode.replication_check_interval_s=0.3",
    "-D", "namenode.safe_mode_extension_s=1.0",
    "-D", "namenode.replication_pending_timeout_s=5.0",
]


@dataclass
class ProcessCluster:
    group: ProcessGroup
    base: Path
    nn: ServerProcess | None = None
    nn_address: str = ""
    datanodes: dict[str, ServerProcess] = field(default_factory=dict)
    #: ``-D section.key=value`` options of the NameNode (after FAST) and of DataNodes.
    nn_options: list[str] = field(default_factory=list)
    dn_options: list[str] = field(default_factory=list)

    def start_namenode(self) -> str:
        name_dir = self.base / "nn"
        if not name_dir.exists():
            subprocess.run(
                [sys.executable, "-m", "xdfs", "namenode", "--name-dir", str(name_dir), "-format"],
                env={**os.environ, **ENV}, check=True, capture_output=True, timeout=120,
            )
        address = self.nn_address or "127.0.0.1:0"
        self.nn = self.group.start_xdfs(
            "nn", *FAST, *self.nn_options, "namenode", "--name-dir", str(name_dir),
            "--rpc-address", address,
            ready_pattern=r"namenode serving on (\S+)", env=ENV,
        )
        assert self.nn.match is not None
        self.nn_address = self.nn.match.group(1)
        return self.nn_address

    def start_datanode(self, name: str) -> ServerProcess:
        proc = self.group.start_xdfs(
            name, *self.dn_options, "datanode", "--data-dir", str(self.base / name), "--namenode",
            self.nn_address, "--rpc-address", "127.0.0.1:0",
            ready_pattern=r"datanode serving on (\S+)", env=ENV,
        )
        self.datanodes[name] = proc
        return proc

    def address_of(self, name: str) -> str:
        match = self.datanodes[name].match
        assert match is not None
        return match.group(1)

    def client(self) -> AsyncClient:
        return AsyncClient(
            f"xdfs://{self.nn_address}", user=USER, password=PASSWORD, config=XdfsConfig()
        )


@pytest.fixture
async def procs(processes: ProcessGroup, tmp_path: Path) -> AsyncIterator[ProcessCluster]:
    cluster = ProcessCluster(processes, tmp_path)
    await asyncio.to_thread(cluster.start_namenode)
    for index in range(3):
        await asyncio.to_thread(cluster.start_datanode, f"dn{index}")
    yield cluster


async def _live_count(client: AsyncClient) -> int:
    report = await client.datanode_report()
    return sum(node.state == "live" for node in report.nodes)


async def test_acknowledged_files_survive_a_crash_of_every_process(
    processes: ProcessGroup, crash_site: CrashSite
) -> None:
    """The NameNode and every DataNode crash at once while writers are busy (SIGKILL, and
    on the power-loss layer a power cut of the whole machine): every file whose close was
    acknowledged reads back whole after the restart."""
    cluster = ProcessCluster(processes, crash_site.root)
    await asyncio.to_thread(cluster.start_namenode)
    for index in range(3):
        await asyncio.to_thread(cluster.start_datanode, f"dn{index}")
    acked: dict[str, bytes] = {}

    async def writer(client: AsyncClient, worker: int) -> None:
        for i in itertools.count():
            path, data = f"/w{worker}/f{i}", payload(BLOCK_BYTES * (i % 3) + 777 * i, seed=i)
            await client.write_file(path, data, block_size=BLOCK_BYTES)
            acked[path] = data

    async with cluster.client() as client:
        await eventually(lambda: _at_least(client, 3), what="3 live DataNodes")
        tasks = [asyncio.ensure_future(writer(client, w)) for w in range(3)]
        await eventually(lambda: _acked_at_least(acked, 12), timeout_s=60, what="12 files")
        assert cluster.nn is not None
        await asyncio.to_thread(crash_site.crash, cluster.nn, *cluster.datanodes.values())
        await asyncio.gather(*tasks, return_exceptions=True)  # they fail: all is down
    await asyncio.to_thread(cluster.start_namenode)
    for name in list(cluster.datanodes):
        await asyncio.to_thread(cluster.start_datanode, name)
    async with cluster.client() as client:
        for path, data in acked.items():
            got = await eventually(functools.partial(_read, client, path), timeout_s=60,
                                   what=path)
            assert digest(got[0]) == digest(data), path


async def _acked_at_least(acked: dict[str, bytes], count: int) -> bool:
    return len(acked) >= count


async def _read(client: AsyncClient, path: str) -> tuple[bytes] | None:
    """The file (in a tuple: it may be empty), or None while the restarted cluster cannot
    serve it yet (DataNodes still reporting)."""
    try:
        return (await client.read_file(path),)
    except (SafeModeError, Unavailable, DataError):
        return None


async def test_kill_9_datanode_rereplicates_and_reads_continue(procs: ProcessCluster) -> None:
    async with procs.client() as client:
        await eventually(lambda: _at_least(client, 3), what="3 live DataNodes")
        files = {f"/k/f{i}": payload(BLOCK_BYTES * (i % 3) + 1000 * i, seed=i) for i in range(8)}
        for path, data in files.items():
            await client.write_file(path, data, block_size=BLOCK_BYTES)
        victim = "dn1"
        held = [p for p in (procs.base / victim).rglob("blk_*") if not p.name.endswith(".meta")]
        assert held, "the victim holds replicas"
        procs.datanodes[victim].kill()  # SIGKILL

        async def dead_and_repaired() -> bool:
            for path, data in files.items():  # reads keep working throughout
                assert digest(await client.read_file(path)) == digest(data), path
            report = await client.datanode_report()
            states = {node.address: node.state for node in report.nodes}
            return (
                states.get(procs.address_of(victim)) == "dead"
                and await replication_settled(client, "/k")
            )

        await eventually(dead_and_repaired, timeout_s=60, what="dead node's blocks re-replicated")
        for path in files:
            for block in (await client.block_locations(path)).blocks:
                assert procs.address_of(victim) not in block.locations
                assert len(block.locations) == 2


async def _at_least(client: AsyncClient, count: int) -> bool:
    return await _live_count(client) >= count


async def test_restarted_datanode_is_counted_again_and_orphans_are_deleted(
    procs: ProcessCluster,
) -> None:
    async with procs.client() as client:
        await eventually(lambda: _at_least(client, 3), what="3 live DataNodes")
        await client.write_file("/keep", payload(5000, seed=1), replication=3)
        await client.write_file("/drop", payload(6000, seed=2), replication=3)
        keep_id = (await client.block_locations("/keep")).blocks[0].block.block_id
        drop_id = (await client.block_locations("/drop")).blocks[0].block.block_id
        procs.datanodes["dn2"].terminate()
        # deleted while dn2 is down: its replica of /drop becomes an orphan
        await client.delete("/drop", skip_trash=True)
        await asyncio.to_thread(procs.start_datanode, "dn2")

        async def reconciled() -> bool:
            orphan_gone = not replica_files(procs.base / "dn2", drop_id)
            located = (await client.block_locations("/keep")).blocks[0]
            return orphan_gone and len(located.locations) == 3

        await eventually(reconciled, timeout_s=60, what="dn2 counted again, orphan deleted")
        assert replica_files(procs.base / "dn2", keep_id)


async def test_namenode_restart_enters_and_leaves_safe_mode(procs: ProcessCluster) -> None:
    async with procs.client() as client:
        await eventually(lambda: _at_least(client, 3), what="3 live DataNodes")
        data = payload(3 * BLOCK_BYTES, seed=5)
        await client.write_file("/sm", data, block_size=BLOCK_BYTES)
    assert procs.nn is not None
    procs.nn.kill()
    await asyncio.to_thread(procs.start_namenode)  # same address: DataNodes come back
    async with procs.client() as client:
        status = await client.safe_mode("get")
        if status.on:  # reports may already be in: then it is off by now
            with pytest.raises(SafeModeError):
                await client.mkdirs("/not-yet")

        async def left() -> bool:
            return not (await client.safe_mode("get")).on

        await eventually(left, timeout_s=60, what="safe mode left after block reports")
        assert await client.read_file("/sm") == data
        await client.mkdirs("/after")


async def test_client_write_survives_target_killed_mid_block(procs: ProcessCluster) -> None:
    async with procs.client() as client:
        await eventually(lambda: _at_least(client, 3), what="3 live DataNodes")
        data = payload(3 * BLOCK_BYTES, seed=8)
        writer = await client.open_write("/survive", block_size=2 * BLOCK_BYTES)
        await writer.write(data[: BLOCK_BYTES // 2])
        current = writer._current
        assert current is not None
        victim = next(
            name for name in procs.datanodes
            if procs.address_of(name) == current.located.locations[0]
        )
        procs.datanodes[victim].kill()
        await writer.write(data[BLOCK_BYTES // 2 :])
        await writer.close()
        assert digest(await client.read_file("/survive")) == digest(data)
        await eventually(
            lambda: replication_settled(client, "/survive"), timeout_s=60, what="2 replicas"
        )


def test_dev_cluster_writes_cluster_json_and_serves_files(
    processes: ProcessGroup, tmp_path: Path
) -> None:
    base = tmp_path / "dev"
    dev = processes.start_xdfs(
        "dev", "dev", "--base-dir", str(base), "--port", "0", "--datanodes", "3",
        ready_pattern=r"xdfs dev cluster ready: (\S+)", deadline_s=120, env=ENV,
    )
    listing = json.loads((base / "cluster.json").read_text())
    roles = sorted(p["role"] for p in listing["processes"])
    assert roles == ["datanode", "datanode", "datanode", "namenode"]
    for entry in listing["processes"]:
        os.kill(entry["pid"], 0)  # each listed pid is a live process
    env = {**os.environ, "XDFS_CONF": str(base / "client.toml")}
    local = tmp_path / "hello.txt"
    local.write_bytes(b"hello from xdfs dev\n" * 1000)

    def xdfs(*args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([sys.executable, "-m", "xdfs", *args], env=env,
                              capture_output=True, timeout=120)

    assert xdfs("dfs", "-put", str(local), "/hello.txt").returncode == 0
    cat = xdfs("dfs", "-cat", "/hello.txt")
    assert cat.returncode == 0 and cat.stdout == local.read_bytes()
    report = xdfs("admin", "-report")
    assert b"Live datanodes (3)" in report.stdout
    fsck = xdfs("fsck", "/")
    assert fsck.returncode == 0 and b"is HEALTHY" in fsck.stdout
    assert dev.proc is not None
    dev.proc.send_signal(signal.SIGTERM)
    assert dev.proc.wait(60) == 0
    for entry in listing["processes"]:
        with pytest.raises(ProcessLookupError):
            os.kill(entry["pid"], 0)
