"""Issue 17 item 12: a name dir running out of space puts the NameNode in safe mode before
the disk is full (HDFS's NameNodeResourceChecker); reads go on; it leaves by itself once
there is space again, or by an operator's ``-safemode leave``."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from xdfs.common.process import ProcessGroup
from xdfs.errors import SafeModeError
from xdfs.testing.minicluster import MiniCluster
from xdfs.testing.poll import eventually

from .conftest import ROOT, ROOT_PW, nn_config, run_xdfs, start_cluster, write_file

MiB = 1 << 20


async def test_low_disk_space_enters_safe_mode_and_space_ends_it(
    minicluster: MiniCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "xdfs.namenode.server")
    config = nn_config(resource_free_bytes_min=100 * MiB, resource_check_interval_s=0.05)
    c = await start_cluster(minicluster, config, users=False)
    try:
        nn, root = c.nn, c.root
        await write_file(root, "/kept", [10, 20])
        free = {"bytes": 10_000 * MiB}
        nn.free_bytes = lambda path: free["bytes"]  # the checker's reading, injected

        async def safe_mode_is(on: bool) -> bool:
            return (await root.safe_mode("get")).on is on

        assert not (await root.safe_mode("get")).on
        free["bytes"] = 99 * MiB
        await eventually(lambda: safe_mode_is(True))
        status = await root.safe_mode("get")
        assert "low disk space" in status.reason and str(99 * MiB) in status.reason
        report = await root.status()
        assert report.safe_mode and "low disk space" in report.safe_mode_reason
        assert report.name_dir_free_bytes == [99 * MiB]
        # reads go on, writes wait
        assert (await root.stat("/kept")).length == 30
        assert [e.path for e in await root.list_dir("/")] == ["/kept", "/tmp", "/user"]
        assert len((await root.block_locations("/kept")).blocks) == 2
        with pytest.raises(SafeModeError, match="low disk space"):
            await root.mkdirs("/new")
        # an operator may leave; the next reading that finds space low enters again
        assert not (await root.safe_mode("leave")).on
        await eventually(lambda: safe_mode_is(True))
        # space back: it leaves by itself, and writes work
        free["bytes"] = 100 * MiB
        await eventually(lambda: safe_mode_is(False))
        await root.mkdirs("/new")
        entered = [r for r in caplog.records if "entering safe mode: low disk space" in r.message]
        left = [r for r in caplog.records if "leaving low-space safe mode" in r.message]
        assert len(entered) == 2 and len(left) == 1  # one line per change, not per reading
        assert all(r.levelno == logging.WARNING for r in entered)
    finally:
        await c.close()


async def test_namenode_process_short_of_space_serves_reads_and_says_why(
    processes: ProcessGroup, tmp_path: Path
) -> None:
    env = {"XDFS_USER": ROOT, "XDFS_PASSWORD": ROOT_PW}
    name_dir = tmp_path / "nn"
    code, _out, err = await run_xdfs("namenode", "--name-dir", str(name_dir), "-format", env=env)
    assert code == 0, err
    # more free space than any disk has: "low" from the first reading
    nn = await asyncio.to_thread(
        processes.start_xdfs, "nn", "-D", f"namenode.resource_free_bytes_min={1 << 60}",
        "-D", "namenode.resource_check_interval_s=0.1",
        "namenode", "--name-dir", str(name_dir), "--rpc-address", "127.0.0.1:0",
        ready_pattern=r"namenode serving on (\S+)", env=env,
    )
    assert nn.match is not None
    fs = ["-fs", f"xdfs://{nn.match.group(1)}"]
    code, out, err = await run_xdfs("admin", *fs, "-safemode", "get", env=env)
    assert code == 0 and out.startswith("Safe mode is ON: low disk space"), (out, err)
    assert str(name_dir) in out
    code, out, err = await run_xdfs("admin", *fs, "-report", env=env)
    assert code == 0 and "Safe mode:" in out and "ON: low disk space" in out, (out, err)
    code, out, err = await run_xdfs("dfs", *fs, "-ls", "/", env=env)
    assert code == 0 and "/tmp" in out, err
    code, out, err = await run_xdfs("dfs", *fs, "-mkdir", "/x", env=env)
    assert code != 0 and "safe mode (low disk space" in err
    assert len(err.strip().splitlines()) == 1  # one line, no traceback
    log = nn.log_path.read_text()
    assert log.count("entering safe mode: low disk space") == 1
