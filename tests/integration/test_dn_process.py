"""``xdfs datanode`` as a real process against a stub NameNode: readiness line, graceful
stop, fatal errors, and SIGKILL in the middle of a block write (by the test, or by the
node itself at a fault point): after a restart no partial replica is ever finalized (its
checksummed prefix stays in rbw for block recovery), and a replica that was finalized is
complete. The crash tests run twice (``crash_site``): also on the power-loss layer, where
the crash is a power cut that drops all not fsynced."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.integration.dn_helpers import (
    GUARD_S,
    StubNameNode,
    read_block,
    replica_files,
    start_stub,
    write_block,
)
from xdfs.common.process import ProcessGroup, ServerProcess
from xdfs.datanode import layout
from xdfs.errors import BlockNotFound, XdfsError
from xdfs.protocol.blocks import BlockRecord
from xdfs.protocol.datanode import WRITE_BLOCK, HeartbeatResponse, WriteBlockRequest
from xdfs.testing.lazyfs import CrashSite
from xdfs.testing.minicluster import MiniCluster
from xdfs.testing.poll import eventually

READY = r"datanode serving on (\S+)"
MiB = 1024 * 1024


def child_env(**extra: str) -> dict[str, str]:
    env = {k: "" for k in os.environ if k.startswith("XDFS_")}  # no stray config
    env.update(XDFS_USER="root", XDFS_PASSWORD="rootpw", **extra)
    return env


async def start_process(
    processes: ProcessGroup, stub: StubNameNode, data_dir: Path, *, faults: str = ""
) -> tuple[ServerProcess, str]:
    extra = {"XDFS_FAULTS": faults} if faults else {}
    proc = ServerProcess.xdfs(
        "datanode", "--data-dir", str(data_dir), "--namenode", stub.address,
        "--rpc-address", "127.0.0.1:0",
        log_path=processes.base_dir / "datanode.log", ready_pattern=READY,
        env=child_env(**extra),
    )
    processes.processes.append(proc)  # SIGKILLed at teardown if still running
    await asyncio.to_thread(proc.start, 60.0)
    assert proc.match is not None
    return proc, proc.match.group(1)


def node_id_of(data_dir: Path) -> str:
    return layout.parse_version((data_dir / "current" / "VERSION").read_text()).node_id


async def wait_for_report(stub: StubNameNode, node_id: str, after: int) -> list[BlockRecord]:
    """The finalized blocks of the first complete full report of ``node_id`` sent after
    the first ``after`` report calls."""
    return (await wait_for_full_report(stub, node_id, after))[0]


async def wait_for_full_report(
    stub: StubNameNode, node_id: str, after: int
) -> tuple[list[BlockRecord], list[BlockRecord]]:
    """(finalized, rbw) replicas of the first complete full report of ``node_id`` sent
    after the first ``after`` report calls."""
    def complete() -> bool:
        batches = [r for r in stub.reports[after:] if r.node_id == node_id]
        return bool(batches) and len(batches) >= batches[0].batch_count

    await eventually(complete)
    batches = [r for r in stub.reports[after:] if r.node_id == node_id]
    first = [b for b in batches if b.report_id == batches[0].report_id]
    return ([block for batch in first for block in batch.blocks],
            [block for batch in first for block in batch.rbw])


async def wait_exit(proc: ServerProcess) -> int:
    assert proc.proc is not None
    return await asyncio.to_thread(proc.proc.wait, GUARD_S)


@pytest.fixture
async def stub(minicluster: MiniCluster) -> StubNameNode:
    return await start_stub(minicluster)


async def test_kill_9_mid_write_never_finalizes_and_keeps_the_checksummed_prefix(
    minicluster: MiniCluster, processes: ProcessGroup, stub: StubNameNode, crash_site: CrashSite
) -> None:
    data_dir = crash_site.root / "dn"
    proc, address = await start_process(processes, stub, data_dir)
    node_id = node_id_of(data_dir)
    await wait_for_report(stub, node_id, 0)
    client = minicluster.client(address)
    whole = os.urandom(MiB + 3)
    kept = (await write_block(client, BlockRecord(1, 1, 0), whole, stub.token(1))).block
    assert kept in stub.received(node_id)
    killed = asyncio.Event()

    async def partial() -> AsyncIterator[bytes]:
        for _ in range(3):
            yield os.urandom(MiB)
        await killed.wait()
        yield os.urandom(MiB)  # fails: the connection is gone

    upload = asyncio.ensure_future(client.upload(
        WRITE_BLOCK, WriteBlockRequest(BlockRecord(2, 1, 0), stub.token(2)), partial()
    ))
    rbw = data_dir / "current" / "rbw"
    meta = rbw / "blk_2_1.meta"
    # at least the first MiB is written and checksummed (16 CRCs after the 16-byte header)
    await eventually(lambda: meta.exists() and meta.stat().st_size >= 16 + 4 * 16)
    await asyncio.to_thread(crash_site.crash, proc)
    killed.set()
    with pytest.raises(XdfsError):
        await upload
    # SIGKILL leaves the partial replica behind; a power cut may take it (never synced)
    assert crash_site.power_loss or replica_files(data_dir)["rbw"]
    blk = data_dir / "current" / "rbw" / "blk_2"
    written = blk.stat().st_size if blk.exists() else 0
    reports = len(stub.reports)
    proc, address = await start_process(processes, stub, data_dir)
    assert node_id_of(data_dir) == node_id
    finalized, partial_replicas = await wait_for_full_report(stub, node_id, reports)
    assert finalized == [kept]
    files = replica_files(data_dir)
    assert files["finalized"] == ["subdir0/subdir0/blk_1", "subdir0/subdir0/blk_1_1.meta"]
    again = minicluster.client(address)
    assert (await read_block(again, kept, stub.token(1, "r")))[1] == whole
    if crash_site.power_loss:  # nothing of the unfinished block was synced: it may be gone
        assert all(r.block_id == 2 and r.genstamp == 1 for r in partial_replicas)
    else:
        # the partial replica stays in rbw for a block recovery, cut to the whole checksum
        # chunks it had written (the default chunk is 64 KiB), never finalized
        (cut,) = partial_replicas
        assert cut.block_id == 2 and cut.genstamp == 1
        assert 0 < cut.num_bytes <= written and cut.num_bytes % (64 * 1024) == 0
        assert files["rbw"] == ["blk_2", "blk_2_1.meta"]
        with pytest.raises(BlockNotFound):  # not readable as a block: it was never finished
            await read_block(again, cut, stub.token(2, "r"))
    assert proc.terminate() == 0


@pytest.mark.parametrize(
    ("point", "finalized"),
    [("datanode.before_finalize", False), ("datanode.after_finalize", True)],
)
# a large replica is finalized by a worker thread; a small one on the event loop, its
# fsyncs through the kernel's AIO (common/aio.py)
@pytest.mark.parametrize("size", [2 * MiB + 1, 200 * 1024 + 1], ids=["large", "small"])
async def test_crash_at_a_finalize_fault_point(
    minicluster: MiniCluster,
    processes: ProcessGroup,
    stub: StubNameNode,
    crash_site: CrashSite,
    point: str,
    finalized: bool,
    size: int,
) -> None:
    data_dir = crash_site.root / "dn"
    proc, address = await start_process(processes, stub, data_dir, faults=f"{point}=kill")
    assert "fault points armed" in proc.log_text()
    node_id = node_id_of(data_dir)
    await wait_for_report(stub, node_id, 0)
    data = os.urandom(size)
    with pytest.raises(XdfsError):  # the node killed itself before answering
        await write_block(minicluster.client(address), BlockRecord(3, 5, 0), data,
                          stub.token(3))
    assert await wait_exit(proc) == -9
    await asyncio.to_thread(crash_site.crash)  # on the power-loss layer: the power goes too
    reports = len(stub.reports)
    proc, address = await start_process(processes, stub, data_dir)
    record = BlockRecord(3, 5, len(data))
    reported = await wait_for_full_report(stub, node_id, reports)
    if finalized:  # durable and whole
        assert reported == ([record], [])
        assert replica_files(data_dir)["rbw"] == []
        got = await read_block(minicluster.client(address), record, stub.token(3, "r"))
        assert got[1] == data
    elif crash_site.power_loss:  # killed before its fsync: whatever was synced, if any
        assert reported[0] == [] and all(r.block_id == 3 for r in reported[1])
    else:  # whole in rbw, never finalized: kept for a block recovery
        assert reported == ([], [record])
        assert replica_files(data_dir)["finalized"] == []
    assert proc.terminate() == 0


def spare_sizes(data_dir: Path) -> list[int]:
    spares = data_dir / "current" / "spares"
    return [entry.stat().st_size for entry in os.scandir(spares)] if spares.exists() else []


async def test_kill_9_mid_take_of_a_spare_leaves_no_phantom_replica(
    minicluster: MiniCluster, processes: ProcessGroup, stub: StubNameNode, crash_site: CrashSite
) -> None:
    """A new replica's file is a spare renamed into rbw/ (datanode/spares.py): killed
    right after that rename, the node restarts with no replica of the block and nothing
    of it in rbw/; the replica written before is whole."""
    data_dir = crash_site.root / "dn"
    proc, address = await start_process(processes, stub, data_dir)
    node_id = node_id_of(data_dir)
    await wait_for_report(stub, node_id, 0)
    client = minicluster.client(address)
    kept_data = os.urandom(200 * 1024)
    kept = (await write_block(client, BlockRecord(1, 1, 0), kept_data, stub.token(1))).block
    assert proc.terminate() == 0
    proc, address = await start_process(processes, stub, data_dir,
                                        faults="datanode.spare_taken=kill")
    await eventually(lambda: len(spare_sizes(data_dir)) >= 2)  # made while idle
    with pytest.raises(XdfsError):  # the node killed itself before answering
        await write_block(minicluster.client(address), BlockRecord(2, 1, 0),
                          os.urandom(200 * 1024), stub.token(2))
    assert await wait_exit(proc) == -9
    await asyncio.to_thread(crash_site.crash)
    reports = len(stub.reports)
    proc, address = await start_process(processes, stub, data_dir)
    assert await wait_for_full_report(stub, node_id, reports) == ([kept], [])
    assert replica_files(data_dir)["rbw"] == []
    assert set(spare_sizes(data_dir)) <= {0}
    got = await read_block(minicluster.client(address), kept, stub.token(1, "r"))
    assert got[1] == kept_data
    assert proc.terminate() == 0


async def test_kill_9_mid_recycle_of_a_deleted_replica(
    minicluster: MiniCluster, processes: ProcessGroup, stub: StubNameNode, crash_site: CrashSite
) -> None:
    """A deleted replica's files are renamed into spares/ and cut to 0 bytes: killed
    between the two, the restarted node reports neither the deleted replica nor keeps
    its bytes (every spare is cut at startup), and the other replica is whole."""
    data_dir = crash_site.root / "dn"
    proc, address = await start_process(processes, stub, data_dir,
                                        faults="datanode.spare_given=kill")
    node_id = node_id_of(data_dir)
    await wait_for_report(stub, node_id, 0)
    client = minicluster.client(address)
    kept_data = os.urandom(300 * 1024)
    kept = (await write_block(client, BlockRecord(1, 1, 0), kept_data, stub.token(1))).block
    await write_block(client, BlockRecord(2, 1, 0), os.urandom(300 * 1024), stub.token(2))
    stub.commands[node_id] = [HeartbeatResponse(delete=[2])]
    assert await wait_exit(proc) == -9
    await asyncio.to_thread(crash_site.crash)
    reports = len(stub.reports)
    proc, address = await start_process(processes, stub, data_dir)
    finalized, rbw = await wait_for_full_report(stub, node_id, reports)
    assert rbw == []
    if crash_site.power_loss:  # the delete was never synced: the replica may be back whole
        assert kept in finalized and {r.block_id for r in finalized} <= {1, 2}
    else:
        assert finalized == [kept]
        assert set(spare_sizes(data_dir)) == {0}
    files = replica_files(data_dir)
    assert "subdir0/subdir0/blk_2" not in files["finalized"] or crash_site.power_loss
    got = await read_block(minicluster.client(address), kept, stub.token(1, "r"))
    assert got[1] == kept_data
    assert proc.terminate() == 0


async def test_sigterm_stops_gracefully(
    processes: ProcessGroup, stub: StubNameNode, tmp_path: Path
) -> None:
    proc, _address = await start_process(processes, stub, tmp_path / "dn")
    await wait_for_report(stub, node_id_of(tmp_path / "dn"), 0)
    assert proc.terminate() == 0
    assert "datanode stopped" in proc.log_text()


async def test_another_clusters_dir_exits_with_a_clear_message(
    processes: ProcessGroup, stub: StubNameNode, tmp_path: Path
) -> None:
    current = tmp_path / "dn" / "current"
    current.mkdir(parents=True)
    version = layout.DataNodeVersion("ab" * 16, "CID-elsewhere", 1)
    (current / "VERSION").write_text(layout.format_version(version))
    proc, _address = await start_process(processes, stub, tmp_path / "dn")
    assert await wait_exit(proc) == 1
    log = proc.log_text()
    assert "datanode stopped: WrongCluster" in log and "CID-elsewhere" in log
    assert stub.registrations == []


async def run_cli(*args: str) -> tuple[int, str]:
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "xdfs", *args, env={**os.environ, **child_env()},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        stdin=asyncio.subprocess.DEVNULL,
    )
    out, _ = await asyncio.wait_for(child.communicate(), GUARD_S)
    assert child.returncode is not None
    return child.returncode, out.decode()


async def test_locked_dir_and_usage_errors(
    processes: ProcessGroup, stub: StubNameNode, tmp_path: Path
) -> None:
    proc, _address = await start_process(processes, stub, tmp_path / "dn")
    code, out = await run_cli("datanode", "--data-dir", str(tmp_path / "dn"),
                              "--namenode", stub.address, "--rpc-address", "127.0.0.1:0")
    assert code == 1 and "datanode cannot start: StorageError" in out and "locked" in out
    assert proc.alive()
    code, out = await run_cli("datanode", "--namenode", stub.address)
    assert code == 2 and "--data-dir" in out
    code, out = await run_cli("datanode", "--data-dir", str(tmp_path / "x"))
    assert code == 2 and "--namenode" in out
    assert proc.terminate() == 0
