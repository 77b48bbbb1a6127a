"""The quorum journal with real processes: three ``xdfs journalnode`` and a NameNode writing
through them, under concurrent mkdir load, with kill -9, SIGSTOP and power cuts.

What must hold: an acknowledged mkdir survives anything here (the NameNode acknowledges
only once a majority of JournalNodes and its local dirs fsynced it); one JournalNode down
is invisible to clients; two down stop the NameNode with one clear line, and a restarted
NameNode with a majority back has every acknowledged edit; a paused NameNode that wakes up
after a new writer took over is fenced at its next write and acknowledges nothing more.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from xdfs.editlog.segments import segment_index
from xdfs.errors import XdfsError
from xdfs.testing.lazyfs import LazyFS
from xdfs.testing.poll import eventually

from .qjm_cluster import ENV, JOURNAL_ID, WORKERS, QjmCluster, make_cluster, running

pytestmark = pytest.mark.slow

@pytest.fixture
def cluster(tmp_path: Path) -> QjmCluster:
    return make_cluster(tmp_path, tmp_path)


@dataclass
class Load:
    """``WORKERS`` tasks making directories, each remembering what was acknowledged."""

    cluster: QjmCluster
    acked: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    progress: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def start(self) -> Load:
        self.tasks = [asyncio.ensure_future(self.worker(i)) for i in range(WORKERS)]
        return self

    async def worker(self, index: int) -> None:
        async with self.cluster.client() as client:
            n = 0
            while not self.stop.is_set():
                path = f"/w{index}/d{n}"
                try:
                    await client.mkdirs(path)
                except XdfsError as exc:
                    self.errors.append(f"{path}: {type(exc).__name__}: {exc.message}")
                    self.progress.set()
                    return
                self.acked.add(path)
                self.progress.set()
                n += 1

    async def until(self, count: int) -> None:
        """Until ``count`` mkdirs were acknowledged in all (or a worker failed)."""
        while len(self.acked) < count and not self.errors:
            self.progress.clear()
            await self.progress.wait()

    async def finish(self) -> None:
        self.stop.set()
        await asyncio.gather(*self.tasks)


async def all_present(cluster: QjmCluster, paths: set[str]) -> list[str]:
    async with cluster.client() as client:
        missing = []
        for path in sorted(paths):
            try:
                await client.stat(path)
            except XdfsError:
                missing.append(path)
        return missing


async def test_one_journalnode_killed_under_load_no_client_notices(
    cluster: QjmCluster, tmp_path: Path
) -> None:
    with running(cluster):
        cluster.start_all(tmp_path / "nn")
        load = Load(cluster).start()
        await load.until(200)
        cluster.journalnodes[1].kill()
        await load.until(len(load.acked) + 300)
        await load.finish()
        assert load.errors == []  # nobody noticed
        assert cluster.namenode is not None
        cluster.namenode.kill()
        cluster.start_namenode(tmp_path / "nn")
        assert await all_present(cluster, load.acked) == []


async def test_two_journalnodes_killed_stop_writes_then_a_majority_resumes_them(
    cluster: QjmCluster, tmp_path: Path
) -> None:
    with running(cluster):
        nn = cluster.start_all(tmp_path / "nn")
        load = Load(cluster).start()
        await load.until(200)
        cluster.journalnodes[0].kill()
        cluster.journalnodes[2].kill()
        await asyncio.wait_for(asyncio.to_thread(nn.proc.wait), 30)  # type: ignore[union-attr]
        await load.finish()
        assert load.errors, "writes went on without a majority of JournalNodes"
        stopped = [line for line in nn.log_text().splitlines() if "namenode stopped" in line]
        assert len(stopped) == 1 and "QuorumFailed" in stopped[0], nn.log_text()[-2000:]
        cluster.start_journalnode(2)
        cluster.start_namenode(tmp_path / "nn")
        assert await all_present(cluster, load.acked) == []
        async with cluster.client() as client:  # writes resume
            await client.mkdirs("/after")


async def test_namenode_killed_mid_batch_keeps_every_acknowledged_edit(
    cluster: QjmCluster, tmp_path: Path
) -> None:
    with running(cluster):
        for i in range(3):
            cluster.start_journalnode(i)
        cluster.format(tmp_path / "nn")
        acked: set[str] = set()
        for round_ in range(4):
            cluster.start_namenode(tmp_path / "nn")
            assert await all_present(cluster, acked) == [], f"round {round_}"
            load = Load(cluster).start()
            await load.until(100 + 50 * round_)
            assert cluster.namenode is not None
            cluster.namenode.kill()  # mid-batch: the load never pauses
            await load.finish()
            acked |= load.acked
        cluster.start_namenode(tmp_path / "nn")
        assert await all_present(cluster, acked) == []


async def test_a_paused_namenode_is_fenced_when_another_takes_over(
    cluster: QjmCluster, tmp_path: Path
) -> None:
    with running(cluster):
        for i in range(3):
            cluster.start_journalnode(i)
        cluster.format(tmp_path / "nn1")
        old = cluster.start_namenode(tmp_path / "nn1", "nn1")
        old_address = cluster.address
        async with cluster.client() as client:
            await client.mkdirs("/before")
        shutil.copytree(tmp_path / "nn1", tmp_path / "nn2", ignore=shutil.ignore_patterns(
            "in_use.lock"))
        os.kill(old.pid, signal.SIGSTOP)
        try:
            cluster.start_namenode(tmp_path / "nn2", "nn2")  # a new epoch fences nn1
            async with cluster.client() as client:
                await client.mkdirs("/after-takeover")
        finally:
            os.kill(old.pid, signal.SIGCONT)
        cluster.address = old_address
        async with cluster.client() as client:
            with pytest.raises(XdfsError):
                await client.mkdirs("/split-brain")
        await asyncio.wait_for(asyncio.to_thread(old.proc.wait), 30)  # type: ignore[union-attr]
        assert "Fenced" in old.log_text()
        cluster.address = cluster.namenode.match.group(1)  # type: ignore[union-attr]
        assert await all_present(cluster, {"/before", "/after-takeover"}) == []
        async with cluster.client() as client:
            with pytest.raises(XdfsError):
                await client.stat("/split-brain")


@pytest.mark.powerloss
async def test_a_power_cut_of_the_whole_cluster_keeps_every_acknowledged_edit(
    tmp_path: Path, lazyfs: LazyFS
) -> None:
    """The NameNode's and every JournalNode's storage on the power-loss layer: the power
    goes under load, dropping everything not fsynced on all of them at once."""
    cluster = make_cluster(tmp_path, lazyfs.path)
    name_dir = lazyfs.path / "nn"
    with running(cluster):
        cluster.start_all(name_dir)
        load = Load(cluster).start()
        await load.until(300)
        assert cluster.namenode is not None
        await asyncio.to_thread(lazyfs.power_cut, cluster.namenode,
                                *cluster.journalnodes.values())
        await load.finish()
        for i in range(3):
            cluster.start_journalnode(i)
        cluster.start_namenode(name_dir)
        assert await all_present(cluster, load.acked) == []


def finalized_files(journal_dir: Path) -> dict[str, bytes]:
    current = journal_dir / JOURNAL_ID / "current"
    return {info.name: info.path.read_bytes() for info in segment_index(current)
            if not info.in_progress}


async def test_a_replaced_journalnode_rejoins_and_fetches_what_it_missed(
    cluster: QjmCluster, tmp_path: Path
) -> None:
    """A JournalNode's disk dies under load: it comes back empty, is formatted by the
    writer at the next segment and fills in every older finalized segment from a peer,
    byte for byte what the others hold."""
    cluster.extra = ["-D", "journalnode.sync_interval_s=0.3",
                     "-D", "namenode.edits_segment_txns_max=60"]
    with running(cluster):
        cluster.start_all(tmp_path / "nn")
        load = Load(cluster).start()
        await load.until(150)
        cluster.journalnodes[2].kill()
        await load.until(400)
        shutil.rmtree(cluster.base / "jn2")  # the disk is replaced
        cluster.start_journalnode(2)
        await load.until(600)  # several segment rolls: the node is formatted and rejoins
        await load.finish()
        assert load.errors == []
        healthy = cluster.base / "jn0"
        await eventually(lambda: set(finalized_files(healthy)) <= set(
            finalized_files(cluster.base / "jn2")), timeout_s=60)
        theirs, mine = finalized_files(healthy), finalized_files(cluster.base / "jn2")
        assert all(mine[name] == data for name, data in theirs.items())
        assert "formatted it" in cluster.namenode.log_text()  # type: ignore[union-attr]


async def test_oev_reads_the_committed_edits_from_the_journalnodes(
    cluster: QjmCluster, tmp_path: Path
) -> None:
    with running(cluster):
        cluster.start_all(tmp_path / "nn")
        async with cluster.client() as client:
            for name in ("x", "y", "z"):
                await client.mkdirs(f"/oev/{name}")
        cluster.journalnodes[0].kill()  # any majority serves the committed edits
        await asyncio.sleep(0.3)  # the writer tells the others the last batch is committed
        result = await asyncio.to_thread(cluster.xdfs, "oev", "-i", cluster.uri)
        assert result.returncode == 0, result.stderr
        paths = [json.loads(line).get("path") for line in result.stdout.splitlines()]
        assert {"/oev/x", "/oev/y", "/oev/z"} <= set(paths)
        bad = await asyncio.to_thread(cluster.xdfs, "-D", "journalnode.secret_file=/nonexistent",
                                      "oev", "-i", cluster.uri)
        assert bad.returncode == 1 and "secret_file" in bad.stderr
        assert "Traceback" not in bad.stderr


def test_a_backupnode_follows_the_journal_and_takes_over_through_its_epoch(
    cluster: QjmCluster, tmp_path: Path
) -> None:
    """With namenode.shared_edits a BackupNode reads committed edits from the JournalNodes
    (not from the NameNode), and its takeover needs no fencing method: the NameNode it
    becomes takes a new journal epoch. Every acknowledged mkdir is there afterwards."""
    with running(cluster):
        cluster.start_all(tmp_path / "nn")
        backup = cluster.group.start_xdfs(
            "backup", *cluster.conf(), "backupnode", "--name-dir", str(tmp_path / "backup"),
            "--namenode", cluster.address, "--rpc-address", "127.0.0.1:0",
            ready_pattern=r"backupnode serving on (\S+)", env=ENV,
        )
        assert backup.match is not None
        backup_address = backup.match.group(1)

        async def mkdirs(prefix: str, count: int) -> list[str]:
            async with cluster.client() as client:
                for i in range(count):
                    await client.mkdirs(f"/{prefix}/{i}")
                status = await client.status()
                assert status.backups == []  # nobody fetched edits from the NameNode
            return [f"/{prefix}/{i}" for i in range(count)]

        acked = asyncio.run(mkdirs("before", 30))
        status = cluster.xdfs("admin", "-backupStatus", "--backup", backup_address)
        assert status.returncode == 0, status.stderr
        asyncio.run(eventually(lambda: _backup_txid(cluster, backup_address) >= 31,
                               timeout_s=60, what="the backup tails the journal"))
        assert cluster.namenode is not None
        cluster.namenode.kill()
        promote = cluster.xdfs("admin", "-transitionToActive", "--backup", backup_address)
        assert promote.returncode == 0, promote.stderr
        assert "fenced by journal epoch" in promote.stdout
        cluster.address = backup_address
        acked += asyncio.run(mkdirs("after", 10))

        async def missing() -> list[str]:
            async with cluster.client() as client:
                return [p for p in acked if not await client.exists(p)]

        assert asyncio.run(missing()) == []


def _backup_txid(cluster: QjmCluster, address: str) -> int:
    result = cluster.xdfs("admin", "-backupStatus", "--backup", address)
    for line in result.stdout.splitlines():
        if line.startswith("Replayed txid:"):
            return int(line.split()[2])
    return 0
