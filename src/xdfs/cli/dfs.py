"""``xdfs dfs``: the file system shell, following ``hdfs dfs`` (DESIGN.md section 12).

``xdfs dfs [-fs URI] -COMMAND [flags] ARGS``; exit status 0 on success, 1 when an
operation failed (the message says which path and why), 2 on a usage error.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from xdfs.cli.main import CliState
from xdfs.cli.shell import cluster_for, raw_command, split_generic_options

Handler = Callable[[Any, "Args"], int]


class UsageError(Exception):
    pass


@dataclass
class Args:
    flags: set[str]
    values: list[str]


@dataclass(frozen=True)
class Command:
    handler: Handler
    usage: str
    flags: frozenset[str] = frozenset()
    min_args: int = 1
    max_args: int = 1 << 30


COMMANDS: dict[str, Command] = {}


def command(
    name: str, usage: str, flags: str = "", min_args: int = 1, max_args: int = 1 << 30
) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        COMMANDS[name] = Command(handler, usage, frozenset(flags.split()), min_args, max_args)
        return handler

    return register


def parse_args(spec: Command, raw: list[str]) -> Args:
    """Flags may come anywhere; any other word starting with ``-`` is an unknown option (a
    usage error, never taken for a path: a path starting with ``-`` is written ``./-x``)."""
    flags: set[str] = set()
    values: list[str] = []
    for item in raw:
        if not item.startswith("-") or item == "-":
            values.append(item)
        elif item in spec.flags:
            flags.add(item)
        else:
            raise UsageError(f"unknown option {item}")
    if not spec.min_args <= len(values) <= spec.max_args:
        raise UsageError(f"expects {_arity(spec)}")
    return Args(flags, values)


def _arity(spec: Command) -> str:
    if spec.max_args == spec.min_args:
        return f"{spec.min_args} argument(s)"
    if spec.max_args >= 1 << 30:
        return f"at least {spec.min_args} argument(s)"
    return f"{spec.min_args} to {spec.max_args} arguments"


@raw_command
def dfs(state: CliState, argv: tuple[str, ...]) -> None:
    """File system shell: xdfs dfs -ls /, -mkdir -p, -rm -r, -mv, -stat, -du, -count ..."""
    fs, args = split_generic_options(argv, _print_help)
    name, rest = args[0], args[1:]
    spec = COMMANDS.get(name)
    if spec is None:
        click.echo(f"{name}: Unknown command (xdfs dfs -help lists them)", err=True)
        sys.exit(2)
    try:
        parsed = parse_args(spec, rest)
    except UsageError as exc:
        click.echo(f"{name}: {exc}. Usage: xdfs dfs {name} {spec.usage}", err=True)
        sys.exit(2)
    from xdfs.client.client import Client

    fs = cluster_for(fs, rest, state.config.client.fs)
    with Client(fs, config=state.config) as client:
        sys.exit(spec.handler(client, parsed))


def _print_help() -> None:
    click.echo("Usage: xdfs dfs [-fs xdfs://HOST:PORT] COMMAND ...")
    for name, spec in COMMANDS.items():
        click.echo(f"  {name} {spec.usage}")


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


# -- commands ----------------------------------------------------------------------------

from xdfs.cli import dfs_commands, dfs_data  # noqa: E402,F401  (registers the commands)
