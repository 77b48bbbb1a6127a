"""What every command of ``xdfs dfs`` shares: how one is declared (:func:`command`), its
parsed words (:class:`Args`), and how failures are reported hdfs-style (:func:`each_path`).

``xdfs dfs [-fs URI] -COMMAND [flags] ARGS``; exit status 0 on success, 1 when an
operation failed (the message says which path and why), 2 on a usage error.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import click

from xdfs.cli.shell import HdfsCommand, client_for

Handler = Callable[[Any, "Args"], int]
#: Every command, by name, in the order declared (the help lists them so).
COMMANDS: dict[str, click.Command] = {}


@dataclass
class Args:
    flags: set[str]
    values: list[str]
    #: The options that take a value (``-t STAMP``, ``-name PATTERN``) that were given.
    options: dict[str, str] = field(default_factory=dict)


def command(
    name: str, usage: str, flags: str = "", min_args: int = 1, max_args: int | None = None,
    options: str = "",
) -> Callable[[Handler], Handler]:
    """Declare a command: its single-dash ``flags`` (click options), ``options`` that take
    a value, and how many values (paths, mostly) it takes; ``handler(client, args)``
    returns the exit status."""

    def register(handler: Handler) -> Handler:
        names = {f"flag{index}": flag for index, flag in enumerate(flags.split())}
        valued = {f"option{index}": option for index, option in enumerate(options.split())}
        params: list[click.Parameter] = [
            click.Option([flag, key], is_flag=True) for key, flag in names.items()
        ]
        params.extend(click.Option([option, key]) for key, option in valued.items())
        params.append(click.Argument(["values"], nargs=-1))

        @click.pass_context
        def run(ctx: click.Context, /, values: tuple[str, ...], **chosen: Any) -> None:
            given = {valued[key]: value for key, value in chosen.items()
                     if key in valued and value is not None}
            args = Args({names[key] for key, on in chosen.items() if key in names and on},
                        list(values), given)
            with client_for(ctx, args.values) as client:
                ctx.exit(handler(client, args))

        COMMANDS[name] = HdfsCommand(name, usage=usage, prefix="xdfs dfs", min_args=min_args,
                                     max_args=max_args, params=params, callback=run,
                                     description=inspect.getdoc(handler) or "")
        return handler

    return register


class PathFailure(Exception):
    """A failure to report against another path than the argument being processed (``-put``
    names the destination when the upload fails, as ``hdfs dfs`` does)."""

    def __init__(self, path: str, error: Exception) -> None:
        super().__init__(path, error)
        self.path = path
        self.error = error


def each_path(
    client: Any, verb: str, items: list[str], action: Callable[[str], None], glob: bool = True,
    missing_ok: bool = False,
) -> int:
    """Run ``action`` on every path, report failures hdfs-style, return the exit status.
    Local file errors (``OSError``) are reported the same way as xdfs ones: one line.
    ``glob``: the items are xdfs paths whose globs are expanded first (:func:`expand`): a
    pattern that matches nothing fails as a missing path (is skipped with ``missing_ok``,
    as ``-rm -f`` does); ``False`` for local paths and for paths already expanded."""
    from xdfs.errors import XdfsError

    status = 0
    for item in items:
        try:
            paths = expand(client, item) if glob else [item]
        except FileNotFoundError:
            if missing_ok:
                continue
            click.echo(f"{verb}: `{item}': No such file or directory", err=True)
            status = 1
            continue
        except (XdfsError, OSError) as exc:
            click.echo(f"{verb}: `{item}': {_describe(exc)}", err=True)
            status = 1
            continue
        for path in paths:
            try:
                action(path)
            except PathFailure as exc:
                click.echo(f"{verb}: `{exc.path}': {_describe(exc.error)}", err=True)
                status = 1
            except (XdfsError, OSError) as exc:
                click.echo(f"{verb}: `{path}': {_describe(exc)}", err=True)
                status = 1
    return status


def expand(client: Any, pattern: str) -> list[str]:
    """The paths the xdfs path ``pattern`` names, as ``hdfs dfs`` expands its arguments
    (Hadoop's glob syntax, :mod:`xdfs.client.glob`): a path without wildcards or escapes
    is itself (not looked up); matches are written as the pattern was (relative to the
    home directory, absolute, or a full URI). NotFound, naming the pattern, when a
    pattern with wildcards matches nothing."""
    from xdfs.client import glob
    from xdfs.common.addresses import SCHEME, split_uri
    from xdfs.errors import NotFound

    if not glob.is_pattern(pattern):
        return [pattern]
    uri = split_uri(pattern)
    prefix = "" if uri is None else SCHEME + uri[0]
    absolute = client.absolute(pattern)
    home = "" if uri is not None or pattern.startswith("/") else client.home().rstrip("/") + "/"
    found = glob.glob(absolute, lambda path: _stat_or_none(client, path), client.list_dir)
    if found is None:
        return [glob.unescape(pattern)]
    if not found:
        raise NotFound(pattern)
    return [_written_as(status.path, prefix, home) for status in found]


def _written_as(path: str, prefix: str, home: str) -> str:
    if home:
        if path + "/" == home:
            return "."
        return path[len(home):] if path.startswith(home) else path
    return prefix + path


def _stat_or_none(client: Any, path: str) -> Any:
    from xdfs.errors import NotFound

    try:
        return client.stat(path)
    except NotFound:
        return None


def expanded(client: Any, verb: str, patterns: list[str]) -> tuple[list[str], int]:
    """Every path the patterns name, and 1 when some pattern failed (said in one line
    each; hdfs goes on with the paths the others named) or 0."""
    paths: list[str] = []
    status = each_path(client, verb, patterns, paths.append)
    return paths, status


def one_match(client: Any, verb: str, pattern: str) -> str | None:
    """The one path a destination pattern names (``hdfs dfs -cp/-mv/-put`` expand theirs
    and want exactly one match); None, after saying why in one line, otherwise."""
    from xdfs.errors import XdfsError

    try:
        paths = expand(client, pattern)
    except XdfsError as exc:
        click.echo(f"{verb}: `{pattern}': {_describe(exc)}", err=True)
        return None
    if len(paths) > 1:
        click.echo(f"{verb}: `{pattern}': Too many matches", err=True)
        return None
    return paths[0]


def _describe(exc: Exception) -> str:
    from xdfs.errors import DirectoryNotEmpty, XdfsError

    if isinstance(exc, FileNotFoundError):
        return "No such file or directory"
    if isinstance(exc, FileExistsError):
        return "File exists"
    if isinstance(exc, DirectoryNotEmpty):
        return "Directory is not empty"
    if isinstance(exc, XdfsError):
        return exc.message
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)
