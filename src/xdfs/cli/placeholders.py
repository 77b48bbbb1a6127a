"""Subcommands whose component has not landed yet: listed in ``--help`` so the command
surface is visible, and each exits with status 2 and says so instead of pretending."""

from __future__ import annotations

import sys

import click


def _placeholder(name: str, summary: str) -> click.Command:
    @click.command(
        name=name,
        help=f"{summary} (not available in this version yet).",
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )
    def command() -> None:
        click.echo(f"xdfs {name}: not available in this version yet", err=True)
        sys.exit(2)

    return command


logservice = _placeholder("logservice", "Run the replicated log service")
