"""xdfs against MooseFS, the same fsspec workload on both in one run (issue 14).

    .venv/bin/python bench/vs_moosefs.py                 # metadata and data, 3 runs
    .venv/bin/python bench/vs_moosefs.py --quick         # smaller counts, 1 run
    .venv/bin/python bench/vs_moosefs.py --only metadata # or: --only data

What runs, as a new user would run it:

* **xdfs**: ``xdfs dev`` (a NameNode and three DataNodes, replication 2) as a real process;
  the client is ``fsspec.filesystem("xdfs")`` configured by the ``client.toml`` it writes.
* **MooseFS**: a master, a metalogger and three chunkservers with goal 2
  (:mod:`moosefs_peer`), mounted through FUSE with the attribute and entry caches off, and
  the same loop through fsspec's local file system on the mount. When MooseFS cannot run
  here the script says why in one line and measures xdfs alone.

Metadata: one Python process with 1 and with 8 threads; each thread ``mkdir``s its own
directories, ``info``s them, then ``mv``s each to a new name. Data: one 1 GiB file written
in 4 MiB writes and read back (``--file-mib``), then ``--small-files`` files of 200 KiB
written and read from 8 threads. Each system is warmed up first (untimed calls, then a
pause), and before each timed phase both systems settle the same way (``os.sync()``, then
``--settle-s`` seconds): a phase is not charged for the previous one's background work,
such as MooseFS writing back the gigabyte it left in the page cache.

The data phases delete nothing: their files stay until both systems stop. On ext4 without a
journal (this project's test machines) every inode allocation walks past the inodes of its
block group freed in the last minute or more (``recently_deleted`` in the kernel's
``find_inode_bit``): after one system removed a few thousand replica or chunk files, the
other's file creates cost ~1 ms of CPU each instead of ~35 us, so whichever ran second was
charged for the first one's cleanup. The systems alternate within each run, every figure is the
median of ``--runs`` runs, and the ratio column is xdfs / MooseFS of those medians (above 1:
xdfs is faster). Nothing here is asserted by the test suite.
"""

from __future__ import annotations

import argparse
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

import fsspec
from fsspec import AbstractFileSystem

from bench_env import dev_cluster, file_create_cpu_us, load_average, machine, proc_cpu_s
from moosefs_peer import bench_peer

USER, PASSWORD = "bench", "bench-pw"
WRITE_BYTES = 4 * 1024 * 1024


@dataclass
class Settings:
    runs: int
    dir_ops: int
    file_mib: int
    small_files: int
    small_kib: int
    parts: set[str]
    base: Path
    settle_s: float = 5.0
    keep_base: bool = False  # main(): --dir given, the caller's directory is left as it is


@dataclass
class System:
    name: str
    fs: AbstractFileSystem
    root: str
    #: The system's own processes (for xdfs its NameNode and DataNodes; for MooseFS its
    #: master, metalogger, chunkservers and the FUSE daemon ``mfsmount``).
    server_pids: Callable[[], list[int]]


class Meter:
    """CPU seconds of this (client) process and of a system's processes since made."""

    def __init__(self, system: System) -> None:
        self._pids = system.server_pids()
        self._client = time.process_time()
        self._servers = self._servers_s()

    def _servers_s(self) -> float:
        return sum(proc_cpu_s(pid) for pid in self._pids)

    def per_op_us(self, ops: float) -> tuple[float, float]:
        """(client, servers) CPU microseconds per op since made."""
        return ((time.process_time() - self._client) / ops * 1e6,
                (self._servers_s() - self._servers) / ops * 1e6)


