"""``xdfs datanode``: serve block replicas and report them to a NameNode."""

from __future__ import annotations

import asyncio
import signal
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

    It logs in to the NameNode as a superuser: $XDFS_USER / $XDFS_PASSWORD (or
    client.user / client.password / client.token)."""
    from xdfs.common.addresses import parse_address, parse_fs_uri
    from xdfs.rpc.loop import run

    config = state.config
    directory = data_dir or config.datanode.data_dir
    if not directory:
        raise click.UsageError("give --data-dir DIR (or set datanode.data_dir)")
    namenodes = namenode or config.datanode.namenode
    if not namenodes:
        raise click.UsageError("give --namenode HOST:PORT (or set datanode.namenode)")
    addresses = parse_fs_uri(namenodes)
    host, port = parse_address(rpc_address or config.datanode.rpc_address)
    sys.exit(run(_serve(config, Path(directory), addresses, host, port),
                 use_uvloop=config.rpc.use_uvloop))


async def _serve(
    config: XdfsConfig, data_dir: Path, namenodes: list[str], host: str, port: int
) -> int:
    from xdfs.common.faults import arm_faults_from_env
    from xdfs.datanode.server import DataNode
    from xdfs.errors import XdfsError

    node = DataNode(config, data_dir, namenodes)  # imports (and registers) the fault points
    armed = arm_faults_from_env()  # crash tests only: XDFS_FAULTS=point=action
    if armed:
        click.echo(f"fault points armed: {', '.join(armed)}", err=True)
    try:
        address = await node.start(host, port)
    except (XdfsError, OSError) as exc:
        message = exc.message if isinstance(exc, XdfsError) else str(exc)
        click.echo(f"datanode cannot start: {type(exc).__name__}: {message}", err=True)
        return 1
    click.echo(f"datanode serving on {address}")
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(node.stopped.wait())]
    await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    for waiter in waiters:
        waiter.cancel()
    await node.stop()
    if node.fatal is not None:
        fatal = node.fatal
        message = fatal.message if isinstance(fatal, XdfsError) else repr(fatal)
        click.echo(f"datanode stopped: {type(fatal).__name__}: {message}", err=True)
        return 1
    click.echo("datanode stopped")
    return 0
