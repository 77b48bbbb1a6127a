"""The BackupNode as a real process: SIGKILLed mid-replay and mid-upload, and promoted with
``xdfs admin -transitionToActive`` after its NameNode process was SIGKILLed under load."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from xdfs.client.client import AsyncClient
from xdfs.common.process import ProcessGroup, ServerProcess
from xdfs.config import XdfsConfig
from xdfs.errors import Unavailable
from xdfs.namenode.editlog.editlog import read_edits
from xdfs.namenode.image.recovery import load_namespace
from xdfs.namenode.image.storage import StorageDirectory
from xdfs.namenode.namespace.ops import MkdirOp
from xdfs.namenode.namespace.tree import Namespace
from xdfs.protocol.backup import BACKUP_STATUS, BackupStatus
from xdfs.rpc.messages import Empty
from xdfs.testing.lazyfs import CrashSite
from xdfs.testing.minicluster import MiniCluster
from xdfs.testing.poll import eventually

from .conftest import ROOT, ROOT_PW, backup_config, canonical_dump, connect

pytestmark = pytest.mark.slow

ENV = {"XDFS_USER": ROOT, "XDFS_PASSWORD": ROOT_PW}
BACKUP_FAST = ["-D", "backupnode.fetch_wait_s=0.2",
               "-D", "backupnode.checkpoint_check_interval_s=0.2",
               "-D", "rpc.retry_backoff_max_s=0.2"]


def start_backup(group: ProcessGroup, base: Path, namenode: str, *extra: str,
                 faults: str = "", address: str = "127.0.0.1:0") -> ServerProcess:
    env = {**ENV, "XDFS_FAULTS": faults} if faults else ENV
    return group.start_xdfs(
        "backup", *BACKUP_FAST, *extra, "backupnode", "--name-dir", str(base / "backup"),
        "--namenode", namenode, "--rpc-address", address,
        ready_pattern=r"backupnode serving on (\S+)", env=env,
    )


def fencing(*methods: str) -> list[str]:
    """The -D option configuring a backup's fencing methods."""
    return ["-D", "backupnode.fencing_methods=" + json.dumps(list(methods))]


def address_of(proc: ServerProcess) -> str:
    assert proc.match is not None
    return proc.match.group(1)


async def backup_status(address: str) -> BackupStatus:
    async with connect(address) as client:
        return await client.rpc.call(BACKUP_STATUS, Empty())


def offline_dump(name_dir: Path) -> list[object]:
    """The namespace a stopped server left in ``name_dir`` (image + edits), canonically."""
    with StorageDirectory(name_dir) as sd:
        namespace, _ = load_namespace([sd], Namespace)
    return canonical_dump(namespace)


async def test_backup_killed_mid_replay_resumes_from_its_own_state(
    minicluster: MiniCluster, tmp_path: Path, crash_site: CrashSite
) -> None:
    """Also on the power-loss layer (``crash_site``): the power goes when the backup dies."""
    nn = await minicluster.start_namenode(config=backup_config())
    base = crash_site.root
    async with connect(nn.address) as client:
        for i in range(20):
            await client.mkdirs(f"/early/{i}")
        with ProcessGroup(tmp_path / "procs") as group:
            # Dies after applying a batch, before making it durable: never acknowledged.
            # (started from a thread: the in-process NameNode must keep serving meanwhile)
            proc = await asyncio.to_thread(start_backup, group, base, nn.address,
                                           faults="backup.replayed_not_synced=kill")
            await eventually(lambda: not proc.alive(), what="the backup killing itself")
            await asyncio.to_thread(crash_site.crash, proc)
            for i in range(20):
                await client.mkdirs(f"/late/{i}")
            proc = await asyncio.to_thread(start_backup, group, base, nn.address)
            status = await eventually(
                lambda: _caught_up(address_of(proc), nn.edits.synced_txid),  # type: ignore[union-attr]
                what="the restarted backup catching up")
            assert status.bootstraps == 0  # its own image (fetched at first start) and edits
            assert await asyncio.to_thread(proc.terminate) == 0
        assert nn.fs is not None
        assert offline_dump(base / "backup") == canonical_dump(nn.fs.ns)


async def test_backup_synced_txid_survives_a_crash(
    minicluster: MiniCluster, tmp_path: Path, crash_site: CrashSite
) -> None:
    """What the backup acknowledged as synced (its status, what a takeover relies on) is on
    its disk after a crash, a power cut included, and it restarts from it."""
    nn = await minicluster.start_namenode(config=backup_config())
    assert nn.edits is not None and nn.fs is not None
    base = crash_site.root
    async with connect(nn.address) as client:
        with ProcessGroup(tmp_path / "procs") as group:
            proc = await asyncio.to_thread(start_backup, group, base, nn.address)
            for i in range(30):
                await client.mkdirs(f"/acked/{i}")
            status = await eventually(
                lambda: _caught_up(address_of(proc), nn.edits.synced_txid),  # type: ignore[union-attr]
                what="the backup catching up")
            await asyncio.to_thread(crash_site.crash, proc)
            with StorageDirectory(base / "backup") as sd:
                _namespace, last_txid = load_namespace([sd], Namespace)
            assert last_txid >= status.synced_txid
            assert offline_dump(base / "backup") == canonical_dump(nn.fs.ns)
            proc = await asyncio.to_thread(start_backup, group, base, nn.address)
            status = await backup_status(address_of(proc))
            assert status.bootstraps == 0 and status.synced_txid >= last_txid
            assert await asyncio.to_thread(proc.terminate) == 0


