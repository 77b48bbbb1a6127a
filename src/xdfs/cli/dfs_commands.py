"""The metadata commands of ``xdfs dfs`` (the data commands are in ``dfs_data``)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import click
import msgspec

from xdfs.cli.dfs_base import Args, command, each_path, expand, one_match
from xdfs.cli.format import human_size, ls_lines, printable
from xdfs.common.modes import permission_string


@command("-ls", "[-C] [-d] [-h] [-q] [-R] [-t] [-S] [-r] [-u] [-e] [<path> ...]",
         "-C -d -h -q -R -t -S -r -u -e", min_args=0)
def ls(client: Any, args: Args) -> int:
    """As ``hdfs dfs -ls``: no path lists the home directory; the entries of a relative
    path are shown relative to the home directory. -C shows the paths only, -d a
    directory itself, -h sizes in binary units, -q non-printable characters as ?, -R the
    whole tree; -t sorts by modification time (newest first), -S by size (largest
    first), -r reverses, -u shows (and -t sorts by) the access time instead; -e adds the
    erasure coding policy (Replicated: xdfs replicates every file)."""
    lines = _ls_format(args.flags)

    def show(path: str) -> None:
        shown = _shown_as(client, path, "-u" in args.flags, "-q" in args.flags)
        status = client.stat(path)
        if not status.is_dir or "-d" in args.flags:
            _echo_lines(lines([shown(status)]))
            return
        if "-R" in args.flags:
            _ls_recursive(client, status.path, lines, shown, args.flags)
            return
        entries = _ordered(client.list_dir(status.path), args.flags)
        if "-C" not in args.flags:
            click.echo(f"Found {len(entries)} items")
        _echo_lines(lines([shown(e) for e in entries]))

    return each_path(client, "ls", args.values or ["."], show)


def _ls_format(flags: set[str]) -> Callable[[list[Any]], list[str]]:
    """The -ls rows of statuses as the flags ask: the paths alone with -C."""
    if "-C" in flags:
        return lambda entries: [entry.path for entry in entries]
    return lambda entries: ls_lines(entries, "-h" in flags, "-e" in flags)


def _ordered(entries: list[Any], flags: set[str]) -> list[Any]:
    """A listing in the order -t, -S, -r and -u ask for (by name otherwise, as listed)."""
    if "-t" in flags:
        time_of = (lambda e: e.atime_ms) if "-u" in flags else (lambda e: e.mtime_ms)
        entries = sorted(entries, key=time_of, reverse=True)
    elif "-S" in flags:
        entries = sorted(entries, key=lambda e: e.length, reverse=True)
    return entries[::-1] if "-r" in flags else entries


def _shown_as(
    client: Any, path: str, atime: bool = False, quoted: bool = False
) -> Callable[[Any], Any]:
    """Statuses with the path to print: relative to the home directory when the argument
    was relative (as hdfs prints them), else as they are; ``atime``: with the access time
    in the place of the modification time (-u); ``quoted``: non-printable characters of
    the path as ? (-q)."""
    if quoted:
        plain = _shown_as(client, path, atime)
        return lambda status: msgspec.structs.replace(
            plain(status), path=printable(plain(status).path))
    if atime:
        plain = _shown_as(client, path)
        return lambda status: plain(msgspec.structs.replace(status, mtime_ms=status.atime_ms))
    if path.startswith("/") or "://" in path:
        return lambda status: status
    home = client.home()

    def relative(status: Any) -> Any:
        text = status.path
        if text == home:
            text = "."
        elif text.startswith(home + "/"):
            text = text[len(home) + 1 :]
        return msgspec.structs.replace(status, path=text)

    return relative


def _ls_recursive(
    client: Any, path: str, lines: Callable[[list[Any]], list[str]],
    shown: Callable[[Any], Any], flags: set[str],
) -> None:
    """Depth first, each directory's entries right below it (as ``hdfs dfs -ls -R``);
    columns are sized per directory listing, which is ordered as the flags say."""
    entries = _ordered(client.list_dir(path), flags)
    for entry, line in zip(entries, lines([shown(e) for e in entries]), strict=True):
        click.echo(line)
        if entry.is_dir:
            _ls_recursive(client, entry.path, lines, shown, flags)


def _echo_lines(lines: list[str]) -> None:
    for line in lines:
        click.echo(line)


@command("-mkdir", "[-p] <path> ...", "-p")
def mkdir(client: Any, args: Args) -> int:
    parents = "-p" in args.flags
    return each_path(client, "mkdir", args.values, lambda p: client.mkdirs(p, parents=parents))


@command("-rm", "[-f] [-r|-R] [-skipTrash] <path> ...", "-f -r -R -skipTrash")
def rm(client: Any, args: Args) -> int:
    from xdfs.errors import NotFound

    recursive = bool({"-r", "-R"} & args.flags)

    def remove(path: str) -> None:
        try:
            result = client.delete(path, recursive=recursive, skip_trash="-skipTrash" in args.flags)
        except NotFound:
            if "-f" in args.flags:
                return
            raise
        if result.trash_path:
            click.echo(f"Moved: '{path}' to trash at: {result.trash_path}")
        else:
            click.echo(f"Deleted {path}")

    return each_path(client, "rm", args.values, remove, missing_ok="-f" in args.flags)


@command("-rmdir", "<dir> ...")
def rmdir(client: Any, args: Args) -> int:
    from xdfs.errors import NotADirectory

    def remove(path: str) -> None:
        if not client.stat(path).is_dir:
            raise NotADirectory(f"{path} is not a directory")
        client.delete(path, recursive=False, skip_trash=True)

    return each_path(client, "rmdir", args.values, remove)


@command("-mv", "<src> ... <dst>", min_args=2)
def mv(client: Any, args: Args) -> int:
    *sources, pattern = args.values
    dst = one_match(client, "mv", pattern)
    if dst is None:
        return 1
    return each_path(client, "mv", sources, lambda src: client.rename(src, dst))


@command("-stat", "[format] <path> ...", min_args=1)
def stat(client: Any, args: Args) -> int:
    values = args.values
    fmt = "%y"
    if len(values) >= 2 and "%" in values[0]:
        fmt, values = values[0], values[1:]
    return each_path(client, "stat", values, lambda p: click.echo(stat_format(fmt, client.stat(p))))


def _utc(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def stat_format(fmt: str, status: Any) -> str:
    """hdfs -stat: %b size, %F type, %g group, %n name, %o block size, %r replication,
    %u owner, %a octal permission, %A symbolic permission, %x / %X access time (UTC
    ``yyyy-MM-dd HH:mm:ss`` / ms since the epoch), %y / %Y modification time, %z / %Z
    the last change (as GNU stat; xdfs keeps no separate change time: the modification
    time)."""
    fields = {
        "b": str(status.length),
        "F": "directory"
        if status.is_dir
        else ("regular file" if status.length else "regular empty file"),
        "g": status.group,
        "n": status.path.rsplit("/", 1)[-1] or "/",
        "o": str(status.block_size),
        "r": str(status.replication),
        "u": status.owner,
        "a": f"{status.mode:o}",
        "A": permission_string(status.is_dir, status.mode),
        "x": _utc(status.atime_ms),
        "X": str(status.atime_ms),
        "y": _utc(status.mtime_ms),
        "Y": str(status.mtime_ms),
        "z": _utc(status.mtime_ms),
        "Z": str(status.mtime_ms),
        "%": "%",
    }
    out, i = [], 0
    while i < len(fmt):
        if fmt[i] == "%" and i + 1 < len(fmt) and fmt[i + 1] in fields:
            out.append(fields[fmt[i + 1]])
            i += 2
        else:
            out.append(fmt[i])
            i += 1
    return "".join(out)


@command("-du", "[-s] [-h] [-v] [-x] <path> ...", "-s -h -v -x")
def du(client: Any, args: Args) -> int:
    """As ``hdfs dfs -du``: the size of each entry of a directory (-s: of the path
    itself) and the space it takes with every replica; -h binary units, -v a header line,
    -x (leave snapshots out) changes nothing: xdfs has no snapshots."""
    human = "-h" in args.flags
    if "-v" in args.flags:
        click.echo(f"{'SIZE':<12} {'DISK_SPACE_CONSUMED_WITH_ALL_REPLICAS':<12} FULL_PATH_NAME")

    def size(n: int) -> str:
        return human_size(n) if human else str(n)

    def show(path: str) -> None:
        status = client.stat(path)
        targets = [status] if "-s" in args.flags or not status.is_dir else client.list_dir(path)
        for entry in targets:
            summary = client.content_summary(entry.path)
            click.echo(
                f"{size(summary.length):<12} {size(summary.space_consumed):<12} {entry.path}"
            )

    return each_path(client, "du", args.values, show)


@command("-count", "[-q] [-u] [-h] [-v] [-t [<storage type>]] <path> ...", "-q -u -h -v -t")
def count(client: Any, args: Args) -> int:
    """As ``hdfs dfs -count``: DIR_COUNT FILE_COUNT CONTENT_SIZE PATHNAME; -q puts the
    quotas first (QUOTA REM_QUOTA SPACE_QUOTA REM_SPACE_QUOTA: ``none``/``inf`` when there
    is none); -u shows the quotas and the path only; -v prints a header line; -h shows
    sizes in binary units. -t (quotas by storage type): xdfs has no storage types."""
    if "-t" in args.flags:
        click.echo("count: -t: xdfs has no storage types (quotas are per directory: -q)",
                   err=True)
        return 1
    human = "-h" in args.flags
    quotas = bool({"-q", "-u"} & args.flags)
    usage_only = "-u" in args.flags
    if "-v" in args.flags:
        head = _QUOTA_HEAD if quotas else ""
        counts = "" if usage_only else (
            f"{'DIR_COUNT':>12} {'FILE_COUNT':>12} {'CONTENT_SIZE':>18} ")
        click.echo(f"{head}{counts}PATHNAME")

    def size(n: int) -> str:
        return human_size(n) if human else str(n)

    def show(path: str) -> None:
        s = client.content_summary(path)
        head = _quota_columns(s, size) if quotas else ""
        counts = "" if usage_only else (
            f"{s.directory_count:>12} {s.file_count:>12} {size(s.length):>18} ")
        click.echo(f"{head}{counts}{path}")

    return each_path(client, "count", args.values, show)


_QUOTA_HEAD = f"{'QUOTA':>12} {'REM_QUOTA':>15} {'SPACE_QUOTA':>15} {'REM_SPACE_QUOTA':>15} "


def _quota_columns(s: Any, size: Callable[[int], str]) -> str:
    """HDFS's quota columns: the name quota counts files and directories."""
    names, remaining = "none", "inf"
    if s.ns_quota >= 0:
        names = str(s.ns_quota)
        remaining = str(s.ns_quota - s.directory_count - s.file_count)
    space, space_left = "none", "inf"
    if s.ds_quota >= 0:
        space, space_left = size(s.ds_quota), size(s.ds_quota - s.space_consumed)
    return f"{names:>12} {remaining:>15} {space:>15} {space_left:>15} "


