"""Does the NameNode keep answering while it walks the whole namespace? (issue 14)

    .venv/bin/python bench/namenode_pauses.py                  # 1M inodes
    .venv/bin/python bench/namenode_pauses.py --inodes 200000  # smaller

A namespace of ``--inodes`` inodes (``/big``: 1000 directories of empty files) is built off
RPC (:func:`xdfs.testing.big_namespace.grow_image`, straight into ``fsimage_0``), then a
NameNode process (``python -m xdfs namenode``) starts on it. From this process one client
connection keeps ``--in-flight`` stat calls of random files in flight, and the latency of
every stat is recorded, per phase, in the same run:

* ``idle``: nothing else runs (``--idle-s`` seconds), the baseline;
* ``saveNamespace``: ``admin -saveNamespace`` runs (the image is written by a forked child);
* ``fsck /``: fsck of the whole namespace (in slices, rate-limited by
  ``namenode.fsck_rate_inodes_per_s``);
* ``count /``: the content summary of ``/`` (``-count``/``-du``: in slices);
* ``idle`` again at the end.

The walk's own call runs on a second connection. Printed: stats done, p50 / p99 / max
latency of each phase and its p99 over the first idle phase's; the walk's duration. Nothing
here is asserted by the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from bench_env import load_average, machine, percentile, proc_cpu_s, scratch_parent
from xdfs.client.client import AsyncClient
from xdfs.common.process import ServerProcess
from xdfs.config import XdfsConfig
from xdfs.namenode.image.format import format_namenode
from xdfs.testing.big_namespace import grow_image

SUPERUSER, SUPER_PASSWORD = "root", "rootpw"
READY = r"namenode serving on (\S+)"
DIRS = 1000


class StatLoop:
    """``in_flight`` workers stat random files until stopped; latencies per phase (ms)."""

    def __init__(self, client: AsyncClient, dirs: int, files_per_dir: int, in_flight: int):
        self.client = client
        self.dirs, self.files_per_dir = dirs, files_per_dir
        self.in_flight = in_flight
        self.phase = "warm-up"
        self.latencies: dict[str, list[float]] = {}
        self._stop = False

    async def _worker(self, seed: int) -> None:
        rng = random.Random(seed)
        while not self._stop:
            path = (f"/big/d{rng.randrange(self.dirs):06d}/"
                    f"f{rng.randrange(self.files_per_dir):06d}")
            phase = self.phase
            started = time.perf_counter()
            await self.client.stat(path)
            self.latencies.setdefault(phase, []).append((time.perf_counter() - started) * 1e3)

    async def run(self) -> None:
        await asyncio.gather(*(self._worker(i) for i in range(self.in_flight)))

    def stop(self) -> None:
        self._stop = True


async def phase(loop: StatLoop, name: str, work: Callable[[], Awaitable[object]]) -> float:
    loop.phase = name
    started = time.perf_counter()
    await work()
    elapsed = time.perf_counter() - started
    loop.phase = "between"
    await asyncio.sleep(0.5)  # let the NameNode settle (the child's exit, the purge)
    return elapsed


async def bench(args: argparse.Namespace, base: Path) -> list[str]:
    files_per_dir = max(1, (args.inodes - 1 - DIRS) // DIRS)
    name_dirs = [base / "nn"]
    format_namenode(name_dirs, XdfsConfig().namenode, superuser=SUPERUSER,
                    password=SUPER_PASSWORD)
    built = time.perf_counter()
    added = grow_image(name_dirs, "big", DIRS, files_per_dir)
    print(f"built {added} inodes in {time.perf_counter() - built:.1f} s", file=sys.stderr)
    env = {"XDFS_USER": SUPERUSER, "XDFS_PASSWORD": SUPER_PASSWORD}
    nn = ServerProcess.xdfs(
        "--log-level", "INFO", "namenode", "--name-dir", str(name_dirs[0]),
        "--rpc-address", "127.0.0.1:0", log_path=base / "nn.log", ready_pattern=READY, env=env,
    )
    nn.start(deadline_s=600)
    try:
        assert nn.match is not None
        rows = await measure(args, nn, f"xdfs://{nn.match.group(1)}", files_per_dir, added)
    finally:
        nn.terminate()
    forks = re.findall(r"the NameNode paused ([0-9.]+) ms", nn.log_text())
    return [*rows, "", f"the fork of the image writer paused the NameNode {', '.join(forks)} ms"]


async def measure(args: argparse.Namespace, nn: ServerProcess, uri: str, files_per_dir: int,
                  added: int) -> list[str]:
    config = XdfsConfig()
    async with (AsyncClient(uri, user=SUPERUSER, password=SUPER_PASSWORD, config=config) as c,
                AsyncClient(uri, user=SUPERUSER, password=SUPER_PASSWORD, config=config) as w):
        await c.stat("/")
        await w.stat("/")
        loop = StatLoop(c, DIRS, files_per_dir, args.in_flight)
        stats = asyncio.create_task(loop.run())
        await asyncio.sleep(1.0)
        walks: dict[str, float] = {}
        idle: Callable[[], Awaitable[None]] = lambda: asyncio.sleep(args.idle_s)  # noqa: E731
        walks["idle"] = await phase(loop, "idle", idle)
        await w.mkdirs("/bench/after-the-image")  # so the save has a new txid to write
        cpu = proc_cpu_s(nn.pid)
        walks["saveNamespace"] = await phase(loop, "saveNamespace", w.save_namespace)
        save_cpu = proc_cpu_s(nn.pid) - cpu
        rss_mib = _rss_bytes(nn.pid) / 2**20
        walks["fsck /"] = await phase(loop, "fsck /", lambda: w.fsck("/"))
        walks["count /"] = await phase(loop, "count /", lambda: w.content_summary("/"))
        walks["idle (end)"] = await phase(loop, "idle (end)", idle)
        loop.stop()
        await stats
    base_p99 = percentile(loop.latencies["idle"], 99)
    rows = [
        f"namespace: {added + 4} inodes; stat loop: {args.in_flight} in flight, one connection; "
        f"NameNode RSS {rss_mib:,.0f} MiB; its CPU during the save (parent only; the child "
        f"writes): {save_cpu:.2f} s",
        "",
        "| phase | took s | stats | stats/s | p50 ms | p99 ms | max ms | p99 / idle p99 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, took in walks.items():
        values = loop.latencies.get(name, [])
        if not values:
            rows.append(f"| {name} | {took:.2f} | 0 | - | - | - | - | - |")
            continue
        p99 = percentile(values, 99)
        rows.append(
            f"| {name} | {took:.2f} | {len(values)} | {len(values) / took:,.0f} | "
            f"{percentile(values, 50):.2f} | {p99:.2f} | {max(values):.2f} | "
            f"{p99 / base_p99:.2f} |"
        )
    return rows


def _rss_bytes(pid: int) -> int:
    pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inodes", type=int, default=1_000_000)
    parser.add_argument("--in-flight", type=int, default=8)
    parser.add_argument("--idle-s", type=float, default=3.0)
    parser.add_argument("--workdir", default=None, help="where the name dir goes (tmp)")
    args = parser.parse_args(argv)
    if args.inodes < 10 * DIRS or args.in_flight < 1:
        parser.error(f"--inodes must be >= {10 * DIRS}, --in-flight >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    command = " ".join([".venv/bin/python bench/namenode_pauses.py",
                        *(sys.argv[1:] if argv is None else argv)])
    load_before = load_average()
    started = time.perf_counter()
    parent = scratch_parent(args.workdir)
    with tempfile.TemporaryDirectory(prefix="xdfs-pauses-", dir=parent) as tmp:
        rows = asyncio.run(bench(args, Path(tmp)))
    print(f"\ncommand: {command}")
    print(f"machine: {machine()}")
    print(f"load average before: {load_before}; after (1/5/15 min): {load_average()}; "
          f"took {time.perf_counter() - started:.0f} s")
    print()
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
