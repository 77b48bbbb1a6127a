"""``xdfs admin``: operator commands following ``hdfs dfsadmin``."""

from __future__ import annotations

import getpass
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import click

from xdfs.cli.shell import HdfsCommand, HdfsShell, client_for, usage_error

NEW_PASSWORD_ENV = "XDFS_NEW_PASSWORD"
_PASSWORD_FROM = "password from $XDFS_NEW_PASSWORD or a prompt"

admin = HdfsShell("admin", summary="Administration: -report, -safemode, -saveNamespace, "
                                   "-rollEdits, -refreshNodes, users, backups, HA.")
_BACKUP = click.Option(["--backup", "backup"], required=True, metavar="HOST:PORT",
                       help="the BackupNode's address")


def _command(
    name: str, usage: str, *params: click.Parameter, help: str | None = None
) -> Callable[[Any], Any]:
    """An admin command on the NameNode: ``body(client, **params)`` prints its answer."""

    def declare(body: Callable[..., None]) -> Callable[..., None]:
        @click.pass_context
        def run(ctx: click.Context, /, **values: Any) -> None:
            with client_for(ctx) as client:
                body(client, **values)

        admin.add(HdfsCommand(name, usage=usage, prefix="xdfs admin", params=list(params),
                              callback=run, help=help))
        return body

    return declare


@_command("-report", "", help="capacity, DataNodes (live and dead), block health")
def report(client: Any) -> None:
    _report(client.status())
    _datanode_report(client.datanode_report())


@_command("-shards", "", help="the slot map: each shard's address, slot ranges, slots, inodes")
def shards(client: Any) -> None:
    from xdfs.cli.admin_shards import shard_rows

    for line in shard_rows(client.shard_maps()):
        click.echo(line)


@_command("-refreshNodes", "", help="re-read the include, exclude and maintenance files")
def refresh_nodes(client: Any) -> None:
    answer = client.refresh_nodes()
    click.echo("Refresh nodes successful")
    for label, nodes in (("Decommissioning", answer.decommissioning),
                         ("Decommissioned", answer.decommissioned),
                         ("In maintenance", answer.maintenance),
                         ("Refused (not in the include file)", answer.refused)):
        if nodes:
            click.echo(f"{label}: {', '.join(nodes)}")


@_command("-safemode", "get|enter|leave",
          click.Argument(["action"], type=click.Choice(["get", "enter", "leave"])))
def safemode(client: Any, action: str) -> None:
    status = client.safe_mode(action)
    click.echo(f"Safe mode is {'ON' if status.on else 'OFF'}"
               + (f": {status.reason}" if status.on else ""))


@_command("-saveNamespace", "", help="write an fsimage now")
def save_namespace(client: Any) -> None:
    click.echo(f"Save namespace successful (fsimage at txid {client.save_namespace()})")


@_command("-rollEdits", "", help="finalize the current edits segment")
def roll_edits(client: Any) -> None:
    click.echo(f"Successfully rolled edit logs. New segment starts at txid {client.roll_edits()}")


# -groups is the one way to give groups: -group, a missing list or extra words are usage
# errors, not a user silently created without the groups that were meant
@_command("-addUser", "NAME [-groups G1,G2]", click.Argument(["name"]),
          click.Option(["-groups", "groups"], default=""), help=_PASSWORD_FROM)
def add_user(client: Any, name: str, groups: str) -> None:
    client.add_user(name, _new_password(name), groups.split(",") if groups else [])
    click.echo(f"Added user {name}")


@_command("-delUser", "NAME", click.Argument(["name"]))
def del_user(client: Any, name: str) -> None:
    client.remove_user(name)
    click.echo(f"Removed user {name}")


@_command("-passwd", "NAME", click.Argument(["name"]), help=_PASSWORD_FROM)
def passwd(client: Any, name: str) -> None:
    client.set_password(name, _new_password(name))
    click.echo(f"Changed the password of {name}")


@_command("-fetchImage", "DIR", click.Argument(["directory"]),
          help="download the newest fsimage (and .md5) into DIR")
def fetch_image(client: Any, directory: str) -> None:
    from xdfs.cli.admin_export import fetch_image

    sys.exit(fetch_image(client, directory))


@_command("-dumpBlockMap", "DIR", click.Argument(["directory"]),
          help="live block map as Parquet (replicas, datanodes) in DIR")
