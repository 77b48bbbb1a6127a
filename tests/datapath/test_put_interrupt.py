"""Ctrl-C during ``xdfs dfs -put`` (issue 17, item 16): the upload is cancelled, its
``._COPYING_`` file deleted (so its lease cannot block a retry), no traceback is printed,
and the same -put right after succeeds."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from tests.datapath.conftest import Cluster, payload
from tests.integration.conftest import ROOT, ROOT_PW
from xdfs.testing.poll import eventually

ENV = {"XDFS_USER": ROOT, "XDFS_PASSWORD": ROOT_PW}


async def _xdfs(*args: str) -> asyncio.subprocess.Process:
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDFS_")}
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "xdfs", *args, env={**env, **ENV},
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def test_ctrl_c_during_put_deletes_the_temporary_file(
    cluster: Cluster, tmp_path: Path
) -> None:
    client = cluster.client
    uri = f"xdfs://{client.addresses[0]}"
    source = tmp_path / "source"
    os.mkfifo(source)  # the upload waits on it: Ctrl-C surely arrives mid-upload
    put = await _xdfs("dfs", "-fs", uri, "-put", str(source), "/up")
    writer = await asyncio.to_thread(open, source, "wb")
    try:
        await asyncio.to_thread(writer.write, payload(300_000))
        await asyncio.to_thread(writer.flush)
        await eventually(lambda: client.exists("/up._COPYING_"), what="the upload started")
        put.send_signal(signal.SIGINT)

        async def cleaned() -> bool:
            return not await client.exists("/up._COPYING_")

        await eventually(cleaned, what="the temporary file deleted")
    finally:
        # the interrupted read of the pipe ends, so the process can exit
        await asyncio.to_thread(writer.close)
    _out, err = await asyncio.wait_for(put.communicate(), 60)
    assert put.returncode not in (0, None)
    text = err.decode()
    assert "Traceback" not in text and "Task" not in text, text
    assert not await client.exists("/up")

    data = payload(300_000, seed=3)
    local = tmp_path / "local"
    local.write_bytes(data)
    retry = await _xdfs("dfs", "-fs", uri, "-put", str(local), "/up")
    _out, err = await asyncio.wait_for(retry.communicate(), 60)
    assert retry.returncode == 0, err.decode()
    assert await client.read_file("/up") == data
