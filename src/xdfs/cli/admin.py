"""``xdfs admin``: operator commands following ``hdfs dfsadmin``."""

from __future__ import annotations

import getpass
import os
import sys
import time
from typing import Any

import click

from xdfs.cli.main import CliState
from xdfs.cli.shell import raw_command, split_generic_options

NEW_PASSWORD_ENV = "XDFS_NEW_PASSWORD"

USAGE = """Usage: xdfs admin [-fs URI] COMMAND
  -report                       capacity, DataNodes (live and dead), block health
  -safemode get|enter|leave
  -saveNamespace                write an fsimage now
  -rollEdits                    finalize the current edits segment
  -addUser NAME [-groups G1,G2] password from $XDFS_NEW_PASSWORD or a prompt
  -delUser NAME
  -passwd NAME                  password from $XDFS_NEW_PASSWORD or a prompt
  -fetchImage DIR               download the newest fsimage (and .md5) into DIR
  -dumpBlockMap DIR             live block map as Parquet (replicas, datanodes) in DIR
  -transitionToActive --backup HOST:PORT
                                fence the NameNode and promote its BackupNode (refused
                                while the NameNode answers or when fencing fails)
  -backupStatus --backup HOST:PORT
                                a BackupNode's replay position, lag and checkpoints"""

BACKUP_COMMANDS = ("-transitionToActive", "-backupStatus")


@raw_command
def admin(state: CliState, argv: tuple[str, ...]) -> None:
    """Administration: -report, -safemode, -saveNamespace, -rollEdits, users."""
    from xdfs.cli.admin_ha import USAGE as HA_USAGE
    from xdfs.cli.admin_ha import ha_command, is_ha_command

    fs, args = split_generic_options(argv, lambda: click.echo(f"{USAGE}\n{HA_USAGE}"))
    if is_ha_command(args):
        sys.exit(ha_command(state, args))
    if args and args[0] in BACKUP_COMMANDS:
        sys.exit(_backup_command(state, args))
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
        _datanode_report(client.datanode_report())
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
    if name == "-fetchImage" and len(rest) == 1:
        from xdfs.cli.admin_export import fetch_image

        return fetch_image(client, rest[0])
    if name == "-dumpBlockMap" and len(rest) == 1:
        from xdfs.cli.admin_export import dump_block_map

        return dump_block_map(client, rest[0])
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
        ("Safe mode", f"ON: {status.safe_mode_reason}" if status.safe_mode else "OFF"),
        ("Inodes", status.inodes),
        ("Files under construction", status.files_under_construction),
        ("Last txid", status.last_txid),
        ("Synced txid", status.synced_txid),
        ("Newest fsimage txid", status.image_txid),
        ("Edits segment starts at", status.segment_start_txid),
        ("Name dirs", ", ".join(status.name_dirs)),
        ("Name dirs free", ", ".join(
            _free(status.name_dir_free_bytes, index) for index in range(len(status.name_dirs))
        )),
    ]
    for label, value in rows:
        click.echo(f"{label + ':':<28}{value}")
    for backup in status.backups:
        age_s = max(0.0, time.time() - backup.last_fetch_ms / 1000)
        click.echo(f"{'Backup node:':<28}{backup.address} synced txid {backup.synced_txid}, "
                   f"lag {backup.lag_txns} txns, last fetch {age_s:.1f} s ago")


def _free(free_bytes: list[int], index: int) -> str:
    if index >= len(free_bytes) or free_bytes[index] < 0:
        return "unknown"
    return f"{free_bytes[index] / (1 << 30):.2f} GiB"