async def _caught_up(address: str, txid: int) -> BackupStatus | None:
    status = await backup_status(address)
    return status if status.synced_txid == txid else None


def _files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def _no_partial_images(directory: Path) -> None:
    names = _files(directory)
    assert not _partial_images(directory), names
    for name in names:
        if name.startswith("fsimage_") and not name.endswith(".md5"):
            assert f"{name}.md5" in names, names


def _partial_images(directory: Path) -> list[str]:
    return [n for n in _files(directory) if n.startswith("fsimage.ckpt") or n.endswith(".tmp")]


@pytest.mark.parametrize("fault", ["image_transfer.chunk_sent", "backup.checkpoint_saved"])
async def test_backup_killed_mid_checkpoint_leaves_no_half_image_and_uploads_after_restart(
    minicluster: MiniCluster, tmp_path: Path, fault: str
) -> None:
    nn = await minicluster.start_namenode(config=backup_config())
    async with connect(nn.address) as client:
        for i in range(60):
            await client.mkdirs(f"/ckpt/{i}")
        with ProcessGroup(tmp_path / "procs") as group:
            proc = await asyncio.to_thread(
                start_backup, group, tmp_path, nn.address, "-D", "backupnode.checkpoint_txns=50",
                faults=f"{fault}=kill")
            await eventually(lambda: not proc.alive(), what=f"the backup dying at {fault}")
            # The NameNode deletes the partial upload once it sees the connection drop.
            await eventually(lambda: not _partial_images(nn.dirs[0].current),
                             what="the NameNode dropping the interrupted upload")
            assert nn.image_txid == 0
            _no_partial_images(nn.dirs[0].current)
            _no_partial_images(tmp_path / "backup" / "current")
            proc = await asyncio.to_thread(start_backup, group, tmp_path, nn.address,
                                           "-D", "backupnode.checkpoint_txns=50")
            await eventually(lambda: nn.image_txid >= 60, what="the checkpoint installed")
            assert await asyncio.to_thread(proc.terminate) == 0
        _no_partial_images(nn.dirs[0].current)
        _no_partial_images(tmp_path / "backup" / "current")


async def run_xdfs(*args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "xdfs", *args], env={**os.environ, **ENV},
        capture_output=True, text=True, timeout=60,
    )


def _start_namenode(group: ProcessGroup, base: Path) -> ServerProcess:
    name_dir = base / "nn"
    subprocess.run(
        [sys.executable, "-m", "xdfs", "namenode", "--name-dir", str(name_dir), "-format"],
        env={**os.environ, **ENV}, check=True, capture_output=True, timeout=120,
    )
    return group.start_xdfs("nn", "namenode", "--name-dir", str(name_dir), "--rpc-address",
                            "127.0.0.1:0", ready_pattern=r"namenode serving on (\S+)", env=ENV)


async def _mkdir_load(client: AsyncClient, worker: int, acked: list[str],
                      stop: asyncio.Event) -> None:
    i = 0
    while not stop.is_set():
        path = f"/load/w{worker}/d{i}"
        try:
            await client.mkdirs(path)
        except Unavailable:
            return  # the NameNode is gone
        acked.append(path)
        i += 1


def _mkdirs_on_disk(name_dir: Path, up_to: int) -> dict[str, int]:
    """Directory path -> txid of the MkdirOps in a NameNode's own edits (up to ``up_to``)."""
    return {op.path: txid for txid, op in read_edits([name_dir], 1, None)
            if isinstance(op, MkdirOp) and txid <= up_to}


