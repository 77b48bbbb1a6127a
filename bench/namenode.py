"""NameNode benchmark in the manner of HDFS's NNThroughputBenchmark.

    .venv/bin/python bench/namenode.py            # full run (a few minutes)
    .venv/bin/python bench/namenode.py --quick    # about a minute, smaller counts
    .venv/bin/python bench/namenode.py --vs-moosefs [--quick]   # the MooseFS comparison only
    .venv/bin/python bench/namenode.py --pure     # the namespace's Python sources, not mypyc

Five parts, each printed as rows of one Markdown table (ready for docs/benchmarks.md):

(a) **in-process**: a real NameNode (``format_namenode`` + ``NameNode.start``: namesystem,
    edits log fsynced on its name dir) in this process; the benchmark calls ``node.fs``
    (the :class:`~xdfs.namenode.namesystem.Namesystem`) directly. Mutations run from
    ``--writers`` asyncio tasks at once (64), each awaiting its own call, so they share
    fsyncs through group commit exactly as RPC handlers do. Reads (stat, open, list) run
    inline on the loop and never await, so they are called back to back. The caller is an
    ordinary user (``bench``, owner of ``/bench``), so permission checks are paid.
    ``create`` is create + complete with no block (a file per second, HDFS's "create").
    The last row is part (e)'s small-file calls with the block manager called directly.
(b) **over RPC**: the NameNode in a separate process (``python -m xdfs namenode``), an
    :class:`~xdfs.client.client.AsyncClient` (one connection) here, with 1 and with 64
    calls in flight. ``create`` is two RPCs (create, complete): reported as files/s. Issue
    14's two async-client figures are the 64-in-flight create and stat rows.
(c) **memory per file inode**: a :class:`~xdfs.namenode.namespace.tree.Namespace` built by
    applying AddFileOp + CloseFileOp for ``--files`` files (1M) over 1000 directories; the
    RSS growth per file (what the process really pays, allocator slack included), and the
    exact allocation per file from ``tracemalloc`` on a smaller namespace of the same shape.
    The build rate is reported too: it is the edits replay rate (apply only, no I/O).
(d) **image save / load** of that namespace: ``recovery.save_checkpoint`` (written and
    fsynced) and ``recovery.load_namespace`` (the startup path: md5 verified while
    streaming), in inodes/s.
(e) **small files**: the NameNode calls of one small-file write (``create_with_block``, an
    incremental report from each of its 2 targets, ``complete``) from 8 writers at once,
    against a NameNode process, with 3 fake DataNodes in this process (their own
    connections, the DataNode secret; nothing is stored): the NameNode's CPU per file of
    the small-file workload, without the DataNodes' disks and their noise.

``--vs-moosefs`` runs instead the metadata workload of issue 14 side by side with MooseFS
(:mod:`vs_moosefs`: ``xdfs dev`` and a MooseFS it starts itself, uncached FUSE mount;
``mkdir``, ``info`` and ``mv`` through fsspec from 1 and 8 threads, the systems alternating)
and prints the ratios; when MooseFS cannot run here it says why in one line and measures
xdfs alone.
The namespace modules run compiled by mypyc when ``make setup`` built them
(``xdfs.common.native``); ``--pure`` runs their Python sources (``XDFS_PURE=1``, in the
NameNode process too). The report's first lines say which build ran.

Every rate is the median of ``--runs`` runs (fresh NameNode per run for (a), fresh
directories for (b)); min .. max is shown beside it. The CPU column is CPU microseconds per
op: of this process (``time.process_time``) for in-process rows, of the NameNode process
(``/proc/PID/stat``) and of this client for RPC rows. A busy shared machine disturbs CPU
time much less than wall time, so it says where the time goes. Nothing here is asserted by
the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import time
import tracemalloc
import urllib.request
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from bench_env import load_average, machine, proc_cpu_s, scratch_parent
from xdfs.client.client import AsyncClient
from xdfs.common import collector, native
from xdfs.common.process import ServerProcess
from xdfs.config import XdfsConfig
from xdfs.namenode.image.format import format_namenode
from xdfs.namenode.image.recovery import load_namespace, save_checkpoint
from xdfs.namenode.image.storage import StorageDirectory
from xdfs.namenode.namespace.ops import AddFileOp, CloseFileOp, MkdirOp
from xdfs.namenode.namespace.tree import Namespace
from xdfs.namenode.security.passwords import DATANODE_SECRET_FILE
from xdfs.namenode.server import NameNode
from xdfs.protocol import datanode as dn
from xdfs.protocol.blocks import BlockRecord
from xdfs.rpc.client import RpcClient
from xdfs.rpc.loop import run
from xdfs.rpc.messages import PROTOCOL_VERSION, Hello
from xdfs.testing.net import free_port

SUPERUSER, SUPER_PASSWORD = "root", "rootpw"
USER, PASSWORD = "bench", "benchpw"
FANOUT = 1000  # entries per directory in every tree the benchmark builds
LIST_ENTRIES = 1000
READY = r"namenode serving on (\S+)"

#: Published by HDFS (NNThroughputBenchmark, in-process, ops/s) - the reference points.
HDFS_ANCHORS = {"open": 126_000, "create": 5_700, "rename": 8_400, "delete": 20_700}
#: Aims on this project's 2-core machine.
AIM_INPROC_CREATE = 30_000
AIM_INPROC_STAT = 200_000
AIM_RPC_CREATE_64 = 15_000  # issue 14: async client, 64 in flight, create + complete
AIM_RPC_STAT_64 = 60_000
AIM_BYTES_PER_INODE = 300
AIM_IMAGE_LOAD = 1_000_000


@dataclass(frozen=True)
class Settings:
    quick: bool
    runs: int
    ops: int  # per in-process operation and run
    rpc_ops: int  # per RPC operation and run with 64 in flight
    rpc_serial_ops: int  # ... with 1 in flight
    list_calls: int
    writers: int
    files: int  # inodes of the memory / image namespace
    sample_files: int  # tracemalloc sample
    image_runs: int
    only: tuple[str, ...]
    workdir: str | None
    pure: bool
    vs_moosefs: bool = False


@dataclass
class Row:
    part: str
    name: str
    unit: str
    runs: list[float] = field(default_factory=list)
    cpu_us: list[float] = field(default_factory=list)  # this process (in-process) or server
    client_cpu_us: list[float] = field(default_factory=list)  # RPC: the client side
    aim: str = "-"
    check: Callable[[float], bool] | None = None
    note: str = ""

    def value(self) -> float:
        return statistics.median(self.runs)

    def cpu_text(self) -> str:
        if not self.cpu_us:
            return "-"
        own = statistics.median(self.cpu_us)
        if not self.client_cpu_us:
            return f"{own:,.1f}"
        return f"NN {own:,.0f} + client {statistics.median(self.client_cpu_us):,.0f}"


def at_least(bound: float) -> Callable[[float], bool]:
    return lambda value: value >= bound


def at_most(bound: float) -> Callable[[float], bool]:
    return lambda value: value <= bound


class Table:
    def __init__(self, s: Settings) -> None:
        self.s = s
        self.rows: dict[tuple[str, str], Row] = {}
        #: One line per timed RPC trial of a mutation: what bounded it (see EditsFlushes).
        self.trials: list[str] = []

    def wanted(self, part: str) -> bool:
        return not self.s.only or any(word in part for word in self.s.only)

    def add(self, part: str, name: str, unit: str, value: float, cpu_us: float | None = None,
            client_cpu_us: float | None = None, *, aim: str = "-",
            check: Callable[[float], bool] | None = None, note: str = "") -> None:
        row = self.rows.get((part, name))
        if row is None:
            row = self.rows[(part, name)] = Row(part, name, unit, aim=aim, check=check)
        row.note = note or row.note
        row.runs.append(value)
        if cpu_us is not None:
            row.cpu_us.append(cpu_us)
        if client_cpu_us is not None:
            row.client_cpu_us.append(client_cpu_us)
        cpu = f"   (CPU {cpu_us:,.1f} us/op)" if cpu_us is not None else ""
        if client_cpu_us is not None:
            cpu = f"   (CPU: NameNode {cpu_us:,.0f} + client {client_cpu_us:,.0f} us/op)"
        print(f"  {part:<10} {name:<48} {value:>12,.1f} {unit}{cpu}", file=sys.stderr,
              flush=True)

    def markdown(self) -> str:
        lines = [
            "| part | metric | median | min .. max | CPU us/op | aim / anchor |",
            "|---|---|---:|---:|---:|---|",
        ]
        for row in self.rows.values():
            value = row.value()
            aim = row.aim
            if row.check is not None:
                aim += ": " + ("met" if row.check(value) else "MISSED")
            spread = f"{min(row.runs):,.0f} .. {max(row.runs):,.0f}" if len(row.runs) > 1 else "-"
            lines.append(
                f"| {row.part} | {row.name} | {value:,.0f} {row.unit} | {spread} "
                f"| {row.cpu_text()} | {aim}{' ' + row.note if row.note else ''} |"
            )
        return "\n".join(lines)


def hdfs(op: str) -> str:
    return f"HDFS {HDFS_ANCHORS[op]:,}/s"


# -- drivers ---------------------------------------------------------------------------------


@dataclass
class Timing:
    ops: int
    wall_s: float
    cpu_s: float

    @property
    def rate(self) -> float:
        return self.ops / self.wall_s

    @property
    def cpu_us(self) -> float:
        """CPU microseconds of this process per op."""
        return self.cpu_s / self.ops * 1e6


async def drive(op: Callable[[int], Awaitable[object]], n: int, tasks: int) -> Timing:
    """Run op(0..n-1) from ``tasks`` coroutines, each awaiting its call before the next."""
    items = iter(range(n))

    async def worker() -> None:
        for i in items:  # shared: every index is taken exactly once
            await op(i)

    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker() for _ in range(tasks)))
    return Timing(n, time.perf_counter() - wall, time.process_time() - cpu)


def drive_sync(op: Callable[[int], object], n: int) -> Timing:
    wall, cpu = time.perf_counter(), time.process_time()
    for i in range(n):
        op(i)
    return Timing(n, time.perf_counter() - wall, time.process_time() - cpu)


def tree_path(top: str, i: int, prefix: str) -> str:
    return f"{top}/p{i // FANOUT:04d}/{prefix}{i:07d}"


# -- (a) in-process --------------------------------------------------------------------------


async def inproc_run(s: Settings, table: Table, base: Path) -> None:
    name_dir = base / "inproc"
    shutil.rmtree(name_dir, ignore_errors=True)
    config = XdfsConfig()
    format_namenode([name_dir], config.namenode, superuser=SUPERUSER, password=SUPER_PASSWORD)
    node = NameNode(config, [name_dir])
    collector.tune(config.rpc.gc_young_objects)  # the collector as a server process has it
    await node.start("127.0.0.1", 0)
    collector.settle()
    try:
        assert node.fs is not None and node.auth is not None and node.edits is not None
        fs, n, w = node.fs, s.ops, s.writers
        await node.auth.add_user(SUPERUSER, USER, PASSWORD, [])
        await fs.mkdirs(SUPERUSER, "/bench", 0o755, True)
        await fs.set_owner(SUPERUSER, "/bench", USER, "")
        for top in ("/bench/mkdirs", "/bench/files", "/bench/renamed", "/bench/wide"):
            for p in range((n + FANOUT - 1) // FANOUT):
                await fs.mkdirs(USER, f"{top}/p{p:04d}", 0o755, True)
        part = "in-process"

        t = await drive(
            lambda i: fs.mkdirs(USER, tree_path("/bench/mkdirs", i, "d"), 0o755, False), n, w
        )
        table.add(part, f"mkdirs ({w} writers)", "ops/s", t.rate, t.cpu_us)

        async def create(i: int, top: str = "/bench/files") -> None:
            path = tree_path(top, i, "f")
            await fs.create(USER, "bench-client", path, mode=0o644, replication=0,
                            block_size=0, overwrite=False, create_parents=False)
            await fs.complete(USER, "bench-client", path, [])

        flushes, txid = node.edits.flush_count, node.edits.last_txid
        t = await drive(create, n, w)
        per_fsync = (node.edits.last_txid - txid) / max(1, node.edits.flush_count - flushes)
        table.add(part, f"create = create + complete ({w} writers)", "files/s", t.rate,
                  t.cpu_us, aim=f">= {AIM_INPROC_CREATE:,}/s; {hdfs('create')}",
                  check=at_least(AIM_INPROC_CREATE))
        table.add(part, f"edits per fsync during create, {w} writers", "txns", per_fsync)
        wide = 4 * w  # more writers share each fsync: how far group commit carries
        flushes, txid = node.edits.flush_count, node.edits.last_txid
        t = await drive(lambda i: create(i, "/bench/wide"), n, wide)
        per_fsync = (node.edits.last_txid - txid) / max(1, node.edits.flush_count - flushes)
        table.add(part, f"create = create + complete ({wide} writers)", "files/s", t.rate,
                  t.cpu_us)
        table.add(part, f"edits per fsync during create, {wide} writers", "txns", per_fsync)

        order = list(range(n))
        random.Random(1).shuffle(order)
        t = drive_sync(lambda i: fs.stat(USER, tree_path("/bench/files", order[i], "f")), n)
        table.add(part, "stat (inline, no await)", "ops/s", t.rate, t.cpu_us,
                  aim=f">= {AIM_INPROC_STAT:,}/s", check=at_least(AIM_INPROC_STAT))
        t = drive_sync(
            lambda i: fs.block_locations(USER, tree_path("/bench/files", order[i], "f"), 0, -1),
            n,
        )
        table.add(part, "open = block_locations (inline)", "ops/s", t.rate, t.cpu_us,
                  aim=hdfs("open"))
        listed = "/bench/files/p0000"
        entries, _ = fs.list_dir(USER, listed, "", LIST_ENTRIES)
        assert len(entries) == min(n, LIST_ENTRIES), len(entries)
        t = drive_sync(lambda i: fs.list_dir(USER, listed, "", LIST_ENTRIES), s.list_calls)
        table.add(part, f"list {LIST_ENTRIES} entries, one page (inline)", "pages/s", t.rate,
                  t.cpu_us, note=f"({t.rate * LIST_ENTRIES:,.0f} entries/s)")

        t = await drive(
            lambda i: fs.rename(USER, tree_path("/bench/files", i, "f"),
                                tree_path("/bench/renamed", i, "f")),
            n, w,
        )
        table.add(part, f"rename ({w} writers)", "ops/s", t.rate, t.cpu_us,
                  aim=hdfs("rename"))
        t = await drive(
            lambda i: fs.delete(USER, tree_path("/bench/renamed", i, "f"), recursive=False,
                                skip_trash=True),
            n, w,
        )
        table.add(part, f"delete, skip trash ({w} writers)", "ops/s", t.rate, t.cpu_us,
                  aim=hdfs("delete"))
        t = await inproc_small_files(node, max(200, n // 4))
        table.add(part, f"small file: create_with_block + 2 reports + complete "
                  f"({SMALL_FILE_WRITERS} writers)", "files/s", t.rate, t.cpu_us)
    finally:
        await node.stop()
        shutil.rmtree(name_dir, ignore_errors=True)


async def inproc_small_files(node: NameNode, n: int) -> Timing:
    """Part (e)'s small-file calls without RPC: the block manager is told of 3 DataNodes
    and of each replica directly, so the row is the namesystem's and the block path's CPU."""
    assert node.fs is not None
    fs, blocks = node.fs, node.fs.blocks
    storage = dn.StorageReport(1 << 42, 0, 1 << 41)
    node_ids: dict[str, str] = {}
    for index in range(3):
        node_id, address = f"bench-dn{index}", f"127.0.0.1:{1 + index}"  # never dialled
        blocks.register(node_id, address, storage)
        blocks.block_report(node_id, 1, 0, 1, [])
        node_ids[address] = node_id
    for p in range((n + FANOUT - 1) // FANOUT):
        await fs.mkdirs(SUPERUSER, f"/small/p{p:04d}", 0o755, True)

    async def write(i: int) -> None:
        path = tree_path("/small", i, "f")
        created = await fs.create_with_block(SUPERUSER, "bench-writer", path, mode=0o644,
                                             replication=2, block_size=0, overwrite=False,
                                             create_parents=False)
        assert created.block is not None, "no target chosen"
        located = created.block
        block = BlockRecord(located.block.block_id, located.block.genstamp, SMALL_FILE_BYTES)
        for target in located.locations:
            blocks.incremental_report(node_ids[target], [block], [])
        await fs.complete(SUPERUSER, "bench-writer", path, [block])

    return await drive(write, n, SMALL_FILE_WRITERS)


# -- (b) over RPC ----------------------------------------------------------------------------



@dataclass(frozen=True)
class EditsFlushes:
    """The NameNode's group-commit flushes so far (its /metrics): a mutation is answered
    only once its flush is durable, so with 64 calls in flight a trial is bounded by the
    NameNode's CPU (busy near 100%) or by how long a flush takes to reach the disk."""

    count: float
    seconds: float
    txns: float

    @staticmethod
    def scrape(http_address: str) -> EditsFlushes:
        url = f"http://{http_address}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        samples = {sample.name: sample.value
                   for family in text_string_to_metric_families(text)
                   for sample in family.samples}
        return EditsFlushes(samples["xdfs_namenode_edits_sync_seconds_count"],
                            samples["xdfs_namenode_edits_sync_seconds_sum"],
                            samples["xdfs_namenode_edits_sync_batch_txns_sum"])

    def since(self, before: EditsFlushes) -> str:
        count = self.count - before.count
        if not count:
            return "no edits flushed"
        mean_ms = (self.seconds - before.seconds) / count * 1e3
        return (f"{count:,.0f} edits flushes of {mean_ms:.2f} ms mean, "
                f"{(self.txns - before.txns) / count:.0f} txns each")


