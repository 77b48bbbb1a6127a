"""``xdfs logservice``: run one instance of the replicated log service."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from xdfs.cli.main import CliState

if TYPE_CHECKING:
    from xdfs.config import XdfsConfig


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--rpc-address", default="127.0.0.1:0", show_default=True, metavar="HOST:PORT",
              help="Where to serve.")
@click.pass_obj
def logservice(state: CliState, rpc_address: str) -> None:
    """Serve named logs on ledgers stored by the JournalNodes of logservice.storage_nodes,
    their metadata in ZooKeeper (logservice.zookeeper_quorum). Several instances may run;
    a log's writer lives in the one holding its writer lock."""
    from xdfs.common.addresses import parse_address
    from xdfs.rpc.loop import run

    config = state.config
    host, port = parse_address(rpc_address)
    sys.exit(run(_serve(config, host, port), use_uvloop=config.rpc.use_uvloop))


async def _serve(config: XdfsConfig, host: str, port: int) -> int:
    from xdfs.cli.serving import serve
    from xdfs.logservice.server import LogService

    return await serve("logservice", LogService(config), host, port, config.rpc)
