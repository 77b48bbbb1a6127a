"""What one lone NameNode call costs: calls made one after another (1 in flight) against a
NameNode process, with its CPU, voluntary context switches (every thread) and block I/O
requests per call.

    .venv/bin/python bench/namenode_lone.py [--ops 2000] [--dir /sfclean/me]

Context switches and block requests move little with the machine's load, unlike CPU time
and rates: they compare two versions even on a busy machine (run this in each checkout).
A mutation's switches: the edits thread woken and asleep again, the loop asleep while the
fdatasync runs, the fdatasync's own disk waits; a stat has only the loop's wait for the
next request.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from bench_env import proc_cpu_s, scratch_run
from namenode import SUPER_PASSWORD, SUPERUSER, start_rpc_namenode
from xdfs.client.client import AsyncClient
from xdfs.config import XdfsConfig

FILE_DIRS = 200


def voluntary_switches(pid: int) -> int:
    """Voluntary context switches of every thread of ``pid`` so far."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        for line in Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines():
            if line.startswith("voluntary_ctxt_switches"):
                total += int(line.split()[1])
    return total


def kernel_worker_cpu_s() -> dict[int, float]:
    """CPU seconds of each kernel worker thread (``kworker/*``) so far: where an fsync
    handed to the kernel (Linux AIO) runs, outside the NameNode's own threads. Shared by the
    whole machine: other processes' writeback lands here too."""
    seconds: dict[int, float] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if not Path(f"/proc/{pid}/comm").read_text().startswith("kworker"):
                continue
        except OSError:
            continue
        seconds[int(pid)] = proc_cpu_s(int(pid))
    return seconds


def kernel_worker_cpu_since(before: dict[int, float]) -> float:
    """Kernel workers' CPU seconds since ``before``: workers come and go, so per worker
    (a new one counts from zero; one gone meanwhile is not counted)."""
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in kernel_worker_cpu_s().items())


class BlockRequests:
    """Block I/O requests issued on the whole machine while the calls run, counted by
    ``perf stat -a`` (None without perf): an fsync handed to the kernel (Linux AIO) issues
    its requests from a kernel worker, not from the NameNode."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.proc: subprocess.Popen[bytes] | None = None
        if shutil.which("perf"):
            self.proc = subprocess.Popen(
                ["perf", "stat", "-x,", "-e", "block:block_rq_issue", "-o", str(out),
                 "-a"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        self.proc.send_signal(2)
        self.proc.wait(30)
        for line in self.out.read_text().splitlines():
            if "block_rq_issue" in line:
                return int(line.split(",")[0])
        return None


async def measure(base: Path, ops: int) -> None:
    nn = start_rpc_namenode(base)
    assert nn.match is not None
    uri = f"xdfs://{nn.match.group(1)}"
    try:
        async with AsyncClient(uri, user=SUPERUSER, password=SUPER_PASSWORD,
                               config=XdfsConfig()) as client:
            await client.mkdirs("/lone/x")
            for d in range(FILE_DIRS):
                await client.mkdirs(f"/lone/f{d}")

            async def stat(i: int) -> None:
                await client.stat("/lone/x")

            async def mkdirs(i: int) -> None:
                await client.mkdirs(f"/lone/d{i}", parents=False)

            async def create(i: int) -> None:
                path = f"/lone/f{i % FILE_DIRS}/f{i}"
                await client.create(path, create_parents=False)
                await client.complete(path, [])

            calls: list[tuple[str, Callable[[int], Awaitable[None]]]] = [
                ("stat", stat), ("mkdirs", mkdirs), ("create + complete", create)]
            print("| call, 1 in flight | calls/s | NameNode CPU us | client CPU us | "
                  "kernel workers' CPU us | NameNode voluntary switches | block requests |")
            print("|---|---:|---:|---:|---:|---:|---:|")
            for name, call in calls:
                blocks = BlockRequests(base / "perf-stat.txt")
                await asyncio.sleep(0.5)  # perf attached
                cpu, switches = proc_cpu_s(nn.pid), voluntary_switches(nn.pid)
                workers = kernel_worker_cpu_s()
                started, client_cpu = time.perf_counter(), time.process_time()
                for i in range(ops):
                    await call(i)
                elapsed = time.perf_counter() - started
                client_cpu = time.process_time() - client_cpu
                cpu = proc_cpu_s(nn.pid) - cpu
                switches = voluntary_switches(nn.pid) - switches
                workers_s = kernel_worker_cpu_since(workers)
                requests = blocks.stop()
                shown = "-" if requests is None else f"{requests / ops:.2f}"
                print(f"| {name} | {ops / elapsed:,.0f} | {cpu / ops * 1e6:,.0f} | "
                      f"{client_cpu / ops * 1e6:,.0f} | {workers_s / ops * 1e6:,.0f} | "
                      f"{switches / ops:.2f} | {shown} |")
    finally:
        nn.terminate()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ops", type=int, default=2000, help="calls per kind (2000)")
    parser.add_argument("--dir", default=None, help="where the name dir goes (a temp dir)")
    args = parser.parse_args()
    with scratch_run("xdfs-lone-", args.dir) as base:
        asyncio.run(measure(base, args.ops))
    return 0


if __name__ == "__main__":
    sys.exit(main())
