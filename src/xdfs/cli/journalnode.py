"""``xdfs journalnode``: serve journals of the quorum journal (one of 2N+1 JournalNodes)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from xdfs.cli.main import CliState

if TYPE_CHECKING:
    from xdfs.config import XdfsConfig


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--journal-dir", default=None, metavar="DIR",
              help="Where journals are kept (default journalnode.journal_dir).")
@click.option("--rpc-address", default=None, metavar="HOST:PORT",
              help="Where to serve (default journalnode.rpc_address).")
@click.pass_obj
def journalnode(state: CliState, journal_dir: str | None, rpc_address: str | None) -> None:
    """Run a JournalNode on DIR: one directory per journal, the NameNode's segment files
    plus the quorum protocol's promises. Callers must present the journal secret
    (journalnode.secret_file, the same file on every JournalNode and NameNode)."""
    from xdfs.common.addresses import parse_address
    from xdfs.rpc.loop import run

    config = state.config
    directory = journal_dir or config.journalnode.journal_dir
    if not directory:
        raise click.UsageError("give --journal-dir DIR (or set journalnode.journal_dir)")
    host, port = parse_address(rpc_address or config.journalnode.rpc_address)
    sys.exit(run(_serve(config, Path(directory), host, port), use_uvloop=config.rpc.use_uvloop))


async def _serve(config: XdfsConfig, journal_dir: Path, host: str, port: int) -> int:
    from xdfs.cli.serving import serve
    from xdfs.journal.server import JournalNode

    return await serve("journalnode", JournalNode(config, journal_dir), host, port, config.rpc)
