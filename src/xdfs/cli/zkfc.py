"""``xdfs zkfc``: run the ZooKeeper failover controller of one NameNode."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from xdfs.cli.main import CliState

if TYPE_CHECKING:
    from xdfs.config import XdfsConfig


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--id", "nn_id", default=None, metavar="ID",
              help="The NameNode's id in ha.namenodes (default: the id of --namenode there).")
@click.option("--namenode", default=None, metavar="HOST:PORT",
              help="The NameNode to watch (default: ha.namenodes[ID]).")
@click.option("--rpc-address", default=None, metavar="HOST:PORT",
              help="Where this controller serves (default ha.controllers[ID], else "
              "ha.zkfc_rpc_address).")
@click.pass_obj
def zkfc(state: CliState, nn_id: str | None, namenode: str | None,
         rpc_address: str | None) -> None:
    """Watch one NameNode's health and take part, for it, in the election of the active
    NameNode through ZooKeeper (ha.zookeeper_quorum): the winner fences the last active
    and makes its NameNode active; the others keep theirs standby."""
    from xdfs.common.addresses import parse_address
    from xdfs.rpc.loop import run

    config = state.config
    nn_id, namenode = resolve_namenode(config, nn_id, namenode)
    host, port = parse_address(rpc_address or config.ha.controllers.get(nn_id)
                               or config.ha.zkfc_rpc_address)
    sys.exit(run(_serve(config, nn_id, namenode, host, port),
                 use_uvloop=config.rpc.use_uvloop))


def resolve_namenode(config: XdfsConfig, nn_id: str | None,
                     namenode: str | None) -> tuple[str, str]:
    """(id, address) from the flags and ha.namenodes; a usage error when they do not say."""
    namenodes = config.ha.namenodes
    if nn_id is None and namenode is not None:
        matches = [key for key, address in namenodes.items() if address == namenode]
        if len(matches) != 1:
            raise click.UsageError(f"--namenode {namenode} is not in ha.namenodes: give --id")
        nn_id = matches[0]
    if nn_id is None:
        raise click.UsageError("give --id ID (a key of ha.namenodes) or --namenode HOST:PORT")
    address = namenode or namenodes.get(nn_id)
    if not address:
        raise click.UsageError(f"NameNode id {nn_id!r} is not in ha.namenodes "
                               f"({', '.join(sorted(namenodes)) or 'empty'}): give --namenode")
    return nn_id, address


async def _serve(config: XdfsConfig, nn_id: str, namenode: str, host: str, port: int) -> int:
    from xdfs.cli.serving import serve
    from xdfs.zkfc.server import FailoverController

    return await serve("zkfc", FailoverController(config, nn_id, namenode), host, port, config.rpc)
