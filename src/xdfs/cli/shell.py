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


def raw_command(function: Callable[..., None]) -> click.Command:
    """A click command taking all its arguments raw as ``argv``, with the CLI state."""
    decorated = click.pass_obj(function)
    decorated = click.argument("argv", nargs=-1, type=click.UNPROCESSED)(decorated)
    command: click.Command = click.command(**RAW_ARGUMENTS)(decorated)
    return command
