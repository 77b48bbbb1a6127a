"""``xdfs admin -fetchImage DIR`` and ``xdfs admin -dumpBlockMap DIR``: metadata of a running
NameNode to local files for ``xdfs oiv`` / ``xdfs analyze``. Each function takes a sync
:class:`xdfs.Client`, prints one line as ``hdfs dfsadmin`` does, and returns an exit code."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import click


def fetch_image(client: Any, directory: str) -> int:
    """Download the NameNode's newest fsimage (and its .md5) into ``directory``."""
    path: Path = client.fetch_image(directory)
    click.echo(f"Fetched fsimage {path.name} ({path.stat().st_size} bytes) to {path}")
    return 0


def dump_block_map(client: Any, directory: str) -> int:
    """The live block map as ``replicas.parquet`` and ``datanodes.parquet`` in ``directory``
    (one row per replica, and one per block that has none), streamed as it arrives."""
    from xdfs.analytics.export import DATANODES_FILE, REPLICAS_FILE, BlockMapWriter

    writer = BlockMapWriter(directory)
    try:
        head = client.block_map(writer.add_rows)
    except BaseException:
        # no half-written table is left for an analysis to mistake for the whole map
        with contextlib.suppress(Exception):
            writer.close([])
        for name in (REPLICAS_FILE, DATANODES_FILE):
            (Path(directory) / name).unlink(missing_ok=True)
        raise
    counts = writer.close(head.datanodes)
    rows = counts.rows[REPLICAS_FILE]
    click.echo(
        f"Dumped block map: {head.blocks} blocks, {rows} replica rows, "
        f"{len(head.datanodes)} DataNodes to {directory}"
    )
    return 0