async def test_namenode_killed_under_load_backup_promoted_keeps_every_pulled_edit(
    tmp_path: Path,
) -> None:
    with ProcessGroup(tmp_path / "procs") as group:
        nn = _start_namenode(group, tmp_path)
        backup = start_backup(group, tmp_path, address_of(nn), *fencing(f"kill({tmp_path / 'nn'})"))
        both = [address_of(nn), address_of(backup)]
        config = XdfsConfig()
        clients = [connect(*both, config=config) for _ in range(4)]
        acked: list[str] = []
        stop = asyncio.Event()
        # Phase 1: load, then quiesce: with the backup caught up, nothing acked can be lost.
        workers = [asyncio.ensure_future(_mkdir_load(c, i, acked, stop))
                   for i, c in enumerate(clients)]
        await asyncio.sleep(1.0)
        stop.set()
        await asyncio.gather(*workers)
        quiesced = list(acked)
        status = await clients[0].status()
        await eventually(lambda: _caught_up(address_of(backup), status.synced_txid),
                         what="the backup catching up")
        report = await run_xdfs("admin", "-fs", f"xdfs://{address_of(nn)}", "-report")
        assert f"Backup node:                {address_of(backup)}" in report.stdout
        # Phase 2: load again and SIGKILL the NameNode in the middle of it.
        stop = asyncio.Event()
        workers = [asyncio.ensure_future(_mkdir_load(c, i + 10, acked, stop))
                   for i, c in enumerate(clients)]
        await asyncio.sleep(1.0)
        nn.kill()
        await asyncio.gather(*workers)
        pulled = (await backup_status(address_of(backup))).synced_txid
        promote = await run_xdfs("admin", "-fs", f"xdfs://{address_of(backup)}",
                                 "-transitionToActive", "--backup", address_of(backup))
        assert promote.returncode == 0, promote.stderr
        assert "is now the active NameNode" in promote.stdout
        on_disk = _mkdirs_on_disk(tmp_path / "nn", 10**12)  # the dead NameNode's own log
        # Every acknowledged mkdir was durable on the NameNode ...
        assert set(acked) <= set(on_disk)
        survivor = clients[0]  # ... and the backup serves exactly the prefix it pulled.
        present = {f"/load/{w.path.rsplit('/', 1)[-1]}/{d.path.rsplit('/', 1)[-1]}"
                   for w in await survivor.list_dir("/load")
                   for d in await survivor.list_dir(w.path)}
        expected = {p for p, txid in on_disk.items() if txid <= pulled and p.count("/") == 3}
        assert present == expected
        assert set(quiesced) <= present  # acked while the backup had caught up: all kept
        lost = [p for p in acked if p not in present]
        assert all(on_disk[p] > pulled for p in lost)  # only what was never pulled
        await survivor.mkdirs("/after-takeover")  # clients with both addresses go on
        for c in clients:
            await c.close()
        report = await run_xdfs("admin", "-fs", f"xdfs://{address_of(backup)}", "-report")
        assert report.returncode == 0, report.stderr
        assert backup.terminate() == 0


def test_dev_cluster_with_backup_survives_namenode_kill(tmp_path: Path) -> None:
    base = tmp_path / "dev"
    with ProcessGroup(tmp_path / "procs") as group:
        dev = group.start_xdfs(
            "dev", "dev", "--base-dir", str(base), "--port", "0", "--datanodes", "1",
            "--backup", ready_pattern=r"xdfs dev cluster ready: (\S+)", deadline_s=120, env=ENV,
        )
        listing = json.loads((base / "cluster.json").read_text())
        by_role = {p["role"]: p for p in listing["processes"]}
        assert sorted(by_role) == ["backupnode", "datanode", "namenode"]
        assert listing["fs"].count(",") == 1  # NameNode first, backup second
        env = {**os.environ, "XDFS_CONF": str(base / "client.toml")}

        def xdfs(*args: str) -> subprocess.CompletedProcess[bytes]:
            return subprocess.run([sys.executable, "-m", "xdfs", *args], env=env,
                                  capture_output=True, timeout=120)

        local = tmp_path / "hello.txt"
        local.write_bytes(b"kept across the takeover\n" * 100)
        assert xdfs("dfs", "-put", str(local), "/hello.txt").returncode == 0
        backup_address = by_role["backupnode"]["address"]
        deadline = time.monotonic() + 30
        while b"Backup node:" not in xdfs("admin", "-report").stdout:
            assert time.monotonic() < deadline, "admin -report never listed the backup"
            time.sleep(0.2)
        fetched = xdfs("admin", "-fetchImage", str(tmp_path / "image"))
        assert fetched.returncode == 0 and b"Fetched fsimage" in fetched.stdout, fetched.stderr
        assert list((tmp_path / "image").glob("fsimage_*.md5"))
        dumped = xdfs("admin", "-dumpBlockMap", str(tmp_path / "blockmap"))
        assert dumped.returncode == 0 and b"Dumped block map: 1 blocks" in dumped.stdout
        status = xdfs("admin", "-backupStatus", "--backup", backup_address)
        assert status.returncode == 0 and b"following" in status.stdout
        os.kill(by_role["namenode"]["pid"], signal.SIGKILL)
        promote = xdfs("admin", "-transitionToActive", "--backup", backup_address)
        assert promote.returncode == 0, promote.stderr
        deadline = time.monotonic() + 90  # the DataNode re-registers and reports its blocks
        while (cat := xdfs("dfs", "-cat", "/hello.txt")).stdout != local.read_bytes():
            assert time.monotonic() < deadline, cat.stderr
            time.sleep(0.5)
        assert dev.alive()  # the cluster goes on with its promoted backup
        assert dev.proc is not None
        dev.proc.send_signal(signal.SIGTERM)
        assert dev.proc.wait(60) == 0
