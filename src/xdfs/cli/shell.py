"""The hdfs-style commands (``xdfs dfs``, ``xdfs admin``, ``xdfs debug``, ``xdfs fsck``) on
click: single-dash command names and flags (``-ls -R``, ``-report``, ``-skipTrash``), the
generic ``-fs URI`` first, and usage errors (exit status 2) in ONE line naming the command
and its usage.

Click parses each command's declared options and arguments; what hdfs-style needs beyond it
is here: an :class:`HdfsShell` takes its command name from the first word (``-ls`` looks
like an option to click), and an :class:`HdfsCommand` refuses any word starting with ``-``
that is not one of its options -- never taken for a path (write ``./-x``), and never split
into letters the way click reads short options (``-rf`` is not ``-r -f`` in hdfs).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import click

HELP_WORDS = ("-help", "-h", "--help")
USAGE_WORD = "-usage"
#: Where a shell keeps the ``-fs`` URI for its command (click's ``ctx.meta`` is shared).
FS_KEY = "xdfs.fs"


def usage_error(line: str) -> click.exceptions.Exit:
    """Print a usage error in one line; the caller raises what this returns (status 2)."""
    click.echo(line, err=True)
    return click.exceptions.Exit(2)


class HdfsCommand(click.Command):
    """One hdfs-style command. ``usage``: its arguments as the help shows them;
    ``min_args``/``max_args``: how many values its ``values`` argument takes (when it has
    one); ``standalone``: a command of its own (``xdfs fsck``), which answers ``-help``."""

    def __init__(
        self,
        name: str,
        *,
        usage: str,
        prefix: str,
        min_args: int = 0,
        max_args: int | None = None,
        standalone: bool = False,
        description: str = "",
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("add_help_option", False)
        super().__init__(name, **kwargs)
        self.usage = usage
        #: What ``-help NAME`` says below the usage (the ``help`` when there is none).
        self.description = description or (self.help or "")
        self.prefix = prefix  # "xdfs dfs", "xdfs fsck" ...
        self.min_args = min_args
        self.max_args = max_args
        self.standalone = standalone

    def usage_line(self) -> str:
        name = "" if self.standalone else f" {self.name}"
        return f"Usage: {self.prefix}{name} {self.usage}".rstrip()

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        if self.standalone and args[:1] and args[0] in HELP_WORDS:
            click.echo(self.usage_line())
            raise click.exceptions.Exit(0)
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:
            what = "" if self.standalone else f"{self.name}: "
            raise usage_error(f"{what}{exc.format_message().rstrip('.')}. "
                              f"{self.usage_line()}") from None

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        known = {opt for p in self.params if isinstance(p, click.Option) for opt in p.opts}
        for arg in args:
            if arg.startswith("-") and arg != "-" and arg not in known:
                raise click.UsageError(f"unknown option {arg}", ctx)
        rest = super().parse_args(ctx, args)
        if "values" in ctx.params:
            count = len(ctx.params["values"])
            high = count if self.max_args is None else self.max_args
            if not self.min_args <= count <= high:
                raise click.UsageError(f"expects {_arity(self.min_args, self.max_args)}", ctx)
        return rest


def _arity(low: int, high: int | None) -> str:
    if high == low:
        return f"{low} argument(s)"
    if high is None:
        return f"at least {low} argument(s)"
    return f"{low} to {high} arguments"


class HdfsShell(click.Group):
    """``xdfs NAME [-fs URI] -COMMAND ...``: the first word names the command."""

    def __init__(self, name: str, *, summary: str, **kwargs: Any) -> None:
        super().__init__(name, add_help_option=False, help=summary, **kwargs)
        self.prefix = f"xdfs {name}"

    def add(self, command: HdfsCommand) -> HdfsCommand:
        self.add_command(command)
        return command

    def print_usage(self) -> None:
        click.echo(f"Usage: {self.prefix} [-fs xdfs://HOST:PORT] COMMAND ...")
        for name, command in self.commands.items():
            if isinstance(command, HdfsCommand):
                words = f"{name} {command.usage}".strip()
                if len(words) >= 30 and command.help:  # the help on a line of its own
                    click.echo(f"  {words}")
                    words = ""
                click.echo(f"  {words:<30}{command.help or ''}".rstrip())
        click.echo(f"  {'-help CMD, -usage [CMD]':<30}one command's help, usage lines")

    def describe(self, word: str, names: list[str]) -> int:
        """``-help NAME ...`` (each command's usage and description) or ``-usage [NAME
        ...]`` (usage lines; every command's without a name), as ``hdfs dfs``; a name may
        be written with or without its dash. 1 when a name is no command."""
        chosen = names or [name for name, command in self.commands.items()
                           if isinstance(command, HdfsCommand)]
        status = 0
        for name in chosen:
            command = self.commands.get(name if name.startswith("-") else f"-{name}")
            if not isinstance(command, HdfsCommand):
                click.echo(f"{word[1:]}: Unknown command: {name}", err=True)
                status = 1
            elif word == USAGE_WORD:
                click.echo(command.usage_line())
            else:
                click.echo(f"{command.name} {command.usage} :".replace("  ", " "))
                for line in command.description.replace("``", "").splitlines() or [""]:
                    click.echo(f"  {line}".rstrip())
        return status

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        fs = None
        if len(args) >= 2 and args[0] in ("-fs", "--fs"):
            fs, args = args[1], args[2:]
        ctx.meta[FS_KEY] = fs
        if args and (args[0] == USAGE_WORD or (args[0] in HELP_WORDS and len(args) > 1)):
            raise click.exceptions.Exit(self.describe(args[0], args[1:]))
        if not args or args[0] in HELP_WORDS:
            self.print_usage()
            raise click.exceptions.Exit(0 if args else 2)
        # The words are the command's: "--" keeps click's group parsing off them
        return super().parse_args(ctx, ["--", *args])

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0]
        command = self.get_command(ctx, name)
        if command is None:
            raise usage_error(f"{name}: Unknown command. Usage: {self.prefix} "
                              f"[-fs URI] COMMAND ... ({self.prefix} -help lists them)")
        return name, command, args[1:]


def cluster_for(fs: str | None, args: Sequence[str], configured: str) -> str | None:
    """The file system a command works on. As ``hdfs dfs``, a path given as a full URI
    (``xdfs://HOST:PORT/p``) names its cluster: that cluster is the target (the -fs or
    configured URI when it shares an address, for its full failover list). Every URI of
    one command must name the same cluster: a usage error (exit 2) otherwise."""
    from xdfs.common.addresses import SCHEME, same_cluster, split_uri

    named = {uri[0] for uri in map(split_uri, args) if uri is not None and uri[0]}
    if not named:
        return fs
    if len(named) > 1:
        raise usage_error(f"the paths name {len(named)} clusters ({', '.join(sorted(named))}):"
                          " one command works on one cluster")
    authority = named.pop()
    default = fs or configured
    if default and same_cluster(default, authority):
        return default
    return SCHEME + authority


def client_for(ctx: click.Context, paths: Sequence[str] = ()) -> AbstractContextManager[Any]:
    """The blocking client of the cluster the command works on (see :func:`cluster_for`)."""
    from xdfs.cli.main import CliState
    from xdfs.client.client import Client

    state = ctx.find_object(CliState)
    assert state is not None
    fs = cluster_for(ctx.meta.get(FS_KEY), paths, state.config.client.fs)
    return Client(fs, config=state.config)


def exits(function: Callable[..., int]) -> Callable[..., None]:
    """A command body returning its exit status, as a click callback."""

    def callback(*args: Any, **kwargs: Any) -> None:
        sys.exit(function(*args, **kwargs))

    callback.__name__ = function.__name__
    callback.__doc__ = function.__doc__
    return callback