@command("-test", "-[defsrwz] <path>", "-d -e -f -s -r -w -z", min_args=1, max_args=1)
def test(client: Any, args: Args) -> int:
    """0 when true, 1 when not (or the path is missing): -r/-w ask the NameNode whether
    this user may read/write the path (as HDFS's access check)."""
    from xdfs.errors import XdfsError

    if len(args.flags) != 1:
        click.echo("Usage: xdfs dfs -test -[defsrwz] <path>", err=True)
        return 2
    flag = next(iter(args.flags))
    try:
        paths = expand(client, args.values[0])
    except XdfsError:
        return 1
    # as hdfs: true only when it holds for every path a glob names
    return max(_test_one(client, flag, path) for path in paths)


def _test_one(client: Any, flag: str, path: str) -> int:
    from xdfs.errors import AccessDenied, NotFound

    try:
        if flag in ("-r", "-w"):
            client.access(path, 4 if flag == "-r" else 2)
            return 0
        status = client.stat(path)
    except (NotFound, AccessDenied):
        return 1
    ok = {
        "-e": True,
        "-d": status.is_dir,
        "-f": not status.is_dir,
        "-s": status.length > 0,
        "-z": status.length == 0,
    }[flag]
    return 0 if ok else 1


@command("-touchz", "<path> ...")
def touchz(client: Any, args: Args) -> int:
    return each_path(client, "touchz", args.values, client.touchz)


