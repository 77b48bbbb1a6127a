"""The data commands of ``xdfs dfs``: -put, -get, -cat, -cp, -tail, -setrep -w."""

from __future__ import annotations

import errno
import os
import posixpath
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import click

from xdfs.cli.dfs_base import Args, PathFailure, command, each_path, expanded, one_match
from xdfs.cli.dfs_progress import local_bytes, progress_bar, remote_bytes

TAIL_BYTES = 1024
TAIL_FOLLOW_INTERVAL_S = 1.0
SETREP_WAIT_INTERVAL_S = 1.0


def _put(client: Any, args: Args) -> int:
    """As ``hdfs dfs -put``: a missing local source is reported against itself, anything
    else against the destination; the destination's parent must exist. -f replaces an
    existing file, -p keeps each file's access and modification times and permission
    bits, -t N uploads N sources at a time."""
    *sources, pattern = args.values
    overwrite = "-f" in args.flags
    preserve = "-p" in args.flags
    threads = _threads(args.options.get("-t", "1"))
    if threads is None:
        click.echo(f"put: -t: the thread count must be a number >= 1. {PUT_USAGE}", err=True)
        return 2
    dst = one_match(client, "put", pattern)
    if dst is None:
        return 1
    with progress_bar("put", lambda: sum(map(local_bytes, sources))) as progress:
        if threads == 1 or len(sources) == 1:
            return each_path(  # local sources: the local shell expands their globs
                client, "put", sources,
                lambda src: upload(client, src, dst, overwrite, preserve, progress), glob=False)
        with ThreadPoolExecutor(threads) as pool:
            uploads = iter([pool.submit(upload, client, src, dst, overwrite, preserve,
                                        progress) for src in sources])
            # reported in the order given, whichever finishes first
            return each_path(client, "put", sources, lambda _src: next(uploads).result(),
                             glob=False)


def _threads(text: str) -> int | None:
    return int(text) if text.isdigit() and int(text) >= 1 else None


def upload(client: Any, src: str, dst: str, overwrite: bool, preserve: bool = False,
           progress: Callable[[int], object] | None = None) -> None:
    """One source of -put (and -moveFromLocal); see :func:`_put`."""
    from xdfs.client.transfer import SourceChanged
    from xdfs.errors import AlreadyExists, XdfsError

    if not os.path.lexists(src):
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), src)
    # read before the upload: reading the files changes their access times
    local_stats = {}
    if preserve:
        local_stats = {rel: os.stat(path) for rel, path in _local_files(src).items()}
    try:
        written = client.put(src, dst, overwrite=overwrite, create_parents=False,
                             progress=progress)
        for remote, local in _pairs(written, local_stats):
            _preserve_remote(client, remote, local)
    except AlreadyExists as exc:  # named as hdfs does: the file that exists
        raise PathFailure(_put_target(client, src, dst), exc) from exc
    except SourceChanged:
        raise  # the source's fault: reported against it
    except XdfsError as exc:
        raise PathFailure(dst, exc) from exc


def _put_target(client: Any, src: str, dst: str) -> str:
    """Where -put writes ``src``: into ``dst`` when that is a directory, else ``dst``."""
    from xdfs.errors import XdfsError

    try:
        into = dst.endswith("/") or client.stat(dst).is_dir
    except XdfsError:
        into = False
    if not into:
        return dst
    return posixpath.join(dst, os.path.basename(os.path.normpath(src)))


def _get(client: Any, args: Args) -> int:
    """-get; -p keeps each file's access and modification times and permission bits."""
    *patterns, dst = args.values
    preserve = "-p" in args.flags
    sources, failed = expanded(client, "get", patterns)
    if not sources or not local_destination_ok("get", dst, len(sources)):
        return 1

    with progress_bar("get", lambda: remote_bytes(client, sources)) as progress:

        def download(src: str) -> None:
            written = client.get(src, dst, progress)
            if preserve:
                for local, remote in _pairs(written, _remote_files(client, src)):
                    os.utime(local, ns=(remote.atime_ms * 1_000_000,
                                        remote.mtime_ms * 1_000_000))
                    os.chmod(local, remote.mode & 0o7777)

        return each_path(client, "get", sources, download, glob=False) or failed


