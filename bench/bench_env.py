"""What every benchmark reports about its run: the machine, its load, a process's CPU time.

Imported by the scripts beside it (``python bench/X.py`` puts this folder on sys.path)."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from xdfs.common.process import ServerProcess


def scratch_parent(directory: str | None) -> str | None:
    """A ``--dir`` option's value, the directory made if missing (None: the temp dir)."""
    if directory is not None:
        Path(directory).mkdir(parents=True, exist_ok=True)
    return directory


@contextlib.contextmanager
def scratch_run(prefix: str, directory: str | None) -> Iterator[Path]:
    """A scratch directory for one run (under ``--dir``, else the temp dir), removed after
    it; the command line and the load are printed last, to go with the table."""
    base = Path(tempfile.mkdtemp(prefix=prefix, dir=scratch_parent(directory)))
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"\ncommand: {' '.join([Path(sys.executable).name, *sys.argv])}; "
          f"load average after: {load_average()}")


def load_average() -> str:
    try:
        return " / ".join(f"{load:.2f}" for load in os.getloadavg())
    except OSError:
        return "unknown"


def machine(dists: Sequence[str] = ("msgspec", "uvloop")) -> str:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    versions = []
    for dist in dists:
        try:
            versions.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{dist} not installed")
    return (
        f"nproc {os.cpu_count()}{' (' + model + ')' if model else ''}; "
        f"Python {platform.python_version()}; {platform.system()} {platform.release()}; "
        f"{', '.join(versions)}"
    )


def proc_cpu_s(pid: int) -> float:
    """utime + stime of a process (Linux), in seconds."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class DevCluster:
    """A running ``xdfs dev``: its URI, its own pid and its servers' (role, pid)s."""

    uri: str
    pid: int
    servers: list[tuple[str, int]]

    def pids(self, role: str | None = None) -> list[int]:
        """The servers' pids (of ``role`` only: "namenode", "datanode" ...), in start order."""
        return [pid for name, pid in self.servers if role is None or name == role]


@contextlib.contextmanager
def dev_cluster(base: Path, datanodes: int, user: str, password: str) -> Iterator[DevCluster]:
    """``xdfs dev`` with ``datanodes`` DataNodes in ``base/dev`` (log: ``base/dev.log``), as
    a new user starts it; stopped on exit."""
    base.mkdir(parents=True, exist_ok=True)
    proc = ServerProcess.xdfs(
        "dev", "--base-dir", str(base / "dev"), "--port", "0", "--datanodes", str(datanodes),
        log_path=base / "dev.log", ready_pattern=r"xdfs dev cluster ready: (\S+)",
        env={"XDFS_USER": user, "XDFS_PASSWORD": password},
    )
    uri = proc.start(120).group(1)
    try:
        described = json.loads((base / "dev" / "cluster.json").read_text())
        servers = [(str(p["role"]), int(p["pid"])) for p in described["processes"]]
        yield DevCluster(uri, proc.pid, servers)
    finally:
        proc.terminate()


def pids_with_argument(argument: bytes) -> list[int]:
    """Processes whose command line has ``argument`` as one of its arguments."""
    found: list[int] = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if argument in cmdline.read_bytes().split(b"\0")[1:]:
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


def file_create_cpu_us(directory: Path, files: int = 100) -> float:
    """CPU microseconds one empty-file create costs this process in ``directory`` (made;
    the files are left for the caller's cleanup: deleting them would itself slow later
    creates). On ext4 without a journal a create scans past every inode of its block group
    deleted in the last minutes (``recently_deleted`` in the kernel): ~35 us in a fresh
    group, ~1 ms after thousands of deletions, and a benchmark's figures move with it."""
    directory.mkdir(parents=True, exist_ok=True)
    started = time.process_time()
    for i in range(files):
        os.close(os.open(directory / f"f{i}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    return (time.process_time() - started) / files * 1e6


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil
    return ordered[int(min(rank, len(ordered))) - 1]


@dataclass
class Row:
    part: str
    name: str
    unit: str
    fmt: str  # format spec of the values
    values: list[float] = field(default_factory=list)
    note: str = ""

    def median(self) -> float:
        return statistics.median(self.values)

    def text(self, value: float) -> str:
        return f"{value:{self.fmt}}"


class Table:
    """Rows of medians over runs, printed as they come and as Markdown at the end.
    ``only``: words naming the parts to run (empty: all)."""

    def __init__(self, only: Sequence[str] = ()) -> None:
        self.only = tuple(only)
        self.rows: dict[tuple[str, str], Row] = {}

    def wanted(self, part: str) -> bool:
        return not self.only or any(word in part for word in self.only)

    def add(self, part: str, name: str, unit: str, value: float, fmt: str = ",.0f",
            note: str = "", quiet: bool = False) -> None:
        row = self.rows.get((part, name))
        if row is None:
            row = self.rows[(part, name)] = Row(part, name, unit, fmt)
        row.values.append(value)
        row.note = note or row.note
        if not quiet:
            print(f"  {part:<10} {name:<58} {row.text(value):>12} {unit}", file=sys.stderr,
                  flush=True)

    def markdown(self) -> str:
        lines = ["| part | metric | median | min .. max | notes |", "|---|---|---:|---:|---|"]
        for row in self.rows.values():
            spread = (f"{row.text(min(row.values))} .. {row.text(max(row.values))}"
                      if len(row.values) > 1 else "-")
            lines.append(f"| {row.part} | {row.name} | {row.text(row.median())} {row.unit} "
                         f"| {spread} | {row.note} |")
        return "\n".join(lines)
