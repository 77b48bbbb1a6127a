"""hdfs-like text output: permission strings, -ls columns, sizes, times."""

from __future__ import annotations

import datetime as dt
import re
import unicodedata

from xdfs.common.modes import permission_string
from xdfs.protocol.namenode import FileStatus

_UNITS = ("", "K", "M", "G", "T", "P")


def human_size(n: int) -> str:
    value = float(n)
    for unit in _UNITS:
        if value < 1024 or unit == _UNITS[-1]:
            return f"{value:.0f}{unit}" if unit == "" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def human_duration(seconds: float) -> str:
    """``93784`` -> ``1d 2h`` (the two largest units that are not zero)."""
    rest = max(0, int(seconds))
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        value, rest = divmod(rest, size)
        if value:
            parts.append(f"{value}{unit}")
    return " ".join(parts[:2]) or "0s"


def local_time(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M")


#: What ``-ls -e`` shows in the erasure coding column: xdfs replicates every file.
REPLICATED = "Replicated"


#: What ``-ls -q`` shows as ``?``, as HDFS: control, format, private use, surrogate and
#: unassigned characters (Unicode categories).
_UNPRINTABLE = frozenset({"Cc", "Cf", "Co", "Cs", "Cn"})


def printable(text: str) -> str:
    """``-ls -q``: every character that is not printable shown as ``?``."""
    return "".join("?" if unicodedata.category(char) in _UNPRINTABLE else char
                   for char in text)


def ls_lines(entries: list[FileStatus], human: bool = False, ec: bool = False) -> list[str]:
    """``-ls`` rows with columns sized to the widest entry, as hdfs prints them; ``ec``:
    with the erasure coding policy column (-e) before the path."""
    rows = [
        (
            permission_string(e.is_dir, e.mode),
            "-" if e.is_dir else str(e.replication),
            e.owner,
            e.group,
            human_size(e.length) if human else str(e.length),
            local_time(e.mtime_ms),
            e.path,
        )
        for e in entries
    ]
    if not rows:
        return []
    widths = [max(len(row[i]) for row in rows) for i in range(7)]
    policy = f"{REPLICATED} " if ec else ""
    return [
        f"{r[0]} {r[1]:>{max(3, widths[1])}} {r[2]:<{widths[2]}} {r[3]:<{widths[3]}} "
        f"{r[4]:>{widths[4]}} {r[5]} {policy}{r[6]}"
        for r in rows
    ]


_PREFIXES = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5, "e": 6}


def parse_size(text: str) -> int:
    """``10``, ``1k``, ``2.5g``: bytes, binary prefixes, any case (HDFS's
    TraditionalBinaryPrefix, as ``dfsadmin -setSpaceQuota`` takes them). ValueError when
    ``text`` is not such a size."""
    found = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgtpe]?)", text.strip().lower())
    value = float(found[1]) * 1024 ** _PREFIXES[found[2]] if found else -1.0
    if not 0 <= value < 2**63:
        raise ValueError(f"not a size: {text}")
    return int(value)
