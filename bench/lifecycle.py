"""DataNode lifecycle benchmark: time to decommission and to balance N GiB, and how much
each slows a foreground read/write loop, measured side by side in one run.

    .venv/bin/python bench/lifecycle.py              # 1 GiB of files (2 GiB of replicas)
    .venv/bin/python bench/lifecycle.py --gib 10     # the issue's 10 GiB

A NameNode and four DataNodes run as real processes (``python -m xdfs ...``; heartbeats
every second, monitors every half second), storage in ``--dir`` (default: a temporary
directory on the checkout's disk). ``--gib`` GiB are written as 64 MiB files (8 MiB
blocks) at replication 2. Then:

1. **foreground alone**: a loop writes an 8 MiB file (replication 2) and reads it back, for
   ``--window-s`` seconds: its MiB/s (written + read) is the baseline;
2. **decommission**: one DataNode goes into the exclude file and ``admin -refreshNodes``;
   the time until it is DECOMMISSIONED (every block it held copied elsewhere), with the
   foreground loop running meanwhile: its MiB/s then, as a ratio of the baseline. The node
   is then stopped, as an operator would;
3. **balance**: an empty DataNode is added and ``xdfs balancer -threshold 10`` runs (a real
   process, bandwidth ``--bandwidth``) until it exits balanced; time, bytes moved, and the
   foreground ratio during it (a fresh baseline right before, so load drift stays out).

Every DataNode reports ``datanode.capacity_bytes`` of ``--capacity-gib`` (they share one
disk). Nothing here is asserted by the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import datapath
from bench_env import load_average, machine
from xdfs.client.client import AsyncClient
from xdfs.config import MiB
from xdfs.rpc.loop import run
from xdfs.testing.poll import eventually

ENV = datapath.ENV
FILE_BYTES = 64 * MiB
LOOP_BYTES = 8 * MiB


@dataclass
class Settings:
    base: Path
    gib: float
    capacity_gib: float
    window_s: float
    bandwidth: int


class Cluster(datapath.Cluster):
    """datapath's cluster of processes, with an exclude file and DataNodes that report
    ``--capacity-gib``."""

    def __init__(self, s: Settings) -> None:
        super().__init__(s.base)
        self.s = s
        self.exclude = s.base / "exclude"

    def start(self, datanodes: int = 4, nn_options: Sequence[str] = ()) -> None:
        self.exclude.write_text("")
        super().start(datanodes, [
            "-D", "namenode.heartbeat_interval_s=1.0",
            "-D", "namenode.replication_check_interval_s=0.5",
            "-D", "namenode.decommission_check_interval_s=1.0",
            "-D", f"namenode.hosts_exclude_file={self.exclude}", *nn_options,
        ])

    def add_datanode(self, *options: str) -> str:
        capacity = int(self.s.capacity_gib * 1024 * MiB)
        return super().add_datanode("-D", f"datanode.capacity_bytes={capacity}", *options)


async def until(check: Callable[[], Awaitable[bool]]) -> None:
    await eventually(check, timeout_s=4 * 3600, what="the cluster", interval_s=0.2)


async def live(client: AsyncClient, count: int) -> None:
    async def enough() -> bool:
        report = await client.datanode_report()
        return sum(n.state == "live" for n in report.nodes) >= count

    await until(enough)


async def fill(client: AsyncClient, gib: float) -> None:
    data = os.urandom(FILE_BYTES)
    count = max(1, int(gib * 1024 * MiB // FILE_BYTES))
    slots = asyncio.Semaphore(2)

    async def one(i: int) -> None:
        async with slots:
            await client.write_file(f"/fill/f{i}", data, replication=2, block_size=8 * MiB)

    await asyncio.gather(*(one(i) for i in range(count)))


class Foreground:
    """The write-then-read loop; ``rate`` over the time it ran."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client
        self.bytes = 0
        self.stop = asyncio.Event()

    async def run(self) -> float:
        data = os.urandom(LOOP_BYTES)
        started = time.perf_counter()
        turn = 0
        while not self.stop.is_set():
            path = f"/fg/f{turn % 4}"
            await self.client.write_file(path, data, replication=2, overwrite=True)
            assert await self.client.read_file(path) == data
            self.bytes += 2 * len(data)
            turn += 1
        return self.bytes / MiB / (time.perf_counter() - started)


