"""``xdfs mount`` against xdfs's own client and MooseFS's ``mfsmount`` (issue 41).

    .venv/bin/python bench/mount.py            # 3 runs
    .venv/bin/python bench/mount.py --quick    # smaller counts, 1 run

The same workload on each, in one run:

* **mount**: ``xdfs dev`` (a NameNode, three DataNodes, replication 2) mounted with
  ``xdfs mount -o attr_timeout=0,entry_timeout=0`` (uncached, as MooseFS is mounted here),
  driven by plain POSIX calls: ``os.mkdir``, ``os.stat``, ``os.rename``,
  ``open``/``write``/``close``.
* **client**: the same cluster through ``xdfs.Client`` (``mkdirs``, ``stat``, ``rename``,
  ``write_file``, ``read_file``): what FUSE costs.
* **moosefs**: a MooseFS master, metalogger and three chunkservers with goal 2
  (:mod:`moosefs_peer`), ``mfsmount`` with its caches off, the same POSIX calls; each file is
  fsynced before close (an xdfs close is durable). Skipped, with the reason, where MooseFS
  cannot run.

Metadata: ``--dir-ops`` directories made, stat'ed, renamed, from 1 and from 8 threads.
Data: ``--small-files`` files of 200 KiB written and read from 8 threads, and one
``--big-mib`` MiB file written in 1 MiB writes and read back. Page caches are dropped before
each read phase (as root), and the systems alternate from run to run; each figure is the
median of ``--runs``. Nothing here is asserted by the test suite.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bench_env import dev_cluster, load_average, machine
from moosefs_peer import bench_peer
from xdfs.client.client import Client
from xdfs.common.process import ServerProcess

USER, PASSWORD = "bench", "bench-pw"
MiB = 1024 * 1024
SYSTEMS = ("mount", "client", "moosefs")


@dataclass
class Settings:
    runs: int
    dir_ops: int
    small_files: int
    big_mib: int
    base: Path


@dataclass
class Target:
    """One system as the workload sees it: paths under ``root`` and six calls."""

    name: str
    root: str
    mkdir: Callable[[str], object]
    stat: Callable[[str], object]
    rename: Callable[[str, str], object]
    write: Callable[[str, bytes], object]
    read: Callable[[str], bytes]


def posix_target(name: str, root: Path, *, fsync: bool) -> Target:
    def write(path: str, data: bytes) -> None:
        with open(path, "wb", buffering=0) as out:
            for start in range(0, len(data), MiB):
                out.write(data[start:start + MiB])
            if fsync:
                os.fsync(out.fileno())

    def read(path: str) -> bytes:
        with open(path, "rb", buffering=0) as source:
            return source.read()

    return Target(name, str(root), os.mkdir, os.stat, os.rename, write, read)


def client_target(client: Client, root: str) -> Target:
    return Target("client", root, client.mkdirs, client.stat, client.rename,
                  client.write_file, client.read_file)


@dataclass
class Results:
    rates: dict[tuple[str, str], list[float]] = field(default_factory=dict)

    def add(self, system: str, figure: str, rate: float) -> None:
        self.rates.setdefault((figure, system), []).append(rate)
        print(f"  {system:<8} {figure:<32} {rate:>12,.1f}", file=sys.stderr, flush=True)

    def median(self, figure: str, system: str) -> float | None:
        values = self.rates.get((figure, system))
        return statistics.median(values) if values else None

    def markdown(self) -> str:
        lines = ["| figure | mount | client | mount / client | mfsmount | mount / mfsmount |",
                 "|---|---|---|---|---|---|"]
        for figure in dict.fromkeys(figure for figure, _ in self.rates):
            mount, client, mfs = (self.median(figure, name) for name in SYSTEMS)
            lines.append(f"| {figure} | {_cell(mount)} | {_cell(client)} "
                         f"| {_ratio(mount, client)} | {_cell(mfs)} | {_ratio(mount, mfs)} |")
        return "\n".join(lines)


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"


def _ratio(a: float | None, b: float | None) -> str:
    return f"**{a / b:.2f}**" if a and b else "-"


def drop_caches() -> None:
    os.sync()
    with contextlib.suppress(OSError):  # not root: reads may come from the page cache
        Path("/proc/sys/vm/drop_caches").write_text("3\n")


def timed(threads: int, work: Callable[[int], int]) -> float:
    """Operations per second of ``work(thread_index)`` on ``threads`` threads."""
    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        ops = sum(pool.map(work, range(threads)))
    return ops / (time.perf_counter() - started)


def metadata(target: Target, s: Settings, threads: int, run: int, results: Results) -> None:
    top = f"{target.root}/meta-{run}-{threads}"
    target.mkdir(top)
    per_thread = max(1, s.dir_ops // threads)

    def names(t: int, stem: str) -> list[str]:
        return [f"{top}/t{t}-{stem}{i}" for i in range(per_thread)]

    def each(call: Callable[[str], object], stem: str) -> Callable[[int], int]:
        def work(t: int) -> int:
            for path in names(t, stem):
                call(path)
            return per_thread
        return work

    def rename(t: int) -> int:
        for old, new in zip(names(t, "d"), names(t, "r"), strict=True):
            target.rename(old, new)
        return per_thread

    label = f"{threads} thread{'s' * (threads > 1)}"
    results.add(target.name, f"mkdir/s, {label}", timed(threads, each(target.mkdir, "d")))
    results.add(target.name, f"stat/s, {label}", timed(threads, each(target.stat, "d")))
    results.add(target.name, f"rename/s, {label}", timed(threads, rename))


def small_files(target: Target, s: Settings, run: int, results: Results) -> None:
    top = f"{target.root}/small-{run}"
    target.mkdir(top)
    body = os.urandom(200 * 1024)
    per_thread = max(1, s.small_files // 8)

    def write(t: int) -> int:
        for i in range(per_thread):
            target.write(f"{top}/t{t}-{i}", body)
        return per_thread

    def read(t: int) -> int:
        for i in range(per_thread):
            assert len(target.read(f"{top}/t{t}-{i}")) == len(body)
        return per_thread

    results.add(target.name, "200 KiB files write/s, 8 threads", timed(8, write))
    drop_caches()
    results.add(target.name, "200 KiB files read/s, 8 threads", timed(8, read))


def big_file(target: Target, s: Settings, run: int, results: Results) -> None:
    path = f"{target.root}/big-{run}"
    data = os.urandom(s.big_mib * MiB)
    started = time.perf_counter()
    target.write(path, data)
    results.add(target.name, f"{s.big_mib} MiB write, MB/s",
                len(data) / 1e6 / (time.perf_counter() - started))
    drop_caches()
    started = time.perf_counter()
    assert len(target.read(path)) == len(data)
    results.add(target.name, f"{s.big_mib} MiB read, MB/s",
                len(data) / 1e6 / (time.perf_counter() - started))


# -- the systems ---------------------------------------------------------------------------


@contextmanager
def xdfs_targets(base: Path) -> Iterator[list[Target]]:
    with dev_cluster(base / "xdfs", 3, USER, PASSWORD) as cluster:
        where = base / "xdfs-mnt"
        where.mkdir()
        mount = ServerProcess.xdfs(
            "mount", str(where), "--foreground", "-o", "attr_timeout=0,entry_timeout=0",
            log_path=base / "mount.log", ready_pattern="xdfs mounted on",
            env={"XDFS_FS": cluster.uri, "XDFS_USER": USER, "XDFS_PASSWORD": PASSWORD})
        mount.start(60)
        client = Client(cluster.uri, user=USER, password=PASSWORD)
        try:
            client.mkdirs("/bench-mount")
            client.mkdirs("/bench-client")
            yield [posix_target("mount", where / "bench-mount", fsync=False),
                   client_target(client, "/bench-client")]
        finally:
            client.close()
            mount.terminate(60)


@contextmanager
def moosefs_target(base: Path) -> Iterator[list[Target]]:
    with bench_peer(base) as peer:
        yield [] if peer is None else [posix_target("moosefs", peer.mount / "bench",
                                                    fsync=True)]


def bench(s: Settings) -> Results:
    results = Results()
    with ExitStack() as stack:
        targets = [*stack.enter_context(moosefs_target(s.base)),
                   *stack.enter_context(xdfs_targets(s.base))]
        for run in range(s.runs):
            for target in targets if run % 2 == 0 else targets[::-1]:
                for threads in (1, 8):
                    metadata(target, s, threads, run, results)
                small_files(target, s, run, results)
                big_file(target, s, run, results)
    return results


def parse_args(argv: Sequence[str] | None) -> Settings:
    parser = argparse.ArgumentParser(description="xdfs mount against its client and mfsmount.")
    parser.add_argument("--quick", action="store_true", help="smaller counts, one run")
    parser.add_argument("--runs", type=int, help="runs; each figure is the median (3)")
    parser.add_argument("--dir-ops", type=int, help="directories per metadata phase (2000)")
    parser.add_argument("--small-files", type=int, help="200 KiB files (800)")
    parser.add_argument("--big-mib", type=int, default=64, help="the large file, MiB (64)")
    args = parser.parse_args(argv)
    return Settings(
        runs=args.runs or (1 if args.quick else 3),
        dir_ops=args.dir_ops or (400 if args.quick else 2000),
        small_files=args.small_files or (160 if args.quick else 800),
        big_mib=args.big_mib,
        base=Path(tempfile.mkdtemp(prefix="xdfs-bench-mount-")),
    )


def main(argv: Sequence[str] | None = None) -> int:
    s = parse_args(argv)
    load_before = load_average()
    try:
        results = bench(s)
    finally:
        shutil.rmtree(s.base, ignore_errors=True)
    print(f"\n{machine()}; load before {load_before}, after {load_average()}")
    print(results.markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main())
