"""Data-path benchmark: xdfs against the raw disk, side by side in one run.

    .venv/bin/python bench/datapath.py            # full run (1 GiB file, 5,000 small files)
    .venv/bin/python bench/datapath.py --quick    # smaller counts, about a minute
    .venv/bin/python bench/datapath.py --moosefs-only --runs 3   # part (g) alone

A NameNode and three DataNodes run as real processes (``python -m xdfs ...``) with their
storage in ``--dir`` (default: a temporary directory on the checkout's disk); the client is an
:class:`~xdfs.client.client.AsyncClient` in this process. Parts:

(a) **raw disk**, measured in every run right before (b) (the disk's speed drifts on a
    shared machine; each ratio is taken within one run): write ``--file-mib`` MiB in 4 MiB
    ``os.write`` calls then ``fsync`` (``dd conv=fsync``); read it back after dropping it
    from the page cache with ``posix_fadvise(DONTNEED)`` (no root needed), so the read
    comes from the disk.
(b) **sequential file** of the same size written by one client at replication 1 and 2
    (4 MiB writes, 64 MiB blocks; a DataNode fsyncs each replica before answering), then read
    back with every replica file dropped from the page cache first, as in (a).
(c) **small files**: ``--small-files`` files of ``--small-kib`` KiB (seed 003's average of
    200 KiB), replication 2, written and read with ``--concurrency`` files in flight and
    with one at a time.
(d) **full block report** of ``--report-blocks`` blocks in batches of 100 (seed 003): a fake
    DataNode registers over RPC and sends the batches; the time from register to the last
    batch's answer. The blocks are not in the namespace, so the NameNode also classifies
    every one (as orphans to delete).
(e) **re-replication**: ``--rerep-blocks`` one-block files (1 MiB, replication 2) spread over
    the three DataNodes, then one DataNode is SIGKILLed; the time until the NameNode declares
    it dead (3 heartbeats of 1 s here) and until fsck is HEALTHY again with 2 live replicas
    per block.
(f) **file objects**: a ``--object-mib`` MiB file (replication 1, cold) read through the
    blocking file objects: ``Client.open(path, "rb").read()``, the same in 1 MiB and 64 KiB
    reads, and fsspec's ``open(path, "rb").read()`` (``--file-objects-only``: this part
    alone).
(g) **against MooseFS** (issue 14), side by side in one run: ``bench/vs_moosefs.py``'s data
    workloads through fsspec on ``xdfs dev`` and on a MooseFS it starts itself (goal 2,
    mounted through FUSE): a ``--file-mib`` MiB file in 4 MiB writes, written and read, and
    ``--vs-small-files`` files of 200 KiB written and read from 8 threads; the ratio is
    xdfs / MooseFS of the medians (above 1: xdfs is faster). When MooseFS cannot run here a
    line says why and xdfs is measured alone. ``--moosefs-only``: this part alone;
    ``--no-moosefs``: without it.

Each rate is the median of ``--runs`` runs. Nothing here is asserted by the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_env import scratch_parent
from xdfs.client.client import AsyncClient
from xdfs.common.process import ServerProcess
from xdfs.config import MiB, XdfsConfig
from xdfs.protocol.blocks import BlockRecord
from xdfs.protocol.datanode import (
    BLOCK_REPORT,
    REGISTER_DATANODE,
    BlockReportRequest,
    RegisterRequest,
    StorageReport,
)
from xdfs.rpc.client import RpcClient
from xdfs.rpc.loop import run
from xdfs.rpc.messages import PROTOCOL_VERSION, Hello

USER, PASSWORD = "bench", "bench-pw"
ENV = {"XDFS_USER": USER, "XDFS_PASSWORD": PASSWORD}
WRITE_BYTES = 4 * MiB
FAST_HEARTBEATS = [
    "-D", "namenode.heartbeat_interval_s=1.0",
    "-D", "namenode.replication_check_interval_s=0.5",
]


@dataclass
class Settings:
    file_mib: int
    small_files: int
    small_kib: int
    concurrency: int
    report_blocks: int
    rerep_blocks: int
    runs: int
    base: Path
    object_mib: int = 64
    file_objects_only: bool = False
    moosefs: str = "with"  # part (g): "with" the rest, "only", or "no"
    vs_small_files: int = 1000


@dataclass
class Table:
    rows: list[tuple[str, str, str, str]] = field(default_factory=list)

    def add(self, part: str, name: str, values: list[float], unit: str,
            digits: int = 1) -> float:
        median = statistics.median(values)
        spread = (f"{min(values):,.{digits}f} .. {max(values):,.{digits}f}"
                  if len(values) > 1 else "")
        self.rows.append((part, name, f"{median:,.{digits}f} {unit}".rstrip(), spread))
        print(f"  {part:<14} {name:<52} {median:>12,.{digits}f} {unit}", file=sys.stderr,
              flush=True)
        return median

    def markdown(self) -> str:
        lines = ["| part | measurement | median | min .. max |", "|---|---|---|---|"]
        lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in self.rows]
        return "\n".join(lines)


def drop_cache(path: Path) -> None:
    """Evict a file's clean pages so the next read comes from the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def raw_disk(s: Settings, chunk: bytes) -> tuple[float, float]:
    path = s.base / "raw.bin"
    started = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for _ in range(s.file_mib * MiB // len(chunk)):
            os.write(fd, chunk)
        os.fsync(fd)
    finally:
        os.close(fd)
    write_mbs = s.file_mib / (time.perf_counter() - started)
    drop_cache(path)
    started = time.perf_counter()
    with path.open("rb", buffering=0) as fh:
        while fh.read(WRITE_BYTES):
            pass
    read_mbs = s.file_mib / (time.perf_counter() - started)
    path.unlink()
    return write_mbs, read_mbs


class Cluster:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.nn: ServerProcess | None = None
        self.datanodes: list[ServerProcess] = []
        self.address = ""

    def start(self, datanodes: int = 3, nn_options: Sequence[str] = FAST_HEARTBEATS) -> None:
        """Format and start the NameNode (``nn_options``: ``-D`` flags), then DataNodes."""
        name_dir = self.base / "nn"
        subprocess.run(
            [sys.executable, "-m", "xdfs", "namenode", "--name-dir", str(name_dir), "-format"],
            env={**os.environ, **ENV}, check=True, capture_output=True,
        )
        self.nn = ServerProcess.xdfs(
            *nn_options, "namenode", "--name-dir", str(name_dir),
            "--rpc-address", "127.0.0.1:0", log_path=self.base / "nn.log",
            ready_pattern=r"namenode serving on (\S+)", env=ENV,
        )
        match = self.nn.start(60)
        self.address = match.group(1)
        for _ in range(datanodes):
            self.add_datanode()

    def add_datanode(self, *options: str) -> str:
        """Start one more DataNode (``options``: ``-D`` flags); its address."""
        index = len(self.datanodes)
        dn = ServerProcess.xdfs(
            *options, "datanode", "--data-dir", str(self.base / f"dn{index}"), "--namenode",
            self.address, "--rpc-address", "127.0.0.1:0",
            log_path=self.base / f"dn{index}.log",
            ready_pattern=r"datanode serving on (\S+)", env=ENV,
        )
        self.datanodes.append(dn)
        return dn.start(60).group(1)

    def stop(self) -> None:
        for proc in [*self.datanodes, *([self.nn] if self.nn else [])]:
            if proc.alive():
                proc.terminate()

    def client(self) -> AsyncClient:
        return AsyncClient(f"xdfs://{self.address}", user=USER, password=PASSWORD,
                           config=XdfsConfig())

    def replica_files(self) -> list[Path]:
        return [p for dn in range(3) for p in (self.base / f"dn{dn}").rglob("blk_*")]


async def wait_live(client: AsyncClient, count: int) -> None:
    for _ in range(600):
        report = await client.datanode_report()
        if sum(n.state == "live" for n in report.nodes) >= count:
            return
        await asyncio.sleep(0.1)
    raise RuntimeError("DataNodes did not register")


async def sequential(s: Settings, cluster: Cluster, client: AsyncClient, chunk: bytes,
                     replication: int, run: int) -> tuple[float, float]:
    path = f"/seq/r{replication}-{run}"
    started = time.perf_counter()
    writer = await client.open_write(path, replication=replication)
    for _ in range(s.file_mib * MiB // len(chunk)):
        await writer.write(chunk)
    await writer.close()
    write_mbs = s.file_mib / (time.perf_counter() - started)
    for replica in cluster.replica_files():
        drop_cache(replica)
    reader = await client.open_read(path)
    received = 0
    started = time.perf_counter()
    async for part in reader.iter_range():
        received += len(part)
    read_mbs = s.file_mib / (time.perf_counter() - started)
    assert received == s.file_mib * MiB
    await client.delete(path, skip_trash=True)
    return write_mbs, read_mbs


async def in_flight(count: int, tasks: int, op: Callable[[int], Awaitable[object]]) -> float:
    """Run op(0..count-1) with ``tasks`` at a time; returns ops per second."""
    queue = iter(range(count))

    async def worker() -> None:
        for index in queue:
            await op(index)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(tasks)))
    return count / (time.perf_counter() - started)


