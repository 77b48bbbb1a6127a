"""kill -9 of a NameNode process while its forked image writer is writing: the writer dies
with it, the restart loads the older image and the edits after it (nothing acknowledged is
lost), the next save works and its purge removes the half-written ``.ckpt``."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from xdfs.client.client import AsyncClient
from xdfs.common.process import ProcessGroup, ServerProcess
from xdfs.config import XdfsConfig
from xdfs.namenode.image.format import format_namenode
from xdfs.namenode.image.storage import StorageDirectory
from xdfs.testing.big_namespace import grow_image
from xdfs.testing.poll import eventually

from ..integration.conftest import ROOT, ROOT_PW
from ..integration.test_nn_crash import ARMED_MAIN, READY

ENV = {"XDFS_USER": ROOT, "XDFS_PASSWORD": ROOT_PW}


def _children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(child) for child in text.split()]


def _state(pid: int) -> str:
    """The process state letter (T: stopped); "" once it is gone (reaped or not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return ""
    return "" if state in ("Z", "X") else state


async def _start(processes: ProcessGroup, tmp_path: Path, name: str, faults: str) -> str:
    proc = ServerProcess(
        [sys.executable, "-c", ARMED_MAIN, "namenode", "--name-dir", str(tmp_path / "name"),
         "--rpc-address", "127.0.0.1:0"],
        log_path=tmp_path / f"{name}.log", ready_pattern=READY,
        env={**ENV, "XDFS_FAULTS": faults},
    )
    nn = await asyncio.to_thread(processes.start, proc, 60.0)
    assert nn.match is not None
    return nn.match.group(1)


def _client(address: str) -> AsyncClient:
    return AsyncClient(f"xdfs://{address}", user=ROOT, password=ROOT_PW, config=XdfsConfig())


async def test_kill_9_while_the_image_writer_runs_loses_nothing(
    processes: ProcessGroup, tmp_path: Path
) -> None:
    name_dir = tmp_path / "name"
    format_namenode([name_dir], XdfsConfig().namenode, superuser=ROOT, password=ROOT_PW)
    grow_image([name_dir], "big", 20, 50)
    address = await _start(processes, tmp_path, "nn-1", "image.ckpt_started=stop")
    nn = processes.processes[-1]
    async with _client(address) as root:
        await root.mkdirs("/before")
        save = asyncio.create_task(root.save_namespace())
        writer = (await eventually(lambda: _children(nn.pid), what="the image writer"))[0]
        await eventually(lambda: _state(writer) == "T", what="the writer to stop")
        # the NameNode answers and logs edits while its writer is (stopped) mid-save
        await root.mkdirs("/during")
        await root.rename("/big/d000003", "/during/moved")
        assert (await root.stat("/during/moved/f000049")).length == 0
        assert not save.done()
        nn.kill()  # SIGKILL
        await eventually(lambda: not _state(writer), what="the writer to die with it")
        save.cancel()
    current = StorageDirectory(name_dir).current
    assert any(p.name.startswith("fsimage.ckpt_") for p in current.iterdir())
    address = await _start(processes, tmp_path, "nn-2", "")
    async with _client(address) as root:
        assert (await root.stat("/before")).is_dir
        assert (await root.stat("/during/moved/f000049")).length == 0
        assert not await root.exists("/big/d000003")
        assert StorageDirectory(name_dir).images() == [0]
        txid = await root.save_namespace()
    assert max(StorageDirectory(name_dir).images()) == txid
    # the next checkpoint's purge removed the leftover
    assert not any(p.name.startswith("fsimage.ckpt_") for p in current.iterdir())