@dataclass
class Results:
    rates: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    #: CPU microseconds per op (per MiB for the large file) of this (client) process and
    #: of the system's own processes.
    cpu_us: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    server_cpu_us: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    #: Conditions of the run worth reading beside the figures (printed under the table).
    notes: list[str] = field(default_factory=list)

    def add(self, system: str, figure: str, rate: float, cpu_us: tuple[float, float]) -> None:
        key = (figure, system)
        self.rates.setdefault(key, []).append(rate)
        self.cpu_us.setdefault(key, []).append(cpu_us[0])
        self.server_cpu_us.setdefault(key, []).append(cpu_us[1])
        print(f"  {system:<8} {figure:<34} {rate:>12,.1f}   (CPU us/op: client "
              f"{cpu_us[0]:,.0f}, servers {cpu_us[1]:,.0f})", file=sys.stderr, flush=True)

    def median(self, figure: str, system: str) -> float | None:
        values = self.rates.get((figure, system))
        return statistics.median(values) if values else None

    @staticmethod
    def _cpu(table: dict[tuple[str, str], list[float]], figure: str) -> str:
        cells = [table.get((figure, system)) for system in ("moosefs", "xdfs")]
        return " / ".join(f"{statistics.median(c):,.0f}" if c else "-" for c in cells)

    def markdown(self) -> str:
        figures = list(dict.fromkeys(figure for figure, _ in self.rates))
        lines = ["| figure | MooseFS | xdfs | xdfs / MooseFS | CPU us/op* of the client, "
                 "MooseFS / xdfs | of the servers, MooseFS / xdfs |",
                 "|---|---|---|---|---|---|"]
        for figure in figures:
            mfs, xdfs = self.median(figure, "moosefs"), self.median(figure, "xdfs")
            ratio = f"**{xdfs / mfs:.2f}**" if mfs and xdfs else "-"
            lines.append(f"| {figure} | {_cell(mfs)} | {_cell(xdfs)} | {ratio} "
                         f"| {self._cpu(self.cpu_us, figure)} "
                         f"| {self._cpu(self.server_cpu_us, figure)} |")
        lines.append("\n\\* per MiB for the large file; the client is this Python process "
                     "(fsspec, and xdfs's client library), MooseFS's servers include its "
                     "FUSE daemon.")
        return "\n".join(lines)


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


# -- the workload --------------------------------------------------------------------------


def in_threads(system: System, threads: int,
               work: Callable[[int], int]) -> tuple[float, tuple[float, float]]:
    """Run ``work(thread_index)`` on ``threads`` threads: the ops per second of all of them,
    and the CPU microseconds per op of this process and of the system's."""
    started, meter = time.perf_counter(), Meter(system)
    with ThreadPoolExecutor(threads) as pool:
        ops = sum(pool.map(work, range(threads)))
    return ops / (time.perf_counter() - started), meter.per_op_us(ops)


def settle(s: Settings) -> None:
    """Before a timed phase: dirty pages written back, then a pause in which the last
    phase's background work ends (the metadata phases' removals, write-behind)."""
    os.sync()
    time.sleep(s.settle_s)