async def small_files(s: Settings, client: AsyncClient, tasks: int, run: int
                      ) -> tuple[float, float]:
    data = os.urandom(s.small_kib * 1024)
    top = f"/small/t{tasks}-{run}"
    await client.mkdirs(top)
    write_rate = await in_flight(
        s.small_files, tasks, lambda i: client.write_file(f"{top}/f{i}", data)
    )

    async def read(i: int) -> None:
        assert len(await client.read_file(f"{top}/f{i}")) == len(data)

    read_rate = await in_flight(s.small_files, tasks, read)
    await client.delete(top, recursive=True, skip_trash=True)
    return write_rate, read_rate


async def block_report(s: Settings, address: str) -> float:
    config = XdfsConfig()
    hello = Hello(PROTOCOL_VERSION, client_name="bench-fake-dn", user=USER, password=PASSWORD)
    rpc = RpcClient(address, config.rpc, hello=hello)
    try:
        node_id = uuid.uuid4().hex
        started = time.perf_counter()
        reply = await rpc.call(
            REGISTER_DATANODE,
            RegisterRequest(node_id, "127.0.0.1:1", StorageReport(1 << 40, 0, 1 << 40)),
        )
        batch = reply.block_report_batch_max
        ids = range(1 << 50, (1 << 50) + s.report_blocks)
        count = -(-len(ids) // batch)
        for index in range(count):
            blocks = [BlockRecord(i, 1, 1024) for i in ids[index * batch : (index + 1) * batch]]
            await rpc.call(BLOCK_REPORT, BlockReportRequest(node_id, 1, index, count, blocks))
        return time.perf_counter() - started
    finally:
        await rpc.close()


async def rereplication(s: Settings, cluster: Cluster, client: AsyncClient) -> tuple[float, float]:
    data = os.urandom(MiB)
    await client.mkdirs("/rerep")
    await in_flight(s.rerep_blocks, 8, lambda i: client.write_file(f"/rerep/f{i}", data))
    victim = cluster.datanodes[1]
    victim_address = victim.match.group(1) if victim.match else ""
    started = time.perf_counter()
    victim.kill()
    dead_s = 0.0
    while True:
        if not dead_s:
            nodes = (await client.datanode_report()).nodes
            if any(n.address == victim_address and n.state == "dead" for n in nodes):
                dead_s = time.perf_counter() - started
        report = await client.fsck("/rerep", files=True, blocks=True)
        if dead_s and report.healthy and all(
            b.live_replicas == 2 for f in report.listed for b in f.blocks
        ):
            return dead_s, time.perf_counter() - started
        await asyncio.sleep(0.1)


def read_whole(fh: Any, size: int) -> int:
    """Bytes read from a file object in ``size`` reads (-1: one read())."""
    if size < 0:
        return len(fh.read())
    total = 0
    while chunk := fh.read(size):
        total += len(chunk)
    return total


async def file_objects_part(s: Settings, table: Table, cluster: Cluster,
                            client: AsyncClient) -> None:
    """(f): the blocking file objects over the same cold file, each in its own run."""
    import fsspec

    path = "/objects/f"
    writer = await client.open_write(path, replication=1)
    chunk = os.urandom(MiB)
    for _ in range(s.object_mib):
        await writer.write(chunk)
    await writer.close()
    uri = f"xdfs://{cluster.address}"
    cases = [("Client.open().read()", "client", -1),
             ("Client.open() in 1 MiB reads", "client", MiB),
             ("Client.open() in 64 KiB reads", "client", 64 * 1024),
             ("fsspec open().read()", "fsspec", -1)]
    rows: dict[str, list[float]] = {}

    def read(kind: str, size: int) -> float:
        fs = fsspec.filesystem("xdfs", fs=uri, user=USER, password=PASSWORD, token="",
                               skip_instance_cache=True)
        opener = fs.client.open if kind == "client" else fs.open
        for replica in cluster.replica_files():
            drop_cache(replica)
        started = time.perf_counter()
        with opener(path, "rb") as fh:
            assert read_whole(fh, size) == s.object_mib * MiB
        elapsed = time.perf_counter() - started
        fs.client.close()
        return s.object_mib / elapsed

    for _run in range(s.runs):
        for name, kind, size in cases:
            rows.setdefault(name, []).append(await asyncio.to_thread(read, kind, size))
    for name, _kind, _size in cases:
        table.add("file objects", f"{name}, {s.object_mib} MiB (cold)", rows[name], "MB/s")
    await client.delete(path, skip_trash=True)


async def sequential_part(s: Settings, table: Table, cluster: Cluster, client: AsyncClient,
                          chunk: bytes) -> None:
    """Raw disk and xdfs interleaved run by run (the disk's speed drifts on a shared
    machine), each ratio taken within one run."""
    rows: dict[str, list[float]] = {}
    for run_number in range(s.runs):
        raw_write, raw_read = raw_disk(s, chunk)
        rows.setdefault("raw write", []).append(raw_write)
        rows.setdefault("raw read", []).append(raw_read)
        for replication in (1, 2):
            write, read = await sequential(s, cluster, client, chunk, replication, run_number)
            rows.setdefault(f"write {replication}", []).append(write)
            rows.setdefault(f"read {replication}", []).append(read)
            rows.setdefault(f"write ratio {replication}", []).append(100 * write / raw_write)
            rows.setdefault(f"read ratio {replication}", []).append(100 * read / raw_read)
    size = f"{s.file_mib} MiB"
    table.add("raw disk", f"write {size} + fsync", rows["raw write"], "MB/s")
    table.add("raw disk", f"read {size} (cold)", rows["raw read"], "MB/s")
    for replication in (1, 2):
        table.add("xdfs 1 client", f"write {size}, replication {replication}",
                  rows[f"write {replication}"], "MB/s")
        table.add("xdfs 1 client", f"read {size}, replication {replication} (cold)",
                  rows[f"read {replication}"], "MB/s")
        table.add("ratio", f"write / raw write, replication {replication} (same run)",
                  rows[f"write ratio {replication}"], "%")
        table.add("ratio", f"read / raw read, replication {replication} (same run)",
                  rows[f"read ratio {replication}"], "%")


def moosefs_part(s: Settings, table: Table) -> None:
    """(g): vs_moosefs's data workloads on both systems in one run, as rows of ``table``."""
    import vs_moosefs  # beside this script (bench/ is on sys.path when it runs)

    results = vs_moosefs.bench(vs_moosefs.Settings(
        runs=s.runs, dir_ops=0, file_mib=s.file_mib, small_files=s.vs_small_files,
        small_kib=200, parts={"data"}, base=s.base / "vs-moosefs",
    ))
    for figure in dict.fromkeys(figure for figure, _system in results.rates):
        medians = {}
        for system in ("moosefs", "xdfs"):
            values = results.rates.get((figure, system))
            if values:
                medians[system] = table.add("vs MooseFS", f"{system}: {figure}", values, "")
        if len(medians) == 2:
            table.add("vs MooseFS", f"xdfs / MooseFS: {figure}",
                      [medians["xdfs"] / medians["moosefs"]], "x", digits=2)


async def bench(s: Settings, table: Table) -> None:
    chunk = os.urandom(WRITE_BYTES)
    cluster = Cluster(s.base / "cluster")
    cluster.start()
    try:
        async with cluster.client() as client:
            await wait_live(client, 3)
            await file_objects_part(s, table, cluster, client)
            if s.file_objects_only:
                return
            await sequential_part(s, table, cluster, client, chunk)
            for tasks in (1, s.concurrency):
                runs = [await small_files(s, client, tasks, run) for run in range(s.runs)]
                label = f"{s.small_files} x {s.small_kib} KiB, {tasks} in flight"
                table.add("small files", f"write {label}", [w for w, _ in runs], "files/s")
                table.add("small files", f"read {label}", [r for _, r in runs], "files/s")
            dead_s, healthy_s = await rereplication(s, cluster, client)
            table.add("re-replication", "SIGKILL -> DataNode declared dead", [dead_s], "s")
            table.add("re-replication", f"SIGKILL -> {s.rerep_blocks} blocks back to 2 "
                      "replicas", [healthy_s], "s")
            # Last: the fake DataNode looks live (to placement too) until it misses heartbeats.
            seconds = [await block_report(s, cluster.address) for _ in range(s.runs)]
            table.add("block report", f"full report of {s.report_blocks:,} blocks (batches of "
                      "100)", seconds, "s")
    finally:
        cluster.stop()


def parse_args(argv: Sequence[str] | None) -> tuple[Settings, bool]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--file-mib", type=int, default=None)
    parser.add_argument("--small-files", type=int, default=None)
    parser.add_argument("--small-kib", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--report-blocks", type=int, default=100_000)
    parser.add_argument("--rerep-blocks", type=int, default=None)
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--dir", default=None, help="where the cluster's storage goes")
    parser.add_argument("--object-mib", type=int, default=None)
    parser.add_argument("--file-objects-only", action="store_true")
    parser.add_argument("--moosefs-only", action="store_true", help="part (g) alone")
    parser.add_argument("--no-moosefs", action="store_true", help="without part (g)")
    parser.add_argument("--vs-small-files", type=int, default=None,
                        help="200 KiB files of part (g) (1000; --quick 200)")
    args = parser.parse_args(argv)
    quick = args.quick
    base = Path(tempfile.mkdtemp(prefix="xdfs-bench-", dir=scratch_parent(args.dir) or Path.cwd()))
    return Settings(
        file_mib=args.file_mib or (256 if quick else 1024),
        small_files=args.small_files or (1000 if quick else 5000),
        small_kib=args.small_kib,
        concurrency=args.concurrency,
        report_blocks=args.report_blocks,
        rerep_blocks=args.rerep_blocks or (50 if quick else 200),
        runs=args.runs or (1 if quick else 3),
        base=base,
        object_mib=args.object_mib or (32 if quick else 64),
        file_objects_only=args.file_objects_only,
        moosefs="only" if args.moosefs_only else "no" if args.no_moosefs else "with",
        vs_small_files=args.vs_small_files or (200 if quick else 1000),
    ), quick


def main(argv: Sequence[str] | None = None) -> int:
    settings, _quick = parse_args(argv)
    table = Table()
    started = time.perf_counter()
    try:
        if settings.moosefs != "only":
            run(bench(settings, table), use_uvloop=True)  # as the xdfs processes run
        if settings.moosefs != "no" and not settings.file_objects_only:
            moosefs_part(settings, table)
    finally:
        shutil.rmtree(settings.base, ignore_errors=True)
    command = " ".join(["python", "bench/datapath.py", *(argv or sys.argv[1:])])
    print(table.markdown())
    print(f"\ncommand: {command}")
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}; load average after: {os.getloadavg()}; "
          f"took {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
