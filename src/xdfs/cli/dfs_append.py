"""The commands of ``xdfs dfs`` that change a file in place: -appendToFile, -truncate [-w],
-concat (HDFS's append, truncate and concat)."""

from __future__ import annotations

import sys
import time
from typing import Any, BinaryIO

import click

from xdfs.cli.dfs_base import Args, command, each_path, expanded, one_match

TRUNCATE_WAIT_INTERVAL_S = 1.0


@command("-appendToFile", "<localsrc> ... <dst>", min_args=2)
def append_to_file(client: Any, args: Args) -> int:
    """Append local files (``-`` reads standard input) to ``dst``, created when missing
    (as ``hdfs dfs -appendToFile``); every source goes through one append."""
    from xdfs.errors import NotFound

    *sources, pattern = args.values
    dst = one_match(client, "appendToFile", pattern)
    if dst is None:
        return 1

    def append(_dst: str) -> None:
        try:
            writer = client.append(dst)
        except NotFound:
            writer = client.open_writer(dst, create_parents=False)
        try:
            for source in sources:
                if source == "-":
                    _copy(sys.stdin.buffer, writer)
                else:
                    with open(source, "rb") as local:
                        _copy(local, writer)
        except BaseException:
            writer.abort()
            raise
        writer.close()

    return each_path(client, "appendToFile", [dst], append, glob=False)


def _copy(source: BinaryIO, writer: Any) -> None:
    from xdfs.client.transfer import LOCAL_READ_BYTES

    while chunk := source.read(LOCAL_READ_BYTES):
        writer.write(chunk)


@command("-truncate", "[-w] <length> <path> ...", "-w", min_args=2)
def truncate(client: Any, args: Args) -> int:
    """Cut files to a length (as ``hdfs dfs -truncate``). A cut inside a block needs its
    block recovery first: without ``-w`` the command says so and returns, with ``-w`` it
    waits until the file is closed again."""
    length_text, *paths = args.values
    if not length_text.isdigit():
        click.echo(f"truncate: {length_text}: length must be a number >= 0", err=True)
        return 2
    length = int(length_text)
    waiting: list[str] = []

    def cut(path: str) -> None:
        if client.truncate(path, length):
            click.echo(f"Truncated {path} to length: {length}")
            return
        if "-w" in args.flags:
            waiting.append(path)
        else:
            click.echo(f"Truncating {path} to length: {length}. Wait for block recovery to "
                       "complete before further updating this file.")

    status = each_path(client, "truncate", paths, cut)
    for path in waiting:
        status |= each_path(client, "truncate", [path], _wait_for_recovery(client, length),
                            glob=False)
    return status


def _wait_for_recovery(client: Any, length: int) -> Any:
    def wait(path: str) -> None:
        click.echo(f"Waiting for {path} ...", nl=False)
        while client.stat(path).under_construction:
            click.echo(".", nl=False)
            time.sleep(TRUNCATE_WAIT_INTERVAL_S)
        click.echo(" done")
        click.echo(f"Truncated {path} to length: {length}")

    return wait


@command("-concat", "<target path> <src path> ...", min_args=2)
def concat(client: Any, args: Args) -> int:
    """Move the blocks of the sources to the end of the target and delete the sources
    (as ``hdfs dfs -concat``: closed files of one directory, one block size)."""
    target, *patterns = args.values
    sources, failed = expanded(client, "concat", patterns)
    if failed:
        return 1
    destination = one_match(client, "concat", target)
    if destination is None:
        return 1
    return each_path(client, "concat", [destination], lambda path: client.concat(path, sources),
                     glob=False)
