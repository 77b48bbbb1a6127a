"""Where a small-file write's CPU goes, process by process (issue 14).

    .venv/bin/python bench/small_file_probe.py                     # 1000 x 200 KiB, 8 threads
    .venv/bin/python bench/small_file_probe.py --idle-s 12         # spares stocked first
    .venv/bin/python bench/small_file_probe.py --big-mib 1024      # one large file instead
    .venv/bin/python bench/small_file_probe.py --spy datanode      # py-spy --gil profiles
    .venv/bin/python bench/small_file_probe.py --strace namenode   # strace -c -f counts
    .venv/bin/python bench/small_file_probe.py --perf datanode     # perf record -g
    .venv/bin/python bench/small_file_probe.py --phases            # where a file waits

Starts ``xdfs dev`` (a NameNode and three DataNodes, replication 2) in ``--dir``, writes 100
small warm-up files, waits ``--idle-s`` seconds (the DataNodes make spare files while idle:
their stock at the start is printed), then writes ``--files`` files of ``--kib`` KiB from
``--threads`` threads through fsspec, as ``bench/vs_moosefs.py`` does. Prints the rate and,
for each process (the NameNode, each DataNode, this client), CPU microseconds per file,
user and system, and minor page faults per file. The cluster's directory is removed at the
end: a next run's creates then follow deletions (see docs/benchmarks.md, "Against
MooseFS"). Profiles and counts go to ``--out`` (py-spy: ``spy-<process>.txt``, raw format
with ``--gil``; strace: ``strace-<process>.txt``; perf: ``perf-<process>.data``, read with
``perf report -i FILE --no-children --sort sym --stdio``). ``--phases`` times each small
file's steps in the client (the open, which creates it at the NameNode; the close's send
to its DataNodes, their first answer, ``complete``, the other answers) and prints their
percentiles. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fsspec

from bench_env import dev_cluster, load_average, machine, scratch_parent

USER, PASSWORD = "probe", "probe-pw"
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Usage:
    """CPU seconds (user, system) and minor faults of a process so far."""

    user_s: float
    sys_s: float
    minor_faults: int

    @staticmethod
    def of(pid: int) -> Usage:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return Usage(int(fields[11]) / _TICKS_PER_S, int(fields[12]) / _TICKS_PER_S,
                     int(fields[7]))

    @staticmethod
    def mine() -> Usage:
        own = resource.getrusage(resource.RUSAGE_SELF)
        return Usage(own.ru_utime, own.ru_stime, own.ru_minflt)

    def row(self, before: Usage, name: str, files: int) -> str:
        user_us = (self.user_s - before.user_s) / files * 1e6
        sys_us = (self.sys_s - before.sys_s) / files * 1e6
        faults = (self.minor_faults - before.minor_faults) / files
        return (f"| {name} | {user_us + sys_us:,.0f} | {user_us:,.0f} | {sys_us:,.0f} "
                f"| {faults:.1f} |")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--files", type=int, default=1000, help="small files (1000)")
    parser.add_argument("--kib", type=int, default=200, help="size of each, KiB (200)")
    parser.add_argument("--threads", type=int, default=8, help="writer threads (8)")
    parser.add_argument("--big-mib", type=int, default=0,
                        help="write one file of this many MiB (4 MiB writes) instead")
    parser.add_argument("--idle-s", type=float, default=2.0,
                        help="pause after the warm-up (2; 12+ lets the spares stock up)")
    choices = ("namenode", "datanode")
    parser.add_argument("--spy", choices=(*choices, "client"), help="py-spy every such process")
    parser.add_argument("--strace", choices=choices, help="strace -c -f the first such process")
    parser.add_argument("--perf", choices=choices, help="perf record -g the first such process")
    parser.add_argument("--phases", action="store_true",
                        help="time each small file's steps in the client (percentiles)")
    parser.add_argument("--out", default=".", help="where profiles and counts go (.)")
    parser.add_argument("--dir", default=None,
                        help="parent of the cluster's directory (default: the temp dir)")
    return parser.parse_args(argv)


def start_tools(args: argparse.Namespace, roles: dict[int, str]) -> list[subprocess.Popen[bytes]]:
    """The profilers asked for, attached to their processes (given a second to start)."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    first = {role.rstrip("0123456789"): pid for pid, role in reversed(roles.items())}
    argvs: list[list[str]] = []
    if args.strace:
        argvs.append(["strace", "-c", "-f", "-o", str(out / f"strace-{args.strace}.txt"),
                      "-p", str(first[args.strace])])
    if args.perf:
        argvs.append(["perf", "record", "-g", "-F", "2000", "-o",
                      str(out / f"perf-{args.perf}.data"), "-p", str(first[args.perf])])
    if args.spy:
        spied = {**roles, os.getpid(): "client"}
        for pid, role in spied.items():
            if role.startswith(args.spy):
                argvs.append([str(Path(sys.executable).parent / "py-spy"), "record", "-p",
                              str(pid), "-r", "200", "--gil", "-f", "raw", "-o",
                              str(out / f"spy-{role}.txt")])
    for argv in argvs:
        if shutil.which(argv[0]) is None:
            raise SystemExit(f"{Path(argv[0]).name} is not installed (py-spy: "
                             f"{Path(sys.executable).parent}/pip install py-spy)")
    tools = [subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for argv in argvs]
    if tools:
        time.sleep(1.0)
    return tools


def spare_counts(base: Path) -> list[int]:
    return [len(os.listdir(spares))
            for spares in sorted(base.glob("dev/datanode*/current/spares"))]


