"""``xdfs backupnode``: follow a NameNode's edits, keep a hot namespace, checkpoint for it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from xdfs.cli.main import CliState

if TYPE_CHECKING:
    from xdfs.config import XdfsConfig


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--name-dir", default=None, metavar="DIR",
              help="The backup's storage directory (default backupnode.name_dir).")
@click.option("--namenode", default=None, metavar="HOST:PORT",
              help="The NameNode to follow (default backupnode.namenode).")
@click.option("--rpc-address", default=None, metavar="HOST:PORT",
              help="Where to serve (default backupnode.rpc_address); clients and DataNodes "
                   "list this address second.")
@click.pass_obj
def backupnode(
    state: CliState, name_dir: str | None, namenode: str | None, rpc_address: str | None
) -> None:
    """Run a BackupNode on DIR following the NameNode at HOST:PORT.

    An empty DIR is formatted with the NameNode's ids and filled from its newest image.
    It logs in to the NameNode as a superuser: $XDFS_USER / $XDFS_PASSWORD (or
    client.user / client.password / client.token). Promote it with
    `xdfs admin -transitionToActive --backup HOST:PORT` once the NameNode is gone: it
    fences the NameNode first (backupnode.fencing_methods) and refuses without a method
    that succeeds."""
    from xdfs.common.addresses import parse_address, parse_fs_uri
    from xdfs.rpc.loop import run

    config = state.config
    directory = name_dir or config.backupnode.name_dir
    if not directory:
        raise click.UsageError("give --name-dir DIR (or set backupnode.name_dir)")
    target = namenode or config.backupnode.namenode
    if not target:
        raise click.UsageError("give --namenode HOST:PORT (or set backupnode.namenode)")
    host, port = parse_address(rpc_address or config.backupnode.rpc_address)
    sys.exit(run(_serve(config, Path(directory), parse_fs_uri(target), host, port),
                 use_uvloop=config.rpc.use_uvloop))


async def _serve(
    config: XdfsConfig, name_dir: Path, namenodes: list[str], host: str, port: int
) -> int:
    from xdfs.backupnode.server import BackupNode
    from xdfs.cli.serving import serve

    return await serve(
        "backupnode", BackupNode(config, name_dir, namenodes), host, port, config.rpc
    )
