"""``xdfs dev``: a local cluster of real processes (grows as the server roles land)."""

from __future__ import annotations

import sys

import click


@click.command()
@click.option("--base-dir", default=None, help="Where the cluster keeps its data.")
@click.option("--port", type=int, default=None, help="NameNode client port.")
def dev(base_dir: str | None, port: int | None) -> None:
    """Start a local cluster (NameNode, DataNodes) as child processes."""
    click.echo("xdfs dev: no server role has landed yet; nothing to start", err=True)
    sys.exit(2)