@command("-chmod", "[-R] <mode[,mode]... | octalmode> <path> ...", "-R", min_args=2)
def chmod(client: Any, args: Args) -> int:
    from xdfs.cli.dfs_modes import parse_mode

    mode_text, *targets = args.values
    try:
        change = parse_mode(mode_text)
    except ValueError as exc:
        click.echo(str(exc), err=True)
        return 2

    def apply(path: str) -> None:
        status = client.stat(path)
        client.set_permission(path, change(status.mode, status.is_dir))

    return _each_recursive(client, "chmod", args, targets, apply)


@command("-chown", "[-R] <owner>[:<group>] <path> ...", "-R", min_args=2)
def chown(client: Any, args: Args) -> int:
    spec, *targets = args.values
    owner, _sep, group = spec.partition(":")
    return _each_recursive(
        client, "chown", args, targets, lambda p: client.set_owner(p, owner, group)
    )


@command("-chgrp", "[-R] <group> <path> ...", "-R", min_args=2)
def chgrp(client: Any, args: Args) -> int:
    group, *targets = args.values
    return _each_recursive(client, "chgrp", args, targets, lambda p: client.set_owner(p, "", group))


def _each_recursive(client: Any, verb: str, args: Args, targets: list[str], action: Any) -> int:
    def apply(path: str) -> None:
        action(path)
        if "-R" in args.flags and client.stat(path).is_dir:
            for entry in client.list_dir(path):
                apply(entry.path)

    return each_path(client, verb, targets, apply)


@command("-expunge", "[-immediate]", "-immediate", min_args=0, max_args=0)
def expunge(client: Any, args: Args) -> int:
    client.expunge("-immediate" in args.flags)
    return 0


@command("-restore", "<trash path> ...")
def restore(client: Any, args: Args) -> int:
    return each_path(
        client, "restore", args.values, lambda p: click.echo(f"Restored {p} to {client.restore(p)}")
    )