async def alone(client: AsyncClient, window_s: float) -> float:
    loop = Foreground(client)
    task = asyncio.ensure_future(loop.run())
    await asyncio.sleep(window_s)
    loop.stop.set()
    return await task


async def during(client: AsyncClient, work: Awaitable[None]) -> tuple[float, float]:
    """(seconds ``work`` took, foreground MiB/s meanwhile)."""
    loop = Foreground(client)
    task = asyncio.ensure_future(loop.run())
    started = time.perf_counter()
    await work
    took = time.perf_counter() - started
    loop.stop.set()
    return took, await task


async def decommission(cluster: Cluster, client: AsyncClient, address: str) -> None:
    cluster.exclude.write_text(f"{address}\n")
    await client.refresh_nodes()

    async def done() -> bool:
        info = [n for n in (await client.datanode_report()).nodes if n.address == address]
        return bool(info) and info[0].admin_state == "decommissioned"

    await until(done)


async def balance(cluster: Cluster, s: Settings) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "xdfs", "-D", "balancer.iteration_wait_s=2.0", "balancer",
        "-fs", f"xdfs://{cluster.address}", "-threshold", "10", "-bandwidth",
        str(s.bandwidth), env={**os.environ, **ENV},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    (cluster.base / "balancer.log").write_bytes(out)
    if proc.returncode != 0:
        raise RuntimeError(f"balancer exited {proc.returncode}: {out.decode()[-2000:]}")


async def bench(s: Settings) -> None:
    cluster = Cluster(s)
    cluster.start(4)
    try:
        async with cluster.client() as client:
            await live(client, 4)
            started = time.perf_counter()
            await fill(client, s.gib)
            print(f"wrote {s.gib} GiB (x2 replicas) in {time.perf_counter() - started:.1f} s")
            base = await alone(client, s.window_s)
            victim = cluster.datanodes[0].match
            assert victim is not None
            (held,) = [n.used_bytes for n in (await client.datanode_report()).nodes
                       if n.address == victim.group(1)]
            took, rate = await during(client, decommission(cluster, client, victim.group(1)))
            print(f"decommission of a node holding {held / MiB:.0f} MiB: {took:.1f} s; "
                  f"foreground {rate:.1f} MiB/s vs {base:.1f} alone (x{rate / base:.2f})")
            cluster.datanodes[0].terminate()
            cluster.add_datanode()
            await live(client, 4)
            await asyncio.sleep(3)  # heartbeats bring every node's usage
            base = await alone(client, s.window_s)
            took, rate = await during(client, balance(cluster, s))
            moved = (cluster.base / "balancer.log").read_text().strip().splitlines()[-1]
            print(f"balance: {took:.1f} s ({moved}); foreground {rate:.1f} MiB/s vs "
                  f"{base:.1f} alone (x{rate / base:.2f})")
    finally:
        cluster.stop()
    print(f"machine: {machine()}; load average after: {load_average()}")


def parse_args(argv: Sequence[str] | None) -> Settings:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=1.0, help="GiB of files to write")
    parser.add_argument("--capacity-gib", type=float, default=0.0,
                        help="capacity each DataNode reports (default: 2 x --gib)")
    parser.add_argument("--window-s", type=float, default=15.0,
                        help="how long the foreground baseline runs")
    parser.add_argument("--bandwidth", type=int, default=1 << 30, help="balancer bytes/s")
    parser.add_argument("--dir", default="", help="where the cluster keeps its data")
    args = parser.parse_args(argv)
    base = Path(args.dir or tempfile.mkdtemp(prefix="xdfs-bench-lifecycle-", dir=Path.cwd()))
    return Settings(base, args.gib, args.capacity_gib or 2 * args.gib, args.window_s,
                    args.bandwidth)


def main(argv: Sequence[str] | None = None) -> int:
    s = parse_args(argv)
    print(f"lifecycle benchmark: {s.gib} GiB, data in {s.base}")
    try:
        run(bench(s))
    finally:
        shutil.rmtree(s.base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