def start_rpc_namenode(base: Path, *settings: str) -> ServerProcess:
    """A NameNode process on a fresh name dir; ``settings``: ``key=value`` configuration
    overrides (``-D``)."""
    name_dir = base / "rpc-nn"
    env = {"XDFS_USER": SUPERUSER, "XDFS_PASSWORD": SUPER_PASSWORD}
    fmt = ServerProcess.xdfs(
        "namenode", "--name-dir", str(name_dir), "-format",
        log_path=base / "rpc-format.log", ready_pattern=r"formatted ", env=env,
    )
    fmt.start(deadline_s=60)
    assert fmt.proc is not None
    fmt.proc.wait(60)
    overrides = [arg for setting in settings for arg in ("-D", setting)]
    nn = ServerProcess.xdfs(
        *overrides, "--log-level", "WARNING", "namenode", "--name-dir", str(name_dir),
        "--rpc-address", "127.0.0.1:0",
        log_path=base / "rpc-nn.log", ready_pattern=READY, env=env,
    )
    nn.start(deadline_s=60)
    return nn


async def rpc_part(s: Settings, table: Table, nn: ServerProcess, http_address: str) -> None:
    assert nn.match is not None
    uri = f"xdfs://{nn.match.group(1)}"
    config = XdfsConfig()
    async with AsyncClient(uri, user=SUPERUSER, password=SUPER_PASSWORD, config=config) as root:
        await root.add_user(USER, PASSWORD)
        await root.mkdirs("/bench")
        await root.set_owner("/bench", USER)
    part = "RPC"
    async with AsyncClient(uri, user=USER, password=PASSWORD, config=config) as client:
        for run_number in range(s.runs):
            for inflight, n in ((1, s.rpc_serial_ops), (s.writers, s.rpc_ops)):
                top = f"/bench/r{run_number}i{inflight}"
                for p in range((n + FANOUT - 1) // FANOUT):
                    await client.mkdirs(f"{top}/files/p{p:04d}")
                    await client.mkdirs(f"{top}/dirs/p{p:04d}")

                async def create(i: int, top: str = top) -> None:
                    path = tree_path(f"{top}/files", i, "f")
                    await client.create(path, create_parents=False)
                    await client.complete(path, [])

                def mkdirs(i: int, top: str = top) -> Awaitable[object]:
                    return client.mkdirs(tree_path(f"{top}/dirs", i, "d"), parents=False)

                order = list(range(n))
                random.Random(run_number).shuffle(order)

                def stat(i: int, top: str = top, order: list[int] = order) -> Awaitable[object]:
                    return client.stat(tree_path(f"{top}/files", order[i], "f"))

                for name, op, unit, aim, check in (
                    ("create = create + complete (2 RPCs)", create, "files/s",
                     f">= {AIM_RPC_CREATE_64:,}/s", AIM_RPC_CREATE_64),
                    ("mkdirs", mkdirs, "ops/s", "-", 0),
                    ("stat", stat, "ops/s", f">= {AIM_RPC_STAT_64:,}/s", AIM_RPC_STAT_64),
                ):
                    flushes = EditsFlushes.scrape(http_address)
                    server_cpu = proc_cpu_s(nn.pid)
                    t = await drive(op, n, inflight)
                    server_cpu = proc_cpu_s(nn.pid) - server_cpu
                    if inflight > 1 and op is not stat:
                        table.trials.append(
                            f"- {name}, {inflight} in flight, run {run_number + 1}: "
                            f"{t.rate:,.0f} {unit}; NN {server_cpu / n * 1e6:,.0f} us/op, "
                            f"busy {server_cpu / t.wall_s:.0%}; "
                            f"{EditsFlushes.scrape(http_address).since(flushes)}")
                    aimed = inflight > 1 and check > 0
                    table.add(part, f"{name}, {inflight} in flight", unit, t.rate,
                              server_cpu / n * 1e6, t.cpu_us, aim=aim if aimed else "-",
                              check=at_least(check) if aimed else None)


# -- (e) the NameNode's share of a small-file write ------------------------------------------

SMALL_FILE_BYTES = 200 * 1024
SMALL_FILE_WRITERS = 8  # as bench/small_file_probe.py: 8 threads writing 200 KiB files


async def small_file_part(s: Settings, table: Table, base: Path) -> None:
    """The NameNode calls of a small-file write (``create_with_block``, an incremental
    report from each of its 2 targets, ``complete``) from 8 writers at once, against a
    NameNode process, with 3 fake DataNodes here (their own connections, logged in with
    the DataNode secret as real ones; they store nothing). No DataNode data path: the
    NameNode's CPU per file alone, without the noise of the DataNodes' disks."""
    (base / "small").mkdir(exist_ok=True)
    nn = await asyncio.to_thread(start_rpc_namenode, base / "small")
    try:
        assert nn.match is not None
        address = nn.match.group(1)
        secret = (base / "small" / "rpc-nn" / DATANODE_SECRET_FILE).read_text().strip()
        config = XdfsConfig()
        nodes: dict[str, tuple[RpcClient, str]] = {}
        for index in range(3):
            node_id = f"bench-dn{index}"
            rpc = RpcClient([address], config.rpc, hello=Hello(
                PROTOCOL_VERSION, client_name=node_id, user=f"dn/{node_id}", password=secret))
            fake = f"127.0.0.1:{1 + index}"  # never dialled: the writers send no data
            await rpc.call(dn.REGISTER_DATANODE,
                           dn.RegisterRequest(node_id, fake, dn.StorageReport(1 << 42, 0, 1 << 41)))
            await rpc.call(dn.BLOCK_REPORT, dn.BlockReportRequest(node_id, 1, 0, 1, []))
            nodes[fake] = (rpc, node_id)
        async with AsyncClient(f"xdfs://{address}", user=SUPERUSER, password=SUPER_PASSWORD,
                               config=config) as client:
            n = max(200, s.rpc_ops // 4)
            for run_number in range(s.runs):
                top = f"/small/r{run_number}"
                for p in range((n + FANOUT - 1) // FANOUT):
                    await client.mkdirs(f"{top}/p{p:04d}")

                async def write(i: int, top: str = top) -> None:
                    path = tree_path(top, i, "f")
                    created = await client.create_with_block(path, replication=2)
                    assert created.block is not None, "no target chosen"
                    located = created.block
                    block = BlockRecord(located.block.block_id, located.block.genstamp,
                                        SMALL_FILE_BYTES)
                    reports = [
                        nodes[target][0].call(dn.INCREMENTAL_REPORT, dn.IncrementalReportRequest(
                            nodes[target][1], received=[block]))
                        for target in located.locations
                    ]
                    await asyncio.gather(*reports, client.complete(path, [block]))

                server_cpu = proc_cpu_s(nn.pid)
                t = await drive(write, n, SMALL_FILE_WRITERS)
                server_cpu = proc_cpu_s(nn.pid) - server_cpu
                table.add("small files", f"create_with_block + 2 reports + complete, "
                          f"{SMALL_FILE_WRITERS} writers", "files/s", t.rate,
                          server_cpu / n * 1e6, t.cpu_us)
        for rpc, _node_id in nodes.values():
            await rpc.close()
    finally:
        nn.terminate()


# -- (c) memory and (d) image ----------------------------------------------------------------


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def build_namespace(files: int, dirs: int = FANOUT) -> Namespace:
    """``dirs`` directories under /data, ``files`` files spread over them round robin,
    each added and closed through ``Namespace.apply`` as replay does."""
    ns = Namespace(SUPERUSER)
    now_ms = 1_700_000_000_000
    ns.apply(MkdirOp("/data", ns.allocate_inode_id(), 0o755, USER, "users", now_ms))
    for d in range(dirs):
        ns.apply(MkdirOp(f"/data/d{d:04d}", ns.allocate_inode_id(), 0o755, USER, "users",
                         now_ms))
    apply = ns.apply
    for i in range(files):
        path = f"/data/d{i % dirs:04d}/part-{i:07d}"
        mtime = now_ms + i  # every file its own timestamp, as in life
        apply(AddFileOp(path, ns.allocate_inode_id(), 0o644, USER, "users", mtime, 3,
                        128 << 20, "client-1"))
        apply(CloseFileOp(path, mtime, mtime, ()))
    return ns


def memory_part(s: Settings, table: Table) -> Namespace:
    part = "memory"
    gc.collect()
    before = rss_bytes()
    wall, cpu = time.perf_counter(), time.process_time()
    ns = build_namespace(s.files)
    t = Timing(2 * s.files, time.perf_counter() - wall, time.process_time() - cpu)
    gc.collect()
    grown = rss_bytes() - before
    assert ns.inode_count() == s.files + FANOUT + 2
    table.add(part, f"RSS growth per file, {s.files:,} files in {FANOUT} dirs", "bytes",
              grown / s.files, aim=f"<= {AIM_BYTES_PER_INODE}",
              check=at_most(AIM_BYTES_PER_INODE))
    table.add(part, "apply AddFile + CloseFile (replay, no I/O)", "ops/s", t.rate, t.cpu_us)

    sample = s.sample_files
    gc.collect()
    tracemalloc.start()
    try:
        small = build_namespace(0)
        gc.collect()
        base = tracemalloc.get_traced_memory()[0]
        apply = small.apply
        for i in range(sample):
            path = f"/data/d{i % FANOUT:04d}/part-{i:07d}"
            mtime = 1_700_000_000_000 + i
            apply(AddFileOp(path, small.allocate_inode_id(), 0o644, USER, "users", mtime, 3,
                            128 << 20, "client-1"))
            apply(CloseFileOp(path, mtime, mtime, ()))
        gc.collect()
        allocated = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    table.add(part, f"allocated per file (tracemalloc, {sample:,} files)", "bytes",
              allocated / sample, aim=f"<= {AIM_BYTES_PER_INODE}",
              check=at_most(AIM_BYTES_PER_INODE))
    del small
    return ns


def image_part(s: Settings, table: Table, ns: Namespace, base: Path) -> None:
    part = "image"
    name_dir = base / "image-nn"
    shutil.rmtree(name_dir, ignore_errors=True)
    format_namenode([name_dir], XdfsConfig().namenode, superuser=SUPERUSER,
                    password=SUPER_PASSWORD)
    storage = StorageDirectory(name_dir)
    inodes = ns.inode_count()
    try:
        for run_number in range(1, s.image_runs + 1):
            txid = run_number  # a newer image each run: load_namespace takes the newest
            gc.collect()
            wall = time.perf_counter()
            save_checkpoint([storage], ns, txid)
            save_s = time.perf_counter() - wall
            size = storage.image_path(txid).stat().st_size
            table.add(part, f"save {inodes:,} inodes (fsync)", "inodes/s", inodes / save_s)
            gc.collect()
            wall, cpu = time.perf_counter(), time.process_time()
            loaded, last_txid = load_namespace([storage], Namespace)
            load_s, load_cpu = time.perf_counter() - wall, time.process_time() - cpu
            assert last_txid == txid and loaded.inode_count() == inodes
            table.add(part, f"load {inodes:,} inodes (md5 verified, startup path)",
                      "inodes/s", inodes / load_s, load_cpu / inodes * 1e6,
                      aim=f">= {AIM_IMAGE_LOAD:,}/s", check=at_least(AIM_IMAGE_LOAD))
            del loaded
            table.add(part, "image size per inode", "bytes", size / inodes)
    finally:
        shutil.rmtree(name_dir, ignore_errors=True)


# -- against MooseFS ---------------------------------------------------------------------------


def vs_moosefs_part(s: Settings, base: Path) -> str:
    """The metadata part of bench/vs_moosefs.py, ``s.runs`` runs: its ratio table."""
    import vs_moosefs

    settings = vs_moosefs.Settings(
        runs=s.runs, dir_ops=800 if s.quick else 4000, file_mib=0, small_files=0,
        small_kib=0, parts={"metadata"}, base=base,
    )
    return vs_moosefs.bench(settings).markdown()


# -- report ----------------------------------------------------------------------------------




#: The four figures of issue 14 (its second bullet): (part, row name) as the table has them.
ISSUE_ROWS = (
    ("RPC", "async client, 64 in flight: create = create + complete",
     "create = create + complete (2 RPCs), {w} in flight"),
    ("RPC", "async client, 64 in flight: stat", "stat, {w} in flight"),
    ("in-process", "in-process, 64 writers: create = create + complete",
     "create = create + complete ({w} writers)"),
    ("in-process", "in-process: stat (inline)", "stat (inline, no await)"),
)


def issue_figures(table: Table, writers: int) -> str:
    """Issue 14's four throughput figures with their aims, met or MISSED (those measured)."""
    lines = []
    for part, label, name in ISSUE_ROWS:
        row = table.rows.get((part, name.format(w=writers)))
        if row is None or row.check is None:
            continue
        cpu = f", CPU {row.cpu_text()} us/op" if row.cpu_us else ""
        verdict = "met" if row.check(row.value()) else "MISSED"
        lines.append(f"- {label.replace('64', str(writers))}: {row.value():,.0f} {row.unit}"
                     f" (aim {row.aim}: {verdict}{cpu})")
    return "Issue 14:\n" + "\n".join(lines) if lines else ""


def anchors() -> str:
    return "\n".join([
        "Anchors: HDFS NNThroughputBenchmark, published, in-process: "
        + ", ".join(f"{op} {v:,} ops/s" for op, v in HDFS_ANCHORS.items()) + ".",
        f"Aims on this 2-core machine: in-process create >= {AIM_INPROC_CREATE:,}/s and stat "
        f">= {AIM_INPROC_STAT:,}/s; over RPC with 64 in flight >= {AIM_RPC_CREATE_64:,} "
        f"creates/s and >= {AIM_RPC_STAT_64:,} stats/s; <= {AIM_BYTES_PER_INODE} bytes per "
        f"file inode; image load >= {AIM_IMAGE_LOAD:,} inodes/s.",
    ])


async def bench(s: Settings, table: Table, base: Path) -> None:
    # Memory first, in a process that has not yet allocated and freed anything big, so the
    # RSS growth is not hidden by free memory the allocator already holds.
    if table.wanted("memory") or table.wanted("image"):
        ns = memory_part(s, table)
        if table.wanted("image"):
            image_part(s, table, ns, base)
        del ns
        gc.collect()
    if table.wanted("in-process"):
        for run_number in range(1, s.runs + 1):
            print(f"in-process run {run_number}/{s.runs}", file=sys.stderr, flush=True)
            await inproc_run(s, table, base)
    if table.wanted("small-files"):
        await small_file_part(s, table, base)
    if table.wanted("RPC"):
        http_address = f"127.0.0.1:{free_port()}"  # its /metrics: the edits flushes
        nn = await asyncio.to_thread(start_rpc_namenode, base,
                                     f"namenode.http_address={http_address}")
        try:
            await rpc_part(s, table, nn, http_address)
        finally:
            nn.terminate()


def parse_args(argv: Sequence[str] | None) -> Settings:
    parser = argparse.ArgumentParser(description="NameNode throughput, memory and image speed.")
    parser.add_argument("--quick", action="store_true", help="smaller counts, fewer runs")
    parser.add_argument("--runs", type=int, help="runs per figure, the median is shown (5)")
    parser.add_argument("--ops", type=int, help="in-process ops per operation and run (20000)")
    parser.add_argument("--rpc-ops", type=int, help="RPC ops per run, 64 in flight (10000)")
    parser.add_argument("--writers", type=int, default=64, help="concurrent callers (64)")
    parser.add_argument("--files", type=int, help="files of the memory/image namespace (1M)")
    parser.add_argument("--only", action="append", default=[], metavar="PART",
                        help="in-process, RPC, small-files, memory or image (repeatable)")
    parser.add_argument("--dir", default=None, help="where name dirs go (a temp dir)")
    parser.add_argument("--vs-moosefs", action="store_true",
                        help="only the fsspec metadata workload against MooseFS, side by side")
    parser.add_argument("--pure", action="store_true",
                        help="run the namespace's Python sources, not its mypyc build")
    args = parser.parse_args(argv)
    q = args.quick
    ops = args.ops or (5_000 if q else 20_000)
    rpc_ops = args.rpc_ops or (4_000 if q else 10_000)
    s = Settings(
        quick=q,
        runs=args.runs or (3 if q else 5),
        ops=ops,
        rpc_ops=rpc_ops,
        rpc_serial_ops=max(200, rpc_ops // 10),
        list_calls=max(100, ops // 50),
        writers=args.writers,
        files=args.files or (100_000 if q else 1_000_000),
        sample_files=20_000 if q else 50_000,
        image_runs=2 if q else 3,
        only=tuple(args.only),
        workdir=scratch_parent(args.dir),
        vs_moosefs=args.vs_moosefs,
        pure=args.pure,
    )
    if min(s.runs, s.ops, s.rpc_ops, s.writers, s.files) <= 0:
        parser.error("counts must be positive")
    return s


def main(argv: Sequence[str] | None = None) -> int:
    s = parse_args(argv)
    if s.pure and not native.pure_requested():
        # The choice is made when xdfs is imported, here and in the NameNode process: run
        # again with XDFS_PURE set (inherited by the NameNode).
        args = sys.argv[1:] if argv is None else list(argv)
        env = {**os.environ, native.PURE_ENV: "1"}
        os.execve(sys.executable, [sys.executable, __file__, *args], env)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    command = " ".join([".venv/bin/python bench/namenode.py",
                        *(sys.argv[1:] if argv is None else argv)])
    build = native.describe()
    print(f"machine: {machine()}\n{build}\nload average before: {load_average()}",
          file=sys.stderr)
    if s.vs_moosefs:
        with tempfile.TemporaryDirectory(prefix="xdfs-nnbench-", dir=s.workdir) as tmp:
            compared = vs_moosefs_part(s, Path(tmp))
        print(f"\ncommand: {command}\nmachine: {machine()}\n{build}")
        print(f"load average after (1/5/15 min): {load_average()}\n\n{compared}")
        return 0
    table = Table(s)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="xdfs-nnbench-", dir=s.workdir) as tmp:
        run(bench(s, table, Path(tmp)))
    elapsed = time.perf_counter() - started
    print(f"\ncommand: {command}")
    print(f"machine: {machine()}")
    print(build)
    print(f"load average after (1/5/15 min): {load_average()}; took {elapsed:.0f} s")
    print()
    print(table.markdown())
    print()
    print(anchors())
    figures = issue_figures(table, s.writers)
    if figures:
        print()
        print(figures)
    if table.trials:
        print("\nEach RPC trial of a mutation with calls in flight (NN busy near 100%: CPU "
              "bound; less: waiting for its edits flushes):")
        print("\n".join(table.trials))
    return 0


if __name__ == "__main__":
    sys.exit(main())
