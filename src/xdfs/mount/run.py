"""Mounting and unmounting: check the mount point, reach the cluster, serve until
Ctrl-C, SIGTERM or ``fusermount3 -u``, then unmount (the asyncio driver of the mount)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path

from xdfs.config import XdfsConfig
from xdfs.errors import InvalidArgument, Unavailable, XdfsError
from xdfs.mount.options import MountOptions

log = logging.getLogger("xdfs.mount")

#: The line a mount prints on stdout once the file system answers (daemon mode, tests).
READY_LINE = "xdfs mounted on"
FUSERMOUNT = "fusermount3"


def _unescape(field: str) -> str:
    """/proc/mounts writes space, tab, newline and backslash as octal escapes."""
    for code in ("040", "011", "012", "134"):
        field = field.replace("\\" + code, chr(int(code, 8)))
    return field


def is_mounted(path: str | os.PathLike[str]) -> bool:
    """Anything mounted on ``path`` (a dead FUSE mount too, which stat cannot see)?"""
    target = os.path.abspath(path)
    with open("/proc/self/mounts") as mounts:
        return any(_unescape(line.split()[1]) == target for line in mounts)


def check_mountpoint(path: str | os.PathLike[str]) -> Path:
    """An existing empty directory not mounted on; InvalidArgument otherwise."""
    where = Path(path).absolute()
    if is_mounted(where):
        raise InvalidArgument(f"{where} is already a mount point "
                              f"(`{FUSERMOUNT} -u {where}` detaches a dead one)")
    if not where.is_dir():
        raise InvalidArgument(f"{where} is not a directory")
    if any(where.iterdir()):
        raise InvalidArgument(f"{where} is not empty")
    return where


async def serve(config: XdfsConfig, mountpoint: Path, options: MountOptions,
                ready: Callable[[], None] | None = None) -> None:
    """Mount and serve until unmounted. The cluster is asked for its root before the
    mount is made: a cluster that is down fails here, with nothing mounted."""
    import pyfuse3
    import pyfuse3.asyncio

    from xdfs.client.client import AsyncClient
    from xdfs.mount.inodes import InodeTable
    from xdfs.mount.ops import XdfsOperations
    from xdfs.mount.users import UserMap

    client = AsyncClient(config=config)
    try:
        try:
            root = await asyncio.wait_for(client.stat("/"), options.call_timeout)
        except (XdfsError, TimeoutError) as exc:
            why = exc.message if isinstance(exc, XdfsError) else "no answer"
            raise Unavailable(f"cannot reach the cluster {','.join(client.addresses)}: "
                              f"{why}") from None
        user = client.rpc.authenticated_user or config.client.user
        users = UserMap(user, os.getuid(), os.getgid(), options.unknown_uid,
                        options.unknown_gid)
        ops = XdfsOperations(client, options, InodeTable("/", root.inode_id), users)
        pyfuse3.asyncio.enable()
        try:
            pyfuse3.init(ops, str(mountpoint), options.fuse_options())
        except RuntimeError as exc:
            raise InvalidArgument(f"cannot mount on {mountpoint}: {exc}") from None
        try:
            await _serve_mounted(mountpoint, user, options, ready)
        finally:
            await ops.close_all()
            pyfuse3.close(unmount=True)
    finally:
        await client.close()


async def _serve_mounted(mountpoint: Path, user: str, options: MountOptions,
                         ready: Callable[[], None] | None) -> None:
    import pyfuse3

    loop = asyncio.get_running_loop()
    for number in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(number, pyfuse3.terminate)
    log.info("mounted on %s as xdfs user %s", mountpoint, user or "(anonymous)")
    print(f"{READY_LINE} {mountpoint}", flush=True)
    if ready is not None:
        ready()
    try:
        await pyfuse3.main(min_tasks=4, max_tasks=options.max_tasks)
    finally:
        for number in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(number)
    log.info("unmounting %s", mountpoint)


def detach_output(log_file: str | None) -> None:
    """A daemonized mount: stdout and stderr to its log file (or nowhere) once ready."""
    target = log_file or os.devnull
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    with contextlib.suppress(OSError):
        os.dup2(fd, 1)
        os.dup2(fd, 2)
    os.close(fd)
