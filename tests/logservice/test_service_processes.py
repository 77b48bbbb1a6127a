"""The log service as real processes: truncation and reclamation across kill -9 of every
process, registered readers holding reclamation back, the CLI, and bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.logservice.cluster import LogCluster
from xdfs.common.process import ProcessGroup
from xdfs.config import write_toml
from xdfs.errors import BadRecord, InvalidArgument, LogExists, LogNotFound, LsnOutOfRange
from xdfs.protocol.log import LSN_ZERO, LogSettings, Lsn, Record
from xdfs.testing.poll import eventually


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LogCluster]:
    with ProcessGroup(tmp_path) as group:
        yield LogCluster(tmp_path, group, service_count=1, storage_count=3,
                         extra=["-D", "logservice.reclaim_interval_s=0.3"]).start()


def ledger_files(cluster: LogCluster) -> set[str]:
    return {p.name for p in cluster.base.glob("sn*/ledger.d/*.ledger")}


async def test_truncation_survives_kill_9_of_every_process_and_respects_readers(
        cluster: LogCluster) -> None:
    async with cluster.client() as client:
        await client.create("t", LogSettings(ledger_entries_max=10))
        lsns = [await client.append("t", f"r{i}") for i in range(45)]
        await client.register_reader("t", "backup", lsns[5])
        assert await client.truncate("t", lsns[32]) == lsns[32]
    before = ledger_files(cluster)
    # kill -9 everything in the middle of whatever reclamation was doing; start again
    for proc in [*cluster.services.values(), *cluster.storage.values()]:
        proc.kill()
    cluster.zookeeper.kill()
    cluster.start_zookeeper()
    for index in range(cluster.storage_count):
        cluster.start_storage(index)
    cluster.start_service(0)
    async with cluster.client() as client:
        assert await client.truncated_lsn("t") == lsns[32]
        with pytest.raises(LsnOutOfRange):
            await client.read("t", lsns[31])
        # the registered reader still reads what it needs, from its position on
        records, _ = await client.read("t", lsns[5], reader="backup")
        assert [r.record.payload for r in records] == [f"r{i}".encode() for i in range(5, 45)]
        with pytest.raises(LsnOutOfRange):
            await client.read("t", lsns[4], reader="backup")
        records, _ = await client.read("t", lsns[32])
        assert [r.record.payload for r in records] == [f"r{i}".encode() for i in range(32, 45)]
        assert ledger_files(cluster) == before  # the reader at lsns[5] holds everything
        await client.register_reader("t", "backup", None)
        # ledgers wholly below the truncation point go, in the background; the rest stay

        async def reclaimed() -> bool:  # 10 entries a ledger: the 3 below 32 go
            return (await client.stat("t")).ledgers <= 3

        await eventually(reclaimed, timeout_s=60.0, what="the truncated ledgers reclaimed")
        assert len(ledger_files(cluster)) < len(before)
        records, _ = await client.read("t", lsns[32])
        assert len(records) == 13


async def test_a_crash_between_deleting_ledgers_and_forgetting_them_is_harmless(
        cluster: LogCluster) -> None:
    """The instance is killed (fault point) after the reclaimed ledgers are deleted on
    every node and before the metadata forgets them: after the restart the truncation
    point is the same, nothing below it is read, and the next pass finishes the job."""
    async with cluster.client() as client:
        await client.create("c", LogSettings(ledger_entries_max=10))
        lsns = [await client.append("c", f"r{i}") for i in range(35)]
        doomed = (await client.stat("c")).ledger_ids[:2]  # entries 0-9 and 10-19
        cluster.services[0].kill()
        cluster.start_service(0, faults="logservice.reclaim_deleted=kill")
        await client.truncate("c", lsns[25])  # ledgers of entries 0-9, 10-19 may go
        await eventually(lambda: not cluster.services[0].alive(), timeout_s=60.0,
                         what="the instance killed at the fault point")
        assert len(ledger_files(cluster)) < 3 * 4  # deleted on the nodes ...
        cluster.start_service(0)
        assert await client.truncated_lsn("c") == lsns[25]  # ... the point unchanged
        with pytest.raises(LsnOutOfRange):
            await client.read("c", lsns[24])
        records, _ = await client.read("c", lsns[25])
        assert [r.record.payload for r in records] == [f"r{i}".encode() for i in range(25, 35)]

        async def forgotten() -> bool:
            return not set(doomed) & set((await client.stat("c")).ledger_ids)

        await eventually(forgotten, timeout_s=60.0, what="the metadata forgets them")


async def test_bad_input_gets_typed_errors(cluster: LogCluster) -> None:
    async with cluster.client() as client:
        await client.create("b")
        with pytest.raises(LogExists):
            await client.create("b")
        for name in ("../x", "", "a/b", "x" * 200, ".hidden"):
            with pytest.raises(InvalidArgument):
                await client.create(name)
        with pytest.raises(InvalidArgument):
            await client.create("q", LogSettings(ack_quorum=5))
        with pytest.raises(LogNotFound):
            await client.append("missing", "x")
        with pytest.raises(BadRecord):
            await client.append("b", Record(b"x", attributes=0x40))
        lsn = await client.append("b", "x")
        with pytest.raises(LsnOutOfRange):
            await client.read("b", Lsn(lsn.ledger_id, 5, 0))
        with pytest.raises(LsnOutOfRange):
            await client.truncate("b", Lsn(lsn.ledger_id + 1, 0, 0))
        with pytest.raises(InvalidArgument):
            await client.tso(0)
        records, _ = await client.read("b", LSN_ZERO)  # the service is still fine
        assert [r.record.payload for r in records] == [b"x"]


def test_the_log_cli(cluster: LogCluster, tmp_path: Path) -> None:
    conf = tmp_path / "client.toml"
    write_toml(conf, {"client": {"logservice": ",".join(cluster.service_addresses),
                                 "logservice_password": cluster.secret.read_text().strip()}})
    env = {**os.environ, "XDFS_CONF": str(conf)}

    def xdfs(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "xdfs", "log", *args], env=env,
                              input=stdin, capture_output=True, text=True, timeout=120)

    assert xdfs("create", "c").returncode == 0
    appended = xdfs("append", "c", "one", "two")
    assert appended.returncode == 0 and len(appended.stdout.split()) == 2
    assert xdfs("append", "c", stdin="three\nfour\n").returncode == 0
    read = xdfs("read", "c", "--no-lsn")
    assert read.stdout.split() == ["one", "two", "three", "four"]
    assert xdfs("tail", "-n", "2", "c").stdout.split() == ["three", "four"]
    assert "c" in xdfs("list").stdout.split()
    truncated = xdfs("truncate", "c", appended.stdout.split()[1])
    assert truncated.returncode == 0
    assert xdfs("read", "c", "--no-lsn").stdout.split() == ["two", "three", "four"]
    assert "truncated below" in xdfs("stat", "c").stdout
    bad = xdfs("read", "nope")
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "LogNotFound" in bad.stderr
    bad = xdfs("read", "c", "--from", "x")
    assert bad.returncode == 1 and "Traceback" not in bad.stderr


async def test_open_writer_fences_the_previous_writer(cluster: LogCluster) -> None:
    async with cluster.client() as client:
        await client.create("w")
        first = await client.append("w", "before")
        epoch = (await client.stat("w")).writer_epoch
        assert await client.open_writer("w") == epoch + 1
        after = await client.append("w", "after")
        assert after > first and after.ledger_id > first.ledger_id  # a new ledger
        records, _ = await client.read("w", LSN_ZERO)
        assert [r.record.payload for r in records] == [b"before", b"after"]
