"""Split brain and rollback, with real processes (issue 17, items 1 and 2).

A SIGSTOPped NameNode is fenced by the takeover (or the takeover is refused); DataNodes
whose NameNode pauses fail over on heartbeat timeouts; a DataNode that has seen a higher
epoch never obeys a NameNode restarted from an older name dir; and ``xdfs dev`` restarts
from the name dir that was active, after a takeover.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import zlib
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pytest

from tests.datapath.conftest import payload, replica_files
from xdfs.client.client import AsyncClient
from xdfs.common.process import ProcessGroup, ServerProcess
from xdfs.config import XdfsConfig, read_toml
from xdfs.errors import XdfsError
from xdfs.testing.net import free_port
from xdfs.testing.poll import eventually

from .conftest import ROOT, ROOT_PW
from .test_backup_processes import BACKUP_FAST, ENV, address_of, backup_status, fencing, run_xdfs

pytestmark = pytest.mark.slow

#: Fast liveness everywhere (the promoted backup runs the NameNode with its own config).
FAST = [
    "-D", "namenode.heartbeat_interval_s=0.3",
    "-D", "namenode.replication_check_interval_s=0.3",
    "-D", "namenode.safe_mode_extension_s=0.5",
    "-D", "datanode.namenode_call_timeout_s=1.5",
    "-D", "datanode.namenode_retry_max_s=0.5",
    *BACKUP_FAST,
]
NOT_OBEYED = "it was fenced by a takeover; not obeying it"
DELETED = "as the NameNode asked"
FILE_BYTES = 96 * 1024


@dataclass
class HaCluster:
    """A NameNode, its BackupNode and DataNodes listing both (NameNode first)."""

    group: ProcessGroup
    base: Path
    nn_address: str = ""
    backup_address: str = ""
    datanodes: dict[str, ServerProcess] = field(default_factory=dict)

    @property
    def name_dir(self) -> Path:
        return self.base / "nn"

    def start_namenode(self, *extra: str, address: str = "127.0.0.1:0") -> ServerProcess:
        if not self.name_dir.exists():
            subprocess.run(
                [sys.executable, "-m", "xdfs", "namenode", "--name-dir", str(self.name_dir),
                 "-format"], env={**os.environ, **ENV}, check=True, capture_output=True,
                timeout=120,
            )
        proc = self.group.start_xdfs(
            "nn", *FAST, *extra, "namenode", "--name-dir", str(self.name_dir),
            "--rpc-address", address, ready_pattern=r"namenode serving on (\S+)", env=ENV,
        )
        self.nn_address = address_of(proc)
        return proc

    def start_backup(self, *methods: str) -> ServerProcess:
        proc = self.group.start_xdfs(
            "backup", *FAST, *fencing(*methods), "backupnode", "--name-dir",
            str(self.base / "backup"), "--namenode", self.nn_address, "--rpc-address",
            "127.0.0.1:0", ready_pattern=r"backupnode serving on (\S+)", env=ENV,
        )
        self.backup_address = address_of(proc)
        return proc

    def start_datanode(self, name: str) -> ServerProcess:
        proc = self.group.start_xdfs(
            name, *FAST, "datanode", "--data-dir", str(self.base / name), "--namenode",
            f"{self.nn_address},{self.backup_address}", "--rpc-address", "127.0.0.1:0",
            ready_pattern=r"datanode serving on (\S+)", env=ENV,
        )
        self.datanodes[name] = proc
        return proc

    def client(self, *addresses: str) -> AsyncClient:
        uri = "xdfs://" + ",".join(addresses or (self.nn_address, self.backup_address))
        return AsyncClient(uri, user=ROOT, password=ROOT_PW, token="", config=XdfsConfig())

    def datanode_logs(self) -> str:
        return "".join(proc.log_text() for proc in self.datanodes.values())


async def writable_with(client: AsyncClient, datanodes: int) -> bool:
    """Out of safe mode with ``datanodes`` live DataNodes (false while nobody answers)."""
    try:
        report = await client.datanode_report()
    except XdfsError:  # the active NameNode may be changing
        return False
    live = sum(node.state == "live" for node in report.nodes)
    return not report.safe_mode and live == datanodes


async def write_files(client: AsyncClient, prefix: str, count: int,
                      replication: int = 2) -> dict[str, bytes]:
    seed = zlib.crc32(prefix.encode())
    files = {f"{prefix}/{i}": payload(FILE_BYTES, seed + i) for i in range(count)}
    for path, data in files.items():
        await client.write_file(path, data, replication=replication)
    return files


def _held_by_both(ha: HaCluster, tmp_path: Path, block_id: int) -> bool:
    return len([d for d in ha.datanodes if replica_files(tmp_path / d, block_id)]) == 2


async def block_ids(client: AsyncClient, paths: list[str]) -> list[int]:
    return [b.block.block_id for path in paths
            for b in (await client.block_locations(path)).blocks]


async def all_readable(client: AsyncClient, files: dict[str, bytes]) -> bool:
    try:
        return all([await client.read_file(path) == data for path, data in files.items()])
    except XdfsError:  # replicas are being reported to the new NameNode
        return False


async def backup_caught_up(ha: HaCluster, client: AsyncClient) -> None:
    synced = (await client.status()).synced_txid
    await eventually(lambda: _synced_at_least(ha.backup_address, synced),
                     what="the backup catching up")


async def _synced_at_least(address: str, txid: int) -> bool:
    return (await backup_status(address)).synced_txid >= txid


# -- item 1: fencing -----------------------------------------------------------------------


@pytest.mark.parametrize("method", ["kill", "shell"])
async def test_paused_namenode_is_fenced_and_no_acknowledged_block_is_lost(
    tmp_path: Path, method: str
) -> None:
    with ProcessGroup(tmp_path / "procs") as group:
        ha = HaCluster(group, tmp_path)
        nn = await asyncio.to_thread(ha.start_namenode)
        fence = (f"kill({ha.name_dir})" if method == "kill" else
                 "shell(kill -9 $target_pid && echo fenced $target_host:$target_port)")
        backup = await asyncio.to_thread(ha.start_backup, fence)
        for name in ("dn0", "dn1"):
            await asyncio.to_thread(ha.start_datanode, name)
        async with ha.client() as client:
            await eventually(lambda: writable_with(client, 2), what="two live DataNodes")
            before = await write_files(client, "/before", 6)
            kept = await block_ids(client, list(before))
            await backup_caught_up(ha, client)
            os.kill(nn.pid, signal.SIGSTOP)  # alive, silent: the split-brain setup
            promote = await run_xdfs("admin", "-transitionToActive", "--backup",
                                     ha.backup_address)
            assert promote.returncode == 0, promote.stderr
            assert f"fenced by {fence}" in promote.stdout and "epoch 2" in promote.stdout
            os.kill(nn.pid, signal.SIGCONT)  # too late: it is dead (or a zombie)
            assert nn.proc is not None
            assert await asyncio.to_thread(nn.proc.wait, 30) == -signal.SIGKILL
            if method == "shell":
                assert f"fencing command: fenced {ha.nn_address}" in backup.log_text()
            await eventually(lambda: writable_with(client, 2), what="DataNodes at the new one")
            after = await write_files(client, "/after", 6)
            everything = {**before, **after}
            await eventually(lambda: all_readable(client, everything), what="every file read")
        assert DELETED not in ha.datanode_logs()  # nothing acknowledged was deleted
        # Every block written before the takeover is on both DataNodes. (A write that
        # began while a DataNode had not yet installed the block keys of its registration
        # went on with one replica, as a pipeline does; the active then copies it.)
        for block_id in kept:
            await eventually(partial(_held_by_both, ha, tmp_path, block_id),
                             what=f"block {block_id} on both DataNodes")


@pytest.mark.parametrize("methods", [(), ("shell(false)",)])
async def test_takeover_refused_without_working_fence_and_the_paused_namenode_serves_on(
    tmp_path: Path, methods: tuple[str, ...]
) -> None:
    with ProcessGroup(tmp_path / "procs") as group:
        ha = HaCluster(group, tmp_path)
        nn = await asyncio.to_thread(ha.start_namenode)
        await asyncio.to_thread(ha.start_backup, *methods)
        async with ha.client(ha.nn_address) as client:
            await client.mkdirs("/before")
            await backup_caught_up(ha, client)
            os.kill(nn.pid, signal.SIGSTOP)
            promote = await run_xdfs("admin", "-transitionToActive", "--backup",
                                     ha.backup_address)
            os.kill(nn.pid, signal.SIGCONT)
            assert promote.returncode == 1
            [line] = promote.stderr.strip().splitlines()  # one line, no traceback
            assert "TakeoverRefused" in line
            reason = "shell(false): exit status 1" if methods else "no fencing method"
            assert reason in line, line
            await client.mkdirs("/after")  # the NameNode was only paused: it serves on
            assert (await client.stat("/after")).is_dir
        assert nn.alive()
        assert (await backup_status(ha.backup_address)).state == "following"


async def test_datanode_fails_over_when_its_namenode_pauses(tmp_path: Path) -> None:
    """Heartbeats to a SIGSTOPped NameNode time out (its TCP connection stays open): the
    DataNode moves to its next address as if the connection had broken."""
    with ProcessGroup(tmp_path / "procs") as group:
        ha = HaCluster(group, tmp_path)
        nn = await asyncio.to_thread(ha.start_namenode)
        # a fence that succeeds without killing (as cutting the network would)
        await asyncio.to_thread(ha.start_backup, "shell(true)")
        dn = await asyncio.to_thread(ha.start_datanode, "dn0")
        async with ha.client(ha.nn_address) as client:
            await eventually(lambda: writable_with(client, 1), what="the DataNode registered")
        os.kill(nn.pid, signal.SIGSTOP)
        promote = await run_xdfs("admin", "-transitionToActive", "--backup", ha.backup_address)
        assert promote.returncode == 0, promote.stderr
        async with ha.client(ha.backup_address) as promoted:
            await eventually(lambda: writable_with(promoted, 1), timeout_s=60,
                             what="the DataNode registered with the promoted backup")
        assert nn.alive() and dn.alive()  # still paused, its connection still open


# -- item 2: epochs and restarts ---------------------------------------------------------


async def test_datanode_with_a_higher_epoch_never_obeys_the_old_namenode(
    tmp_path: Path,
) -> None:
    with ProcessGroup(tmp_path / "procs") as group:
        ha = HaCluster(group, tmp_path)
        port = free_port()
        nn = await asyncio.to_thread(ha.start_namenode, address=f"127.0.0.1:{port}")
        backup = await asyncio.to_thread(ha.start_backup, f"kill({ha.name_dir})")
        for name in ("dn0", "dn1"):
            await asyncio.to_thread(ha.start_datanode, name)
        async with ha.client() as client:
            await eventually(lambda: writable_with(client, 2), what="two live DataNodes")
            await write_files(client, "/x", 1, replication=1)
            [block_id] = await block_ids(client, ["/x/0"])
            await backup_caught_up(ha, client)
            nn.kill()
            promote = await run_xdfs("admin", "-transitionToActive", "--backup",
                                     ha.backup_address)
            assert promote.returncode == 0, promote.stderr
            await eventually(lambda: writable_with(client, 2), what="DataNodes at the new one")
            # the new NameNode wants two replicas; the old one would call one of them excess
            await client.set_replication("/x/0", 2)
            await eventually(lambda: all(replica_files(tmp_path / d, block_id)
                                         for d in ha.datanodes), what="the second replica")
        for name in ha.datanodes:
            assert (tmp_path / name / "current" / "active_epoch").read_text() == "2\n"
        # told of its peer, the old name dir refuses to become active at all
        refused = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "xdfs", "-D", f'namenode.peers=["{ha.backup_address}"]',
             "namenode", "--name-dir", str(ha.name_dir), "--rpc-address", "127.0.0.1:0"],
            env={**os.environ, **ENV}, capture_output=True, text=True, timeout=120)
        assert refused.returncode == 1
        last = refused.stderr.strip().splitlines()[-1]
        assert last.startswith("namenode cannot start: Fenced: refusing to become active: "
                               f"peer {ha.backup_address} (active) is ahead: epoch 2"), last
        assert "Traceback" not in refused.stderr
        assert backup.terminate() == 0
        ha.datanodes["dn1"].kill()  # restarted below: the epoch it saw survives
        # the old name dir comes back at the old address, epoch 1, out of safe mode at once
        old = await asyncio.to_thread(
            ha.start_namenode, "-D", "namenode.safe_mode_threshold=0",
            address=f"127.0.0.1:{port}")
        await asyncio.to_thread(ha.start_datanode, "dn1")
        await eventually(lambda: all(NOT_OBEYED in p.log_text() for p in ha.datanodes.values()),
                         what="both DataNodes refusing the old NameNode")
        await asyncio.sleep(3.0)  # ten heartbeat intervals of the old NameNode
        async with ha.client(ha.nn_address) as stale:
            report = await stale.datanode_report()
        # registered (the DataNodes judge its answer after it), never told a single replica
        assert report.blocks == 1 and all(node.blocks == 0 for node in report.nodes)
        assert old.alive()
        assert DELETED not in ha.datanode_logs()
        assert all(replica_files(tmp_path / d, block_id) for d in ha.datanodes)


def test_dev_restart_after_a_takeover_starts_the_promoted_name_dir(tmp_path: Path) -> None:
    base = tmp_path / "dev"
    conf = tmp_path / "fast.toml"
    conf.write_text(
        "[namenode]\nheartbeat_interval_s = 0.3\nreplication_check_interval_s = 0.3\n"
        "safe_mode_extension_s = 0.5\n[datanode]\nnamenode_call_timeout_s = 1.5\n"
        "namenode_retry_max_s = 0.5\n[backupnode]\nfetch_wait_s = 0.2\n"
    )
    dev_args = ["--conf", str(conf), "dev", "--base-dir", str(base), "--port", "0",
                "--datanodes", "2", "--backup"]
    with ProcessGroup(tmp_path / "procs") as group:
        dev = group.start_xdfs("dev", *dev_args, ready_pattern=r"xdfs dev cluster ready",
                               deadline_s=120, env=ENV)
        listing = json.loads((base / "cluster.json").read_text())
        by_role = {p["role"]: p for p in listing["processes"]}
        files = asyncio.run(_dev_takeover_and_writes(base, by_role))
        assert json.loads((base / "dev-state.json").read_text()) == {
            "active": "backupnode", "fenced": "namenode"}
        assert dev.proc is not None
        dev.proc.send_signal(signal.SIGTERM)
        assert dev.proc.wait(60) == 0
        again = group.start_xdfs("dev2", *dev_args, ready_pattern=r"xdfs dev cluster ready",
                                 deadline_s=120, env=ENV)
        assert "namenode was fenced by a takeover; kept as namenode.fenced-1" in again.log_text()
        assert (base / "namenode.fenced-1" / "current").is_dir()
        asyncio.run(_dev_all_there(base, files))
        assert again.proc is not None
        again.proc.send_signal(signal.SIGTERM)
        assert again.proc.wait(60) == 0
    logs = "".join(p.read_text() for p in (base / "logs").glob("datanode*.log"))
    assert DELETED not in logs and "registered with NameNode" in logs


def _dev_client(base: Path) -> AsyncClient:
    client = read_toml(base / "client.toml")["client"]
    return AsyncClient(client["fs"], user=client["user"], password=client["password"],
                       token="", config=XdfsConfig())


async def _dev_takeover_and_writes(base: Path, by_role: dict[str, dict[str, object]]
                                   ) -> dict[str, bytes]:
    env_conf = {**os.environ, "XDFS_CONF": str(base / "client.toml")}
    backup_address = str(by_role["backupnode"]["address"])
    async with _dev_client(base) as client:
        await eventually(lambda: writable_with(client, 2), what="the dev cluster writable")
        files = await write_files(client, "/early", 20)
        synced = (await client.status()).synced_txid
        await eventually(lambda: _synced_at_least(backup_address, synced), what="caught up")
        os.kill(int(str(by_role["namenode"]["pid"])), signal.SIGSTOP)
        promote = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "xdfs", "admin", "-transitionToActive",
                             "--backup", backup_address],
            env=env_conf, capture_output=True, text=True, timeout=120)
        assert promote.returncode == 0, promote.stderr
        await eventually((base / "dev-state.json").exists, what="dev noticing it")
        await eventually(lambda: writable_with(client, 2), what="DataNodes at the new one")
        files.update(await write_files(client, "/late", 20))
    return files


async def _dev_all_there(base: Path, files: dict[str, bytes]) -> None:
    async with _dev_client(base) as client:
        await eventually(lambda: writable_with(client, 2), timeout_s=60,
                         what="the restarted cluster")
        await eventually(lambda: all_readable(client, files), what="every file after restart")
        assert len(await client.list_dir("/early")) == len(await client.list_dir("/late")) == 20