def write_all(args: argparse.Namespace, fs: fsspec.AbstractFileSystem) -> int:
    """The timed writes; returns the files written."""
    if args.big_mib:
        chunk = os.urandom(4 << 20)
        with fs.open("/w/big", "wb") as fh:
            for _ in range(max(1, args.big_mib // 4)):
                fh.write(chunk)
        return 1
    body = os.urandom(args.kib * 1024)
    threads: int = args.threads
    files: int = args.files
    per_thread = max(1, files // threads)

    def write(thread: int) -> None:
        for i in range(per_thread):
            with Phases.file(), fs.open(f"/w/t{thread}-{i}", "wb") as fh:
                Phases.mark("open")
                fh.write(body)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(write, range(threads)))
    return per_thread * threads


class Phases:
    """Timestamps of each small file's steps in the writing thread (``--phases``): the
    client's methods that end a step are wrapped to mark it (:meth:`install`)."""

    ORDER = ("open", "sent", "first answer", "complete", "all answers", "closed")
    enabled = False
    files: list[dict[str, float]] = []
    _local = threading.local()

    @classmethod
    @contextlib.contextmanager
    def file(cls) -> Iterator[None]:
        if not cls.enabled:
            yield
            return
        cls._local.marks = {"start": time.perf_counter()}
        yield
        cls.mark("closed")
        cls.files.append(cls._local.marks)

    @classmethod
    def mark(cls, step: str) -> None:
        marks: dict[str, float] | None = getattr(cls._local, "marks", None)
        if cls.enabled and marks is not None and step not in marks:
            marks[step] = time.perf_counter()

    @classmethod
    def install(cls) -> None:
        """Wrap the steps' methods (the writer's inline store, its answers, complete)."""
        from xdfs.client import datanodes, writer

        def after(owner: Any, name: str, step: str) -> None:
            plain = getattr(owner, name)

            def marked(*args: Any, **kwargs: Any) -> Any:
                result = plain(*args, **kwargs)
                cls.mark(step)
                return result
            setattr(owner, name, marked)

        after(writer.FileWriter, "_store_inline", "sent")
        after(datanodes.InlineUploads, "next", "first answer")
        after(datanodes.InlineUploads, "all", "all answers")
        name = "_complete"
        complete = getattr(writer.FileWriter, name)

        async def marked_complete(self: Any) -> Any:
            result = await complete(self)
            cls.mark("complete")
            return result
        setattr(writer.FileWriter, name, marked_complete)
        cls.enabled = True

    @classmethod
    def report(cls) -> None:
        """Milliseconds per step (from the previous step's end), percentiles over files."""
        print("| step (ms from the previous) | p10 | p50 | p90 | p99 |")
        print("|---|---:|---:|---:|---:|")
        for previous, step in zip(("start", *cls.ORDER), cls.ORDER, strict=False):
            spans = sorted((marks[step] - marks[previous]) * 1e3 for marks in cls.files
                           if step in marks and previous in marks)
            if spans:
                at = [spans[min(len(spans) - 1, int(q * len(spans)))]
                      for q in (0.1, 0.5, 0.9, 0.99)]
                print(f"| {step} | " + " | ".join(f"{v:.2f}" for v in at) + " |")
        totals = sorted((m["closed"] - m["start"]) * 1e3 for m in cls.files)
        print(f"| whole file | {totals[len(totals) // 10]:.2f} | {totals[len(totals) // 2]:.2f}"
              f" | {totals[len(totals) * 9 // 10]:.2f} | {totals[len(totals) * 99 // 100]:.2f} |")


def probe(args: argparse.Namespace, base: Path) -> None:
    with dev_cluster(base, 3, USER, PASSWORD) as cluster:
        fs = fsspec.filesystem("xdfs", skip_instance_cache=True, fs=cluster.uri, user=USER,
                               password=PASSWORD)
        fs.mkdir("/w")
        for i in range(100):
            with fs.open(f"/w/warm-{i}", "wb") as fh:
                fh.write(b"x" * 4096)
        time.sleep(args.idle_s)
        roles = {pid: role + (str(i) if role == "datanode" else "")
                 for i, (role, pid) in enumerate(cluster.servers)}
        tools = start_tools(args, roles)
        if args.phases:
            Phases.install()
        spares = spare_counts(base)
        before = {pid: Usage.of(pid) for pid in roles}
        mine = Usage.mine()
        started = time.perf_counter()
        files = write_all(args, fs)
        elapsed = time.perf_counter() - started
        after = {pid: Usage.of(pid) for pid in roles}
        mine_after = Usage.mine()
        for tool in tools:
            tool.send_signal(signal.SIGINT)
        for tool in tools:
            tool.wait()
        what = f"{args.big_mib} MiB" if args.big_mib else f"{files} x {args.kib} KiB"
        print(f"{what} from {1 if args.big_mib else args.threads} thread(s): "
              f"{files / elapsed:,.1f} files/s, {elapsed:.2f} s; spares at the start "
              f"{spares}; {machine()}; load {load_average()}")
        print("| process | CPU us/file | user | sys | minor faults/file |")
        print("|---|---:|---:|---:|---:|")
        for pid, role in roles.items():
            print(after[pid].row(before[pid], role, files))
        print(mine_after.row(mine, "client (this process)", files))
        if Phases.files:
            Phases.report()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="small-file-probe-", dir=scratch_parent(args.dir)))
    try:
        probe(args, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