def _backup_command(state: CliState, args: list[str]) -> int:
    """The commands addressed to a BackupNode rather than to the NameNode."""
    if len(args) != 3 or args[1] != "--backup":
        click.echo(USAGE, err=True)
        return 2
    from xdfs.client.client import AsyncClient
    from xdfs.errors import XdfsError
    from xdfs.protocol.backup import BACKUP_STATUS, TRANSITION_TO_ACTIVE
    from xdfs.rpc.loop import run
    from xdfs.rpc.messages import Empty

    async def call() -> Any:
        async with AsyncClient(f"xdfs://{args[2]}", config=state.config) as client:
            method = TRANSITION_TO_ACTIVE if args[0] == "-transitionToActive" else BACKUP_STATUS
            return await client.rpc.call(method, Empty())

    try:
        answer = run(call())
    except XdfsError as exc:
        click.echo(f"{args[0]}: {type(exc).__name__}: {exc.message}", err=True)
        return 1
    if args[0] == "-transitionToActive":
        click.echo(f"BackupNode at {answer.address} is now the active NameNode (epoch "
                   f"{answer.epoch}, fenced by {answer.fenced_by}, namespace at txid "
                   f"{answer.last_txid}, took {answer.took_s:.2f} s)")
        return 0
    for label, value in backup_status_rows(answer, time.time()):
        click.echo(f"{label + ':':<28}{value}")
    return 0


def backup_status_rows(status: Any, now_s: float) -> list[tuple[str, str]]:
    """A BackupNode's status as label/value lines (times as ages, lists joined)."""
    from xdfs.cli.format import human_duration

    def ago(ms: int) -> str:
        return f"{human_duration(now_s - ms / 1000)} ago" if ms else "never"

    lag = max(0, status.namenode_synced_txid - status.synced_txid)
    return [
        ("State", status.state),
        ("Address", status.address),
        ("NameNode", ", ".join(status.namenode)),
        ("Replayed txid", f"{status.synced_txid} (NameNode at {status.namenode_synced_txid}, "
                          f"lag {lag} txns)"),
        ("Last fetch", ago(status.last_fetch_ms)),
        ("Newest image txid", str(status.image_txid)),
        ("Last checkpoint", ago(status.last_checkpoint_ms)),
        ("Checkpoints uploaded", str(status.checkpoints_uploaded)),
        ("Bootstraps", str(status.bootstraps)),
        ("Inodes", str(status.inodes)),
    ]


def _size(n: int) -> str:
    from xdfs.cli.format import human_size

    return f"{n} ({human_size(n)})"


def _used_share(used: int, capacity: int) -> str:
    return f"{100.0 * used / capacity if capacity else 0.0:.2f}%"


def _datanode_report(report: Any) -> None:
    """The DataNode part of ``-report``, laid out as ``hdfs dfsadmin -report``."""
    click.echo(f"{'Configured Capacity:':<28}{_size(report.capacity_bytes)}")
    click.echo(f"{'DFS Remaining:':<28}{_size(report.free_bytes)}")
    click.echo(f"{'DFS Used:':<28}{_size(report.used_bytes)}")
    click.echo(f"{'DFS Used%:':<28}{_used_share(report.used_bytes, report.capacity_bytes)}")
    click.echo("Replicated Blocks:")
    for label, value in (
        ("Blocks", report.blocks),
        ("Under replicated blocks", report.under_replicated),
        ("Blocks with corrupt replicas", report.corrupt_blocks),
        ("Missing blocks", report.missing_blocks),
        ("Pending replication", report.pending_replication),
        ("Pending deletion", report.pending_deletion),
        ("Blocks from the future (kept)", report.future_blocks),
    ):
        click.echo(f"\t{label}: {value}")
    click.echo("-" * 49)
    for state in ("live", "dead"):
        nodes = [n for n in report.nodes if n.state == state]
        click.echo(f"{state.capitalize()} datanodes ({len(nodes)}):")
        for node in nodes:
            click.echo("")
            click.echo(f"Name: {node.address} ({node.node_id})")
            click.echo(f"Configured Capacity: {_size(node.capacity_bytes)}")
            click.echo(f"DFS Used: {_size(node.used_bytes)}")
            click.echo(f"DFS Remaining: {_size(node.free_bytes)}")
            click.echo(f"DFS Used%: {_used_share(node.used_bytes, node.capacity_bytes)}")
            click.echo(f"Blocks: {node.blocks}")
            click.echo(f"Xceivers: {node.transfers_in_progress}")
            click.echo(f"Last contact: {node.last_contact_s:.1f} s ago")
        click.echo("")