def dump_block_map(client: Any, directory: str) -> None:
    from xdfs.cli.admin_export import dump_block_map

    sys.exit(dump_block_map(client, directory))


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


def _backup_command(name: str, *, help: str) -> Callable[[Any], Any]:
    """An admin command addressed to a BackupNode rather than to the NameNode:
    ``body(answer)`` prints the answer of its call."""

    def declare(body: Callable[[Any], None]) -> Callable[[Any], None]:
        @click.pass_context
        def run(ctx: click.Context, /, backup: str) -> None:
            sys.exit(_call_backup(ctx, name, backup, body))

        admin.add(HdfsCommand(name, usage="--backup HOST:PORT", prefix="xdfs admin",
                              params=[_BACKUP], callback=run, help=help))
        return body

    return declare


def _call_backup(ctx: click.Context, name: str, address: str, show: Callable[[Any], None]
                 ) -> int:
    from xdfs.client.client import AsyncClient
    from xdfs.errors import XdfsError
    from xdfs.protocol.backup import BACKUP_STATUS, TRANSITION_TO_ACTIVE
    from xdfs.rpc.loop import run
    from xdfs.rpc.messages import Empty

    async def call() -> Any:
        async with AsyncClient(f"xdfs://{address}", config=_config(ctx)) as client:
            method = TRANSITION_TO_ACTIVE if name == "-transitionToActive" else BACKUP_STATUS
            return await client.rpc.call(method, Empty())

    try:
        answer = run(call())
    except XdfsError as exc:
        click.echo(f"{name}: {type(exc).__name__}: {exc.message}", err=True)
        return 1
    show(answer)
    return 0


def _config(ctx: click.Context) -> Any:
    from xdfs.cli.main import CliState

    state = ctx.find_object(CliState)
    assert state is not None
    return state.config


def _show_promotion(answer: Any) -> None:
    click.echo(f"BackupNode at {answer.address} is now the active NameNode (epoch "
               f"{answer.epoch}, fenced by {answer.fenced_by}, namespace at txid "
               f"{answer.last_txid}, took {answer.took_s:.2f} s)")


# The HA commands (HDFS's haadmin) name NameNodes by their id in ha.namenodes; the manual
# transitions take --forcemanual. -transitionToActive also promotes a BackupNode (--backup).
_FORCE = click.Option(["--forcemanual", "force"], is_flag=True,
                      help="bypass the failover controllers")
_ID = "ID: a key of ha.namenodes"


def _ha_command(name: str, usage: str, *params: click.Parameter, help: str) -> None:
    """An HA command: its arguments are NameNode ids, in order."""

    @click.pass_context
    def run(ctx: click.Context, /, **values: Any) -> None:
        from xdfs.cli.admin_ha import ha_command

        force = bool(values.pop("force", False))
        sys.exit(ha_command(_config(ctx), name, list(values.values()), force))

    admin.add(HdfsCommand(name, usage=usage, prefix="xdfs admin", params=list(params),
                          callback=run, help=help))


_ha_command("-getServiceState", "ID", click.Argument(["nn_id"]),
            help=f"active, standby, ... ({_ID})")
_ha_command("-failover", "FROM TO", click.Argument(["source"]), click.Argument(["target"]),
            help="make TO active (graceful with automatic failover)")
_ha_command("-transitionToStandby", "ID [--forcemanual]", click.Argument(["nn_id"]), _FORCE,
            help="manual transition (refused under automatic failover)")


@click.pass_context
def _transition_to_active(ctx: click.Context, /, nn_id: str | None, backup: str | None,
                          force: bool) -> None:
    from xdfs.cli.admin_ha import ha_command

    if (nn_id is None) == (backup is None):
        command = admin.commands["-transitionToActive"]
        assert isinstance(command, HdfsCommand)
        raise usage_error(f"-transitionToActive: give a NameNode ID or --backup HOST:PORT. "
                          f"{command.usage_line()}")
    if backup is not None:
        sys.exit(_call_backup(ctx, "-transitionToActive", backup, _show_promotion))
    assert nn_id is not None
    sys.exit(ha_command(_config(ctx), "-transitionToActive", [nn_id], force))


admin.add(HdfsCommand(
    "-transitionToActive", usage="ID [--forcemanual] | --backup HOST:PORT",
    prefix="xdfs admin", callback=_transition_to_active,
    params=[click.Argument(["nn_id"], required=False),
            click.Option(["--backup", "backup"], metavar="HOST:PORT"), _FORCE],
    help="by hand (refused under automatic failover); --backup: fence the NameNode, "
         "promote its BackupNode"))