def local_destination_ok(verb: str, dst: str, sources: int) -> bool:
    """As ``hdfs dfs -get``: several sources need an existing directory, one source a
    destination whose parent exists (nothing is made); else one line and False."""
    problem = ""
    if sources > 1 and not os.path.exists(dst):
        problem = "No such file or directory"
    elif sources > 1 and not os.path.isdir(dst):
        problem = "Is not a directory"
    elif not os.path.exists(dst) and not os.path.isdir(os.path.dirname(dst) or "."):
        problem = "No such file or directory"
    if problem:
        click.echo(f"{verb}: `{dst}': {problem}", err=True)
    return not problem


PUT_ARGS = "[-f] [-p] [-t <thread count>] <localsrc> ... <dst>"
PUT_USAGE = f"Usage: xdfs dfs -put {PUT_ARGS}"
command("-put", PUT_ARGS, "-f -p", min_args=2, options="-t")(_put)
command("-copyFromLocal", PUT_ARGS, "-f -p", min_args=2, options="-t")(_put)
command("-get", "[-p] <src> ... <localdst>", "-p", min_args=2)(_get)
command("-copyToLocal", "[-p] <src> ... <localdst>", "-p", min_args=2)(_get)


def _local_files(src: str) -> dict[str, str]:
    """The files of a local source by their path relative to its parent (``dir/a/b``)."""
    if not os.path.isdir(src):
        return {os.path.basename(src): src}
    base = os.path.dirname(os.path.abspath(src))
    found = {}
    for root, _dirs, names in os.walk(src):
        for name in names:
            full = os.path.join(root, name)
            found[os.path.relpath(full, base).replace(os.sep, "/")] = full
    return found


def _remote_files(client: Any, src: str) -> dict[str, Any]:
    """The statuses of the files of an xdfs source, as :func:`_local_files`."""
    top = client.stat(src)
    base = top.path.rsplit("/", 1)[0]
    found: dict[str, Any] = {}
    pending = [top]
    while pending:
        status = pending.pop()
        if status.is_dir:
            pending.extend(client.list_dir(status.path))
        else:
            found[status.path[len(base) + 1 :]] = status
    return found


def _pairs(written: list[str], sources: dict[str, Any]) -> list[tuple[str, Any]]:
    """Each written path with the source it copies: the source whose relative path is the
    longest tail of it (a single file source matches whatever name it was written as)."""
    pairs = []
    for path in written:
        text = path.replace(os.sep, "/")
        tails = [rel for rel in sources if text == rel or text.endswith("/" + rel)]
        if not tails and len(sources) == 1:
            tails = list(sources)
        if tails:
            pairs.append((path, sources[max(tails, key=len)]))
    return pairs


def _preserve_remote(client: Any, remote: str, local: os.stat_result) -> None:
    client.set_times(remote, local.st_mtime_ns // 1_000_000, local.st_atime_ns // 1_000_000)
    client.set_permission(remote, local.st_mode & 0o7777)


@command("-cat", "<src> ...")
def cat(client: Any, args: Args) -> int:
    out = sys.stdout.buffer

    def show(path: str) -> None:
        client.copy_to(path, out.write)
        out.flush()

    return each_path(client, "cat", args.values, show)


@command("-cp", "[-f] [-p] <src> ... <dst>", "-f -p", min_args=2)
def cp(client: Any, args: Args) -> int:
    """Copy files inside xdfs (the bytes pass through this client); -f replaces an
    existing file, -p keeps the access and modification times, the owner and group and
    the permission bits (HDFS's -p with no letters)."""
    *patterns, pattern = args.values
    overwrite = "-f" in args.flags
    dst = one_match(client, "cp", pattern)
    if dst is None:
        return 1
    sources, failed = expanded(client, "cp", patterns)
    with progress_bar("cp", lambda: remote_bytes(client, sources)) as progress:

        def copy(src: str) -> None:
            target = client.copy(src, dst, overwrite=overwrite, progress=progress)
            if "-p" in args.flags:
                _preserve_copy(client, client.stat(src), target)

        return each_path(client, "cp", sources, copy, glob=False) or failed


def _preserve_copy(client: Any, source: Any, target: str) -> None:
    client.set_times(target, source.mtime_ms, source.atime_ms)
    client.set_owner(target, source.owner, source.group)
    client.set_permission(target, source.mode & 0o7777)


@command("-tail", "[-f] <file>", "-f", max_args=1)
def tail(client: Any, args: Args) -> int:
    """The last kilobyte of a file; -f keeps printing what is added (as hdfs dfs -tail)."""
    path = args.values[0]
    out = sys.stdout.buffer

    def show(path: str) -> None:
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
