"""The data commands of ``xdfs dfs``: -put, -get, -cat, -cp, -tail, -setrep -w."""

from __future__ import annotations

import errno
import os
import sys
import time
from typing import Any

import click

from xdfs.cli.dfs_base import Args, PathFailure, command, each_path

TAIL_BYTES = 1024
TAIL_FOLLOW_INTERVAL_S = 1.0
SETREP_WAIT_INTERVAL_S = 1.0


def _put(client: Any, args: Args) -> int:
    """As ``hdfs dfs -put``: a missing local source is reported against itself, anything
    else against the destination; the destination's parent must exist."""
    from xdfs.errors import XdfsError

    *sources, dst = args.values
    overwrite = "-f" in args.flags

    def upload(src: str) -> None:
        if not os.path.lexists(src):
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), src)
        try:
            client.put(src, dst, overwrite=overwrite, create_parents=False)
        except XdfsError as exc:
            raise PathFailure(dst, exc) from exc

    return each_path(client, "put", sources, upload)


def _get(client: Any, args: Args) -> int:
    *sources, dst = args.values
    return each_path(client, "get", sources, lambda src: client.get(src, dst))


command("-put", "[-f] <localsrc> ... <dst>", "-f", min_args=2)(_put)
command("-copyFromLocal", "[-f] <localsrc> ... <dst>", "-f", min_args=2)(_put)
command("-get", "<src> ... <localdst>", min_args=2)(_get)
command("-copyToLocal", "<src> ... <localdst>", min_args=2)(_get)


@command("-cat", "<src> ...")
def cat(client: Any, args: Args) -> int:
    out = sys.stdout.buffer

    def show(path: str) -> None:
        client.copy_to(path, out.write)
        out.flush()

    return each_path(client, "cat", args.values, show)


@command("-cp", "[-f] <src> ... <dst>", "-f", min_args=2)
def cp(client: Any, args: Args) -> int:
    *sources, dst = args.values
    overwrite = "-f" in args.flags
    return each_path(client, "cp", sources, lambda src: client.copy(src, dst, overwrite=overwrite))


@command("-tail", "[-f] <file>", "-f", max_args=1)
def tail(client: Any, args: Args) -> int:
    """The last kilobyte of a file; -f keeps printing what is added (as hdfs dfs -tail)."""
    path = args.values[0]
    out = sys.stdout.buffer

    def show(_path: str) -> None:
        length = client.stat(path).length
        client.copy_to(path, out.write, max(0, length - TAIL_BYTES))
        out.flush()
        while "-f" in args.flags:
            time.sleep(TAIL_FOLLOW_INTERVAL_S)
            grown = client.stat(path).length
            if grown > length:
                client.copy_to(path, out.write, length)
                out.flush()
                length = grown

    return each_path(client, "tail", [path], show)


@command("-setrep", "[-R] [-w] <replication> <path> ...", "-w -R", min_args=2)
def setrep(client: Any, args: Args) -> int:
    """Set the replication of files (directories: every file below); -w waits until every
    block has exactly that many live replicas."""
    rep_text, *targets = args.values
    if not rep_text.isdigit() or int(rep_text) < 1:
        click.echo(f"setrep: {rep_text}: replication must be a positive number", err=True)
        return 2
    replication = int(rep_text)
    changed: list[str] = []

    def apply(path: str) -> None:
        if client.stat(path).is_dir:
            for entry in client.list_dir(path):
                apply(entry.path)
        else:
            client.set_replication(path, replication)
            changed.append(path)
            click.echo(f"Replication {replication} set: {path}")

    status = each_path(client, "setrep", targets, apply)
    if "-w" in args.flags:
        for path in changed:
            _wait_for_replication(client, path, replication)
    return status


def _wait_for_replication(client: Any, path: str, replication: int) -> None:
    click.echo(f"Waiting for {path} ...", nl=False)
    while True:
        report = client.fsck(path, files=True, blocks=True)
        blocks = [b for f in report.listed for b in f.blocks]
        if all(b.live_replicas == replication for b in blocks):
            click.echo(" done")
            return
        click.echo(".", nl=False)
        time.sleep(SETREP_WAIT_INTERVAL_S)
