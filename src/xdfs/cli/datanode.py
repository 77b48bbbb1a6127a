"""``xdfs datanode``: serve block replicas and report them to a NameNode."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from xdfs.cli.main import CliState

if TYPE_CHECKING:
    from xdfs.config import XdfsConfig


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--data-dir", default=None, metavar="DIR",
              help="Where blocks are kept (default datanode.data_dir).")
@click.option("--namenode", default=None, metavar="HOST:PORT[,HOST:PORT]",
              help="NameNode address(es), tried in order (default datanode.namenode).")
@click.option("--rpc-address", default=None, metavar="HOST:PORT",
              help="Where to serve block reads and writes (default datanode.rpc_address).")
@click.pass_obj
def datanode(
    state: CliState, data_dir: str | None, namenode: str | None, rpc_address: str | None
) -> None:
    """Run a DataNode on DIR, registered with the NameNode(s).

    It logs in to the NameNode with the cluster's DataNode secret: point
    datanode.secret_file (-D datanode.secret_file=F) at a copy of DIR/datanode.secret of a
    name dir. Without it, it logs in as client.user ($XDFS_USER / $XDFS_PASSWORD), which
    must be a superuser."""
    from xdfs.common.addresses import parse_address, parse_fs_uri
    from xdfs.rpc.loop import run

    config = state.config
    directory = data_dir or config.datanode.data_dir
    if not directory:
        raise click.UsageError("give --data-dir DIR (or set datanode.data_dir)")
    namenodes = namenode or config.datanode.namenode or config.ha.default_fs()
    if config.datanode.shards:  # every shard's NameNodes: datanode.namenode is not used
        if namenode:
            raise click.UsageError("--namenode and datanode.shards exclude each other")
        namenodes = ""
    elif not namenodes:
        raise click.UsageError("give --namenode HOST:PORT (or set datanode.namenode or "
                               "datanode.shards)")
    addresses = parse_fs_uri(namenodes, config.ha.nameservices()) if namenodes else []
    host, port = parse_address(rpc_address or config.datanode.rpc_address)
    sys.exit(run(_serve(config, Path(directory), addresses, host, port),
                 use_uvloop=config.rpc.use_uvloop))


async def _serve(
    config: XdfsConfig, data_dir: Path, namenodes: list[str], host: str, port: int
) -> int:
    from xdfs.cli.serving import serve
    from xdfs.datanode.server import DataNode

    return await serve("datanode", DataNode(config, data_dir, namenodes), host, port, config.rpc)
