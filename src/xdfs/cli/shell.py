"""What ``xdfs dfs`` and ``xdfs admin`` share: hdfs-style raw arguments (``-ls``, not
``--ls``), the generic ``-fs URI`` option and the help convention."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

#: Pass every argument through untouched: the shells parse hdfs-style flags themselves.
RAW_ARGUMENTS: dict[str, Any] = {
    "context_settings": {
        "ignore_unknown_options": True,
        "allow_extra_args": True,
        "help_option_names": [],
    },
    "add_help_option": False,
}


def split_generic_options(argv: tuple[str, ...], print_help: Callable[[], None]
                          ) -> tuple[str | None, list[str]]:
    """``(fs, remaining args)``; prints help and exits for no command or -help."""
    args = list(argv)
    fs = None
    if len(args) >= 2 and args[0] in ("-fs", "--fs"):
        fs, args = args[1], args[2:]
    if not args or args[0] in ("-help", "-h", "--help"):
        print_help()
        sys.exit(0 if args else 2)
    return fs, args


def cluster_for(fs: str | None, args: list[str], configured: str) -> str | None:
    """The file system a command works on. As ``hdfs dfs``, a path given as a full URI
    (``xdfs://HOST:PORT/p``) names its cluster: that cluster is the target (the -fs or
    configured URI when it shares an address, for its full failover list). Every URI of
    one command must name the same cluster: a usage error (exit 2) otherwise."""
    from xdfs.common.addresses import SCHEME, same_cluster, split_uri

    named = {uri[0] for uri in map(split_uri, args) if uri is not None and uri[0]}
    if not named:
        return fs
    if len(named) > 1:
        click.echo(f"the paths name {len(named)} clusters ({', '.join(sorted(named))}): "
                   "one command works on one cluster", err=True)
        sys.exit(2)
    authority = named.pop()
    default = fs or configured
    if default and same_cluster(default, authority):
        return default
    return SCHEME + authority


def raw_command(function: Callable[..., None]) -> click.Command:
    """A click command taking all its arguments raw as ``argv``, with the CLI state."""
    decorated = click.pass_obj(function)
    decorated = click.argument("argv", nargs=-1, type=click.UNPROCESSED)(decorated)
    command: click.Command = click.command(**RAW_ARGUMENTS)(decorated)
    return command