def metadata(system: System, s: Settings, threads: int, run: int, results: Results) -> None:
    top = f"{system.root}/meta-{run}-{threads}"
    system.fs.mkdir(top)
    settle(s)  # once: the metadata phases themselves leave no background work
    per_thread = max(1, s.dir_ops // threads)

    def names(t: int, stem: str) -> list[str]:
        return [f"{top}/t{t}-{stem}{i}" for i in range(per_thread)]

    def mkdir(t: int) -> int:
        for path in names(t, "d"):
            system.fs.mkdir(path)
        return per_thread

    def stat(t: int) -> int:
        for path in names(t, "d"):
            system.fs.info(path)
        return per_thread

    def rename(t: int) -> int:
        for old, new in zip(names(t, "d"), names(t, "r"), strict=True):
            system.fs.mv(old, new)
        return per_thread

    for op, work in (("mkdir", mkdir), ("stat", stat), ("rename", rename)):
        results.add(system.name, f"{op}/s, {threads} thread{'s' * (threads > 1)}",
                    *in_threads(system, threads, work))
    system.fs.rm(top, recursive=True)


def big_file(system: System, s: Settings, run: int, results: Results) -> None:
    path = f"{system.root}/big-{run}"
    chunk = os.urandom(WRITE_BYTES)
    count = s.file_mib * 1024 * 1024 // WRITE_BYTES
    settle(s)
    started, meter = time.perf_counter(), Meter(system)
    with system.fs.open(path, "wb") as fh:
        for _ in range(count):
            fh.write(chunk)
    results.add(system.name, f"{s.file_mib} MiB write, MB/s",
                count * WRITE_BYTES / 1e6 / (time.perf_counter() - started),
                meter.per_op_us(s.file_mib))
    settle(s)
    started, meter = time.perf_counter(), Meter(system)
    with system.fs.open(path, "rb") as fh:
        while fh.read(WRITE_BYTES):
            pass
    results.add(system.name, f"{s.file_mib} MiB read, MB/s",
                count * WRITE_BYTES / 1e6 / (time.perf_counter() - started),
                meter.per_op_us(s.file_mib))


def small_files(system: System, s: Settings, run: int, results: Results) -> None:
    top = f"{system.root}/small-{run}"
    system.fs.mkdir(top)
    body = os.urandom(s.small_kib * 1024)
    threads = 8
    per_thread = max(1, s.small_files // threads)

    def write(t: int) -> int:
        for i in range(per_thread):
            with system.fs.open(f"{top}/t{t}-{i}", "wb") as fh:
                fh.write(body)
        return per_thread

    def read(t: int) -> int:
        for i in range(per_thread):
            with system.fs.open(f"{top}/t{t}-{i}", "rb") as fh:
                assert len(fh.read()) == len(body)
        return per_thread

    label = f"{s.small_kib} KiB files"
    settle(s)
    create_us = file_create_cpu_us(s.base / f"create-probe-{system.name}-{run}")
    results.notes.append(f"run {run}, {system.name}: an empty-file create next to the data "
                         f"cost {create_us:,.0f} us of CPU before the small-file writes")
    results.add(system.name, f"{label} write/s, 8 threads", *in_threads(system, threads, write))
    settle(s)
    results.add(system.name, f"{label} read/s, 8 threads", *in_threads(system, threads, read))


# -- the two systems -----------------------------------------------------------------------


@contextmanager
def xdfs_dev(base: Path) -> Iterator[System]:
    with dev_cluster(base / "xdfs", 3, USER, PASSWORD) as cluster:
        fs = fsspec.filesystem("xdfs", skip_instance_cache=True, fs=cluster.uri, user=USER,
                               password=PASSWORD)
        yield System("xdfs", fs, "/bench", lambda: [cluster.pid, *cluster.pids()])


@contextmanager
def moosefs(base: Path) -> Iterator[System | None]:
    with bench_peer(base) as peer:
        yield None if peer is None else System(
            "moosefs", fsspec.filesystem("file", skip_instance_cache=True),
            str(peer.mount / "bench"), peer.pids)


def warm_up(system: System, ops: int = 300, settle_s: float = 3.0) -> None:
    """Untimed: a few hundred metadata calls and small files, then a pause, so neither
    system is measured while it is still starting (a fresh MooseFS master, or xdfs's
    DataNodes registering, is several times slower for its first seconds)."""
    top = f"{system.root}/warm-up"
    system.fs.mkdir(top)
    for i in range(ops):
        system.fs.mkdir(f"{top}/d{i}")
        system.fs.info(f"{top}/d{i}")
    for i in range(ops // 10):
        with system.fs.open(f"{top}/f{i}", "wb") as fh:
            fh.write(b"x" * 4096)
    system.fs.rm(top, recursive=True)
    time.sleep(settle_s)


def bench(s: Settings) -> Results:
    results = Results()
    with ExitStack() as stack:
        systems = [stack.enter_context(moosefs(s.base)), stack.enter_context(xdfs_dev(s.base))]
        present = [system for system in systems if system is not None]
        for system in present:
            system.fs.makedirs(system.root, exist_ok=True)
            warm_up(system)
        for run in range(s.runs):
            for system in present if run % 2 == 0 else present[::-1]:
                if "metadata" in s.parts:
                    for threads in (1, 8):
                        metadata(system, s, threads, run, results)
                if "data" in s.parts:
                    big_file(system, s, run, results)
                    small_files(system, s, run, results)
    return results


def parse_args(argv: Sequence[str] | None) -> Settings:
    parser = argparse.ArgumentParser(description="xdfs against MooseFS through fsspec.")
    parser.add_argument("--quick", action="store_true", help="smaller counts, one run")
    parser.add_argument("--runs", type=int, help="runs; each figure is the median (3)")
    parser.add_argument("--dir-ops", type=int, help="directories per metadata phase (4000)")
    parser.add_argument("--file-mib", type=int, help="size of the large file (1024)")
    parser.add_argument("--small-files", type=int, help="200 KiB files (1000)")
    parser.add_argument("--only", choices=("metadata", "data"), action="append", default=[])
    parser.add_argument("--settle-s", type=float, default=5.0,
                        help="pause after os.sync() before each timed phase (5)")
    parser.add_argument("--dir", default=None,
                        help="where both systems keep data (default: a temp dir, removed after)")
    args = parser.parse_args(argv)
    quick = args.quick
    base = Path(args.dir or tempfile.mkdtemp(prefix="xdfs-vs-mfs-"))
    return Settings(
        runs=args.runs or (1 if quick else 3),
        dir_ops=args.dir_ops or (800 if quick else 4000),
        file_mib=args.file_mib or (256 if quick else 1024),
        small_files=args.small_files or (200 if quick else 1000),
        small_kib=200,
        parts=set(args.only) or {"metadata", "data"},
        base=base,
        keep_base=args.dir is not None,
        settle_s=args.settle_s,
    )


def main(argv: Sequence[str] | None = None) -> int:
    s = parse_args(argv)
    load_before = load_average()
    try:
        results = bench(s)
    finally:
        if not s.keep_base:
            shutil.rmtree(s.base, ignore_errors=True)
    print(f"\n{machine()}; load before {load_before}, after {load_average()}")
    print(results.markdown())
    for note in results.notes:
        print(f"- {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
