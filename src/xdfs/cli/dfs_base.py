"""What every command of ``xdfs dfs`` shares: how one is declared (:func:`command`), its
parsed words (:class:`Args`), and how failures are reported hdfs-style (:func:`each_path`).

``xdfs dfs [-fs URI] -COMMAND [flags] ARGS``; exit status 0 on success, 1 when an
operation failed (the message says which path and why), 2 on a usage error.
"""

from __future__ import annotations

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
                                     max_args=max_args, params=params, callback=run)
        return handler

    return register


class PathFailure(Exception):
    """A failure to report against another path than the argument being processed (``-put``
    names the destination when the upload fails, as ``hdfs dfs`` does)."""

    def __init__(self, path: str, error: Exception) -> None:
        super().__init__(path, error)
        self.path = path
        self.error = error


def each_path(client: Any, verb: str, items: list[str], action: Callable[[str], None]) -> int:
    """Run ``action`` on every path, report failures hdfs-style, return the exit status.
    Local file errors (``OSError``) are reported the same way as xdfs ones: one line."""
    from xdfs.errors import XdfsError

    status = 0
    for path in items:
        try:
            action(path)
        except PathFailure as exc:
            click.echo(f"{verb}: `{exc.path}': {_describe(exc.error)}", err=True)
            status = 1
        except (XdfsError, OSError) as exc:
            click.echo(f"{verb}: `{path}': {_describe(exc)}", err=True)
            status = 1
    return status


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
