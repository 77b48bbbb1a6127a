"""What every benchmark reports about its run: the machine, its load, a process's CPU time.

Imported by the scripts beside it (``python bench/X.py`` puts this folder on sys.path)."""

from __future__ import annotations

import contextlib
import os
import platform
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path


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
