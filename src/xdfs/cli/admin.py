"""``xdfs admin``: operator commands following ``hdfs dfsadmin``."""

from __future__ import annotations

import getpass
import os
import sys
from typing import Any

import click

from xdfs.cli.main import CliState
from xdfs.cli.shell import raw_command, split_generic_options

NEW_PASSWORD_ENV = "XDFS_NEW_PASSWORD"

USAGE = """Usage: xdfs admin [-fs URI] COMMAND
  -report                       NameNode state (DataNodes when they land)
  -safemode get|enter|leave
  -saveNamespace                write an fsimage now
  -rollEdits                    finalize the current edits segment
  -addUser NAME [-groups G1,G2] password from $XDFS_NEW_PASSWORD or a prompt
  -delUser NAME
  -passwd NAME                  password from $XDFS_NEW_PASSWORD or a prompt"""


@raw_command
def admin(state: CliState, argv: tuple[str, ...]) -> None:
    """Administration: -report, -safemode, -saveNamespace, -rollEdits, users."""
    fs, args = split_generic_options(argv, lambda: click.echo(USAGE))
    from xdfs.client.client import Client

    with Client(fs, config=state.config) as client:
        sys.exit(run(client, args))


def run(client: Any, args: list[str]) -> int:
    name, rest = args[0], args[1:]
    if name == "-safemode" and len(rest) == 1 and rest[0] in ("get", "enter", "leave"):
        status = client.safe_mode(rest[0])
        click.echo(
            f"Safe mode is {'ON' if status.on else 'OFF'}"
            + (f": {status.reason}" if status.on else "")
        )
        return 0
    if name == "-saveNamespace" and not rest:
        click.echo(f"Save namespace successful (fsimage at txid {client.save_namespace()})")
        return 0
    if name == "-rollEdits" and not rest:
        click.echo(
            f"Successfully rolled edit logs. New segment starts at txid {client.roll_edits()}"
        )
        return 0
    if name == "-report" and not rest:
        _report(client.status())
        return 0
    if name == "-addUser" and (len(rest) == 1 or (len(rest) == 3 and rest[1] == "-groups")):
        # anything else (-group, a missing list, extra words) is a usage error, not a user
        # silently created without the groups that were meant
        groups = rest[2].split(",") if len(rest) == 3 else []
        client.add_user(rest[0], _new_password(rest[0]), groups)
        click.echo(f"Added user {rest[0]}")
        return 0
    if name == "-delUser" and len(rest) == 1:
        client.remove_user(rest[0])
        click.echo(f"Removed user {rest[0]}")
        return 0
    if name == "-passwd" and len(rest) == 1:
        client.set_password(rest[0], _new_password(rest[0]))
        click.echo(f"Changed the password of {rest[0]}")
        return 0
    click.echo(USAGE, err=True)
    return 2


def _new_password(user: str) -> str:
    password = os.environ.get(NEW_PASSWORD_ENV)
    if password:
        return password
    first = getpass.getpass(f"New password for {user}: ")
    if first != getpass.getpass("Again: "):
        raise click.ClickException("passwords differ")
    return first


def _report(status: Any) -> None:
    rows = [
        ("Cluster ID", status.cluster_id),
        ("Namespace ID", status.namespace_id),
        ("Safe mode", "ON" if status.safe_mode else "OFF"),
        ("Inodes", status.inodes),
        ("Files under construction", status.files_under_construction),
        ("Last txid", status.last_txid),
        ("Synced txid", status.synced_txid),
        ("Newest fsimage txid", status.image_txid),
        ("Edits segment starts at", status.segment_start_txid),
        ("Name dirs", ", ".join(status.name_dirs)),
    ]
    for label, value in rows:
        click.echo(f"{label + ':':<28}{value}")
