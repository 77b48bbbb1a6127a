"""A second client's stat latency while a first floods the NameNode with creates: how
``rpc.frames_per_turn`` shares the event loop between connections.

    .venv/bin/python bench/namenode_fairness.py [--files 30000] [--rounds 2] [--dir D]

Client A keeps ``--inflight`` (256) create + complete pairs in flight on one connection;
client B, on another connection, stats one path, one call after the other, until A is done.
One NameNode process per setting, the settings alternating in each round (the machine's
load moves between runs: compare the rows of one round). Both clients share this process's
event loop, as two connections of one application would: B's latency includes waiting for
that loop, alike for every setting.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import time
from pathlib import Path

from bench_env import load_average, proc_cpu_s, scratch_run
from namenode import (
    FANOUT,
    PASSWORD,
    SUPER_PASSWORD,
    SUPERUSER,
    USER,
    drive,
    start_rpc_namenode,
    tree_path,
)
from xdfs.client.client import AsyncClient
from xdfs.config import XdfsConfig

#: frames_per_turn values compared: everything a read brought at once (the old behaviour)
#: against the default.
SETTINGS = (0, XdfsConfig().rpc.frames_per_turn)


def quantile_ms(sorted_s: list[float], q: float) -> float:
    return sorted_s[min(len(sorted_s) - 1, int(len(sorted_s) * q))] * 1e3


async def flood_and_stat(
    uri: str, pid: int, files: int, inflight: int
) -> tuple[float, float, list[float]]:
    """(A's files/s, the NameNode's CPU seconds meanwhile, B's stat latencies in seconds)."""
    async with AsyncClient(uri, user=SUPERUSER, password=SUPER_PASSWORD) as root:
        await root.add_user(USER, PASSWORD)
        await root.mkdirs("/bench")
        await root.set_owner("/bench", USER)
    async with (AsyncClient(uri, user=USER, password=PASSWORD) as flood,
                AsyncClient(uri, user=USER, password=PASSWORD) as prober):
        for parent in range((files + FANOUT - 1) // FANOUT):
            await flood.mkdirs(f"/bench/files/p{parent:04d}")
        await prober.mkdirs("/bench/probe")
        latencies: list[float] = []
        flooding = True

        async def probe() -> None:
            while flooding:
                started = time.perf_counter()
                await prober.stat("/bench/probe")
                latencies.append(time.perf_counter() - started)

        async def create(i: int) -> None:
            path = tree_path("/bench/files", i, "f")
            await flood.create(path, create_parents=False)
            await flood.complete(path, [])

        cpu_s = proc_cpu_s(pid)
        prober_task = asyncio.get_running_loop().create_task(probe())
        timing = await drive(create, files, inflight)
        flooding = False
        await prober_task
        cpu_s = proc_cpu_s(pid) - cpu_s
    return files / timing.wall_s, cpu_s, sorted(latencies)


def run_one(base: Path, frames_per_turn: int, files: int, inflight: int) -> str:
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    nn = start_rpc_namenode(base, f"rpc.frames_per_turn={frames_per_turn}")
    assert nn.match is not None
    try:
        rate, cpu_s, latencies = asyncio.run(
            flood_and_stat(f"xdfs://{nn.match.group(1)}", nn.pid, files, inflight))
    finally:
        nn.terminate()
    return (f"| {frames_per_turn} | {rate:,.0f} | {len(latencies):,} | "
            f"{statistics.median(latencies) * 1e3:.2f} | {quantile_ms(latencies, 0.9):.2f} | "
            f"{quantile_ms(latencies, 0.99):.2f} | {latencies[-1] * 1e3:.1f} | "
            f"{cpu_s / files * 1e6:,.0f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=30_000, help="files A creates (30000)")
    parser.add_argument("--inflight", type=int, default=256, help="A's calls in flight (256)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every setting (2)")
    parser.add_argument("--dir", default=None, help="where the name dirs go (a temp dir)")
    defaults = ",".join(map(str, SETTINGS))
    parser.add_argument("--values", default=defaults,
                        help=f"frames_per_turn values compared, comma-separated ({defaults})")
    args = parser.parse_args()
    values = [int(value) for value in args.values.split(",")]
    print(f"load average before: {load_average()}\n")
    print("| frames_per_turn | A's creates/s | B's stats | B p50 ms | p90 ms | p99 ms | "
          "max ms | NameNode CPU us per file |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    with scratch_run("xdfs-fair-", args.dir) as base:
        for _ in range(args.rounds):
            for frames_per_turn in values:
                print(run_one(base / "nn", frames_per_turn, args.files, args.inflight),
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