@_backup_command("-backupStatus",
                 help="a BackupNode's replay position, lag and checkpoints")
def backup_status(answer: Any) -> None:
    for label, value in backup_status_rows(answer, time.time()):
        click.echo(f"{label + ':':<28}{value}")


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


_ADMIN_STATES = {
    "normal": "Normal",
    "decommissioning": "Decommission in progress",
    "decommissioned": "Decommissioned",
    "entering_maintenance": "Entering maintenance",
    "in_maintenance": "In maintenance",
}


def _admin_state(node: Any) -> str:
    """As dfsadmin -report's 'Decommission Status', with the progress and expiry."""
    text: str = _ADMIN_STATES.get(node.admin_state, node.admin_state)
    if node.admin_state in ("decommissioning", "entering_maintenance"):
        text += f" ({node.decommission_blocks_left} block(s) left)"
    if node.maintenance_expiry_ms:
        until = time.strftime("%Y-%m-%d %H:%M:%S UTC",
                              time.gmtime(node.maintenance_expiry_ms / 1000))
        text += f", until {until}"
    return text


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
            click.echo(f"Rack: {node.rack}")
            click.echo(f"Decommission Status: {_admin_state(node)}")
            click.echo(f"Configured Capacity: {_size(node.capacity_bytes)}")
            click.echo(f"DFS Used: {_size(node.used_bytes)}")
            click.echo(f"DFS Remaining: {_size(node.free_bytes)}")
            click.echo(f"DFS Used%: {_used_share(node.used_bytes, node.capacity_bytes)}")
            click.echo(f"Blocks: {node.blocks}")
            click.echo(f"Xceivers: {node.transfers_in_progress}")
            click.echo(f"Last contact: {node.last_contact_s:.1f} s ago")
        click.echo("")


# --- quotas (hdfs dfsadmin -setQuota ...) ------------------------------------------------

_DIRS = click.Argument(["dirs"], nargs=-1, required=True)


def _quota_command(
    name: str, usage: str, *params: click.Parameter, help: str
) -> Callable[[Callable[..., tuple[int | None, int | None]]], Any]:
    """A quota command: ``body(**values)`` says what to set (None: leave as is, -1:
    clear), then it is applied to every directory; a failure is one line naming the
    command, the others still run (exit status 1)."""

    def declare(body: Callable[..., tuple[int | None, int | None]]) -> Any:
        @click.pass_context
        def run(ctx: click.Context, /, dirs: tuple[str, ...], **values: str) -> None:
            from xdfs.errors import XdfsError

            try:
                ns_quota, ds_quota = body(**values)
            except ValueError as exc:
                raise usage_error(f"{name}: {exc}. Usage: xdfs admin {name} {usage}") from None
            status = 0
            with client_for(ctx) as client:
                for path in dirs:
                    try:
                        client.set_quota(path, ns_quota, ds_quota)
                    except XdfsError as exc:
                        click.echo(f"{name[1:]}: {exc.message}", err=True)
                        status = 1
            sys.exit(status)

        admin.add(HdfsCommand(name, usage=usage, prefix="xdfs admin",
                              params=[*params, _DIRS], callback=run, help=help))
        return body

    return declare


@_quota_command("-setQuota", "<quota> <dirname>...<dirname>", click.Argument(["quota"]),
                help="most names (files and directories, itself included)")
def set_quota(quota: str) -> tuple[int | None, int | None]:
    if not quota.isdigit() or int(quota) < 1:
        raise ValueError(f'"{quota}" is not a valid value for a quota')
    return int(quota), None


@_quota_command("-clrQuota", "<dirname>...<dirname>", help="remove the name quota")
def clear_quota() -> tuple[int | None, int | None]:
    return -1, None


@_quota_command("-setSpaceQuota", "<quota> <dirname>...<dirname>", click.Argument(["quota"]),
                help="most bytes times replication (1g, 500m ...)")
def set_space_quota(quota: str) -> tuple[int | None, int | None]:
    from xdfs.cli.format import parse_size

    try:
        return None, parse_size(quota)
    except ValueError:
        raise ValueError(f'"{quota}" is not a valid value for a quota') from None


@_quota_command("-clrSpaceQuota", "<dirname>...<dirname>", help="remove the space quota")
def clear_space_quota() -> tuple[int | None, int | None]:
    return None, -1
