"""More metadata commands of ``xdfs dfs``, as ``hdfs dfs`` has them: -find, -df, -touch;
and the commands of features xdfs lacks (ACLs, extended attributes, snapshots), which say
so."""

from __future__ import annotations

import datetime as dt
import fnmatch
import time
from collections.abc import Callable
from typing import Any

import click

from xdfs.cli.dfs_base import COMMANDS, Args, command, each_path
from xdfs.cli.format import human_size
from xdfs.cli.shell import HdfsCommand
from xdfs.common.addresses import SCHEME


@command("-find", "<path> ... [-name <pattern> | -iname <pattern>] [-print]", "-print",
         options="-name -iname")
def find(client: Any, args: Args) -> int:
    """Every path at or below the paths whose last component matches the glob of -name
    (-iname: ignoring case); with neither, every path. Printed one a line (-print)."""
    if {"-name", "-iname"} <= set(args.options):
        click.echo("find: give one of -name and -iname. Usage: xdfs dfs -find "
                   "<path> ... [-name <pattern> | -iname <pattern>] [-print]", err=True)
        return 2
    matches = _matcher(args.options)

    def walk(path: str) -> None:
        top = client.stat(path)
        pending = [(path, top)]
        while pending:
            shown, status = pending.pop()
            if matches(status.path.rsplit("/", 1)[-1] or "/"):
                click.echo(shown)
            if status.is_dir:
                children = client.list_dir(status.path)
                pending.extend(
                    (f"{shown.rstrip('/')}/{c.path.rsplit('/', 1)[-1]}", c)
                    for c in reversed(children)
                )

    return each_path(client, "find", args.values, walk)


def _matcher(options: dict[str, str]) -> Callable[[str], bool]:
    if "-name" in options:
        pattern = options["-name"]
        return lambda name: fnmatch.fnmatchcase(name, pattern)
    if "-iname" in options:
        lowered = options["-iname"].lower()
        return lambda name: fnmatch.fnmatchcase(name.lower(), lowered)
    return lambda _name: True


@command("-df", "[-h] [<path> ...]", "-h", min_args=0)
def df(client: Any, args: Args) -> int:
    """Capacity, use and room of the file system (its live DataNodes), as hdfs dfs -df:
    one line for the cluster the paths are on."""

    def size(n: int) -> str:
        return human_size(n) if "-h" in args.flags else str(n)

    report = client.datanode_report()
    share = 100 * report.used_bytes // report.capacity_bytes if report.capacity_bytes else 0
    rows = [
        ("Filesystem", "Size", "Used", "Available", "Use%"),
        (SCHEME + ",".join(client.addresses), size(report.capacity_bytes), size(report.used_bytes),
         size(report.free_bytes), f"{share}%"),
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    for row in rows:
        click.echo(f"{row[0]:<{widths[0]}}  " + "  ".join(
            f"{cell:>{width}}" for cell, width in zip(row[1:], widths[1:], strict=True)
        ))
    return 0


#: -touch -t: as HDFS's Touch, local time.
TOUCH_TIME_FORMATS = ("%Y%m%d:%H%M%S", "%Y%m%d%H%M%S")


@command("-touch", "[-a] [-m] [-t TIMESTAMP] [-c] <path> ...", "-a -m -c", options="-t")
def touch(client: Any, args: Args) -> int:
    """Set the access (-a) and/or modification (-m) time (both by default) to now or to
    -t yyyyMMdd:HHmmss (local time); a missing file is created empty unless -c."""
    from xdfs.errors import NotFound

    stamp = args.options.get("-t")
    try:
        when_ms = _parse_stamp(stamp) if stamp is not None else int(time.time() * 1000)
    except ValueError:
        click.echo(f"touch: Unable to parse the specified timestamp {stamp}. Usage: xdfs dfs "
                   "-touch [-a] [-m] [-t TIMESTAMP (yyyyMMdd:HHmmss)] [-c] <path> ...", err=True)
        return 2
    both = not {"-a", "-m"} & args.flags
    mtime = when_ms if both or "-m" in args.flags else -1
    atime = when_ms if both or "-a" in args.flags else -1

    def apply(path: str) -> None:
        try:
            client.stat(path)
        except NotFound:
            if "-c" in args.flags:
                return
            client.touchz(path)
        client.set_times(path, mtime, atime)

    return each_path(client, "touch", args.values, apply)


def _parse_stamp(text: str) -> int:
    for fmt in TOUCH_TIME_FORMATS:
        try:
            return int(dt.datetime.strptime(text, fmt).timestamp() * 1000)
        except ValueError:
            continue
    raise ValueError(text)


class _Missing(HdfsCommand):
    """A command of ``hdfs dfs`` for a feature xdfs does not have: it says so in one line
    (exit status 1), whatever its arguments, rather than "Unknown command"."""

    def __init__(self, name: str, usage: str, why: str) -> None:
        super().__init__(name, usage=usage, prefix="xdfs dfs", help=why)
        self.verb = name.lstrip("-")
        self.why = why

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        click.echo(f"{self.verb}: {self.why}", err=True)
        raise click.exceptions.Exit(1)


_NO_ACLS = "xdfs has no ACLs: permissions are the mode bits and the sticky bit (-chmod)"
_NO_XATTRS = "xdfs has no extended attributes"
_NO_SNAPSHOTS = "xdfs has no snapshots"
MISSING = {
    "-getfacl": ("[-R] <path>", _NO_ACLS),
    "-setfacl": ("[-R] [{-b|-k} {-m|-x <acl_spec>} <path>]|[--set <acl_spec> <path>]",
                 _NO_ACLS),
    "-getfattr": ("[-R] {-n name | -d} [-e en] <path>", _NO_XATTRS),
    "-setfattr": ("{-n name [-v value] | -x name} <path>", _NO_XATTRS),
    "-createSnapshot": ("<snapshotDir> [<snapshotName>]", _NO_SNAPSHOTS),
    "-deleteSnapshot": ("<snapshotDir> <snapshotName>", _NO_SNAPSHOTS),
    "-renameSnapshot": ("<snapshotDir> <oldName> <newName>", _NO_SNAPSHOTS),
}
for _name, (_usage, _why) in MISSING.items():
    COMMANDS[_name] = _Missing(_name, _usage, _why)
