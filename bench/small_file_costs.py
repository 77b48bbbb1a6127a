"""What one small file written through fsspec costs, counted (issue 14): deterministic.

    .venv/bin/python bench/small_file_costs.py            # 40 files of 200 KiB
    .venv/bin/python bench/small_file_costs.py --files 100 --kib 64
    .venv/bin/python bench/small_file_costs.py --threads 8 --files 400  # concurrent writers

A NameNode and three DataNodes run in this process (replication 2, the in-process
MiniCluster on a loop thread of its own); ``fsspec.filesystem("xdfs")`` writes the files one
after the other, each as ``with fs.open(path, "wb") as f: f.write(body)``, then reads them
back (``fs.open(path, "rb")``, ``read()``). Counted per file written and per file read:
the RPC calls each server answered (by method), the fsyncs (``fsync``/``fdatasync``, or
handed to the kernel's AIO by a DataNode; by what they made durable: the NameNode's edits,
a replica's data or checksum file, a directory), the DataNode's hops to a worker thread
and the client's hops to its event-loop thread. Unlike rates on a shared machine these
counts do not move with the load, so two versions compare exactly (run the script in each
checkout). With ``--threads N`` the files are written (and read) from N threads at once:
what the servers batch across concurrent writers shows (e.g. incremental reports per
file), and the counts vary a little from run to run. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import fsspec

from xdfs.client.client import AsyncClient
from xdfs.common.aio import KernelSyncs
from xdfs.config import XdfsConfig
from xdfs.rpc import server_connection as rpc_server
from xdfs.rpc.sync import LoopThread
from xdfs.testing.minicluster import MiniCluster
from xdfs.testing.poll import eventually

ROOT, ROOT_PW = "root", "rootpw"


class Counts:
    def __init__(self) -> None:
        self.phases: dict[str, Counter[str]] = {}
        self.phase = ""  # "": not counting
        self._lock = threading.Lock()  # counted from the servers' and writers' threads

    def add(self, key: str) -> None:
        if self.phase:
            with self._lock:
                self.phases.setdefault(self.phase, Counter())[key] += 1


def _fsync_kind(fd: int, base: Path) -> str:
    try:
        target = Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return "fsync: ?"
    rel = target.relative_to(base) if target.is_relative_to(base) else target
    if rel.parts and rel.parts[0].startswith("nn"):
        return "fsync: NameNode " + ("directory" if target.is_dir() else "edits")
    if target.is_dir():
        return "fsync: DataNode directory"
    return "fsync: replica checksum file" if target.name.endswith(".meta") else \
        "fsync: replica data file"


def instrument(counts: Counts, base: Path) -> None:
    """Count server calls, fsyncs, DataNode worker-thread hops and client loop hops."""
    on_envelope = rpc_server.ServerConnection.on_envelope

    def counted_envelope(self: Any, envelope: Any) -> None:
        if envelope.method and envelope.method != "heartbeat":  # timed, not per file
            counts.add(f"call: {envelope.method}")
        on_envelope(self, envelope)

    rpc_server.ServerConnection.on_envelope = counted_envelope  # type: ignore[method-assign]

    def counted_sync(real: Callable[[int], None]) -> Callable[[int], None]:
        def sync(fd: int) -> None:
            counts.add(_fsync_kind(fd, base))
            real(fd)
        return sync

    from xdfs.common import files

    real_datasync = files.datasync
    os.fsync = counted_sync(os.fsync)  # type: ignore[assignment]
    if hasattr(os, "fdatasync"):
        os.fdatasync = counted_sync(os.fdatasync)  # type: ignore[assignment]
    for module in list(sys.modules.values()):  # those that imported it by name
        if module is not None and module.__name__.startswith("xdfs") and \
                getattr(module, "datasync", None) is real_datasync:
            module.datasync = counted_sync(real_datasync)  # type: ignore[attr-defined]
    from xdfs.datanode import transfer

    real_in_thread = transfer.in_thread

    async def counted_in_thread(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        counts.add("DataNode: hop to a worker thread")
        return await real_in_thread(fn, *args, **kwargs)

    for module in list(sys.modules.values()):  # those that imported it by name
        if module is not None and module.__name__.startswith("xdfs.datanode") and \
                getattr(module, "in_thread", None) is real_in_thread:
            module.in_thread = counted_in_thread  # type: ignore[attr-defined]
    kernel_sync = KernelSyncs.sync

    async def counted_kernel_sync(self: KernelSyncs, fds: Sequence[int], *,
                                  data_only: bool) -> None:
        for fd in fds:
            counts.add(_fsync_kind(fd, base) + " (kernel AIO, no thread)")
        await kernel_sync(self, fds, data_only=data_only)

    KernelSyncs.sync = counted_kernel_sync  # type: ignore[method-assign]
    run = LoopThread.run

    def counted_run(self: LoopThread, coro: Any) -> Any:
        if self._thread.name == "xdfs-client":
            counts.add("client: hop to its loop thread")
        return run(self, coro)

    LoopThread.run = counted_run  # type: ignore[method-assign]


async def start(mc: MiniCluster) -> str:
    base = XdfsConfig()
    config = replace(base, namenode=replace(base.namenode, default_replication=2,
                                            heartbeat_interval_s=0.2))
    nn = await mc.start_namenode(config=config, superuser=ROOT, password=ROOT_PW)
    for index in range(3):
        await mc.start_datanode(f"dn{index}", nn.address, config=config)

    async with AsyncClient(f"xdfs://{nn.address}", user=ROOT, password=ROOT_PW,
                           config=config) as client:

        async def live() -> bool:
            report = await client.datanode_report()
            return sum(node.state == "live" for node in report.nodes) >= 3

        await eventually(live, what="3 live DataNodes")
    return nn.address


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--kib", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1, help="writers at once (1)")
    args = parser.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="xdfs-small-costs-"))
    counts = Counts()
    instrument(counts, base)
    loop = LoopThread("xdfs-bench-cluster")
    mc = MiniCluster(base, deadline_s=3600)
    try:
        address = loop.run(start(mc))
        fs = fsspec.filesystem("xdfs", skip_instance_cache=True, fs=f"xdfs://{address}",
                               user=ROOT, password=ROOT_PW)
        body = os.urandom(args.kib * 1024)
        fs.makedirs("/small", exist_ok=True)
        for i in range(3):  # warm: connections made, directories of the first blocks
            with fs.open(f"/small/warm-{i}", "wb") as fh:
                fh.write(body)

        def write(i: int) -> None:
            with fs.open(f"/small/f{i}", "wb") as fh:
                fh.write(body)

        def read(i: int) -> None:
            with fs.open(f"/small/f{i}", "rb") as fh:
                assert fh.read() == body

        with ThreadPoolExecutor(args.threads) as pool:
            counts.phase = "written"
            list(pool.map(write, range(args.files)))
            counts.phase = "read"
            list(pool.map(read, range(args.files)))
            counts.phase = ""
        fs.client.close()
    finally:
        loop.run(mc.close())
        loop.close()
        shutil.rmtree(base, ignore_errors=True)
    for phase, counter in counts.phases.items():
        print(f"\nper file of {args.kib} KiB {phase} through fsspec ({args.files} files, "
              f"{args.threads} thread(s), replication 2):\n")
        print("| what | per file |\n|---|---:|")
        for key, value in sorted(counter.items()):
            print(f"| {key} | {value / args.files:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
