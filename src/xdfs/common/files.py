"""Durable file helpers shared by every role that persists state (NameNode, DataNode ...).

Every write that must survive a crash goes through :func:`atomic_write` or fsyncs the file
and then its directory. Failures are :class:`~xdfs.errors.StorageError` naming the file.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import socket
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from xdfs.common.faults import fault_point
from xdfs.errors import StorageError

#: Width of the zero-padded txids in the names of edits segments and fsimage files.
TXID_DIGITS = 19

#: fdatasync where the platform has it: enough for appends (the size is flushed too).
datasync: Callable[[int], None] = getattr(os, "fdatasync", os.fsync)


#: ``RWF_DSYNC`` (linux/fs.h): a write durable when it returns, as with ``O_DSYNC``.
RWF_DSYNC: int = getattr(os, "RWF_DSYNC", 2)

#: File systems that make a write given ``RWF_DSYNC`` durable before it completes: a
#: buffered ``pwritev`` (the kernel syncs the written range in the same call) and a direct
#: write through Linux AIO (``common.aio.write_request``). On others an explicit
#: fdatasync follows the write: FUSE's daemons may not see the flag (a power cut of LazyFS
#: lost direct writes that carried it).
DSYNC_FILE_SYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs"})


def file_system_type(path: Path | str, mountinfo: str | None = None) -> str:
    """The type of the file system ``path`` is on, from ``/proc/self/mountinfo`` (or the
    ``mountinfo`` text given): that of the longest mount point containing it; "" when
    unknown (no procfs)."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return ""
    target = os.path.realpath(path)
    best, kind = "", ""
    for line in mountinfo.splitlines():
        fields = line.split()
        if "-" not in fields[6:] or len(fields) < 5:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fields[fields.index("-", 6) + 1]
    return kind


def honours_dsync_writes(file_system: str) -> bool:
    """Whether a write given ``RWF_DSYNC`` to a file on ``file_system`` (a type, as
    :func:`file_system_type` gives) is durable when it returns (:data:`DSYNC_FILE_SYSTEMS`,
    and a platform with ``pwritev``)."""
    return hasattr(os, "pwritev") and file_system in DSYNC_FILE_SYSTEMS


def write_dsync(fd: int, data: bytes | bytearray | memoryview, offset: int,
                path: Path | str) -> None:
    """All of ``data`` at ``offset``, durable when this returns, on a file system that
    :func:`honours_dsync_writes`: one ``pwritev`` with ``RWF_DSYNC``, which syncs the range
    it wrote in the same call (in this project's VMs half the CPU and wait of a write and
    an fdatasync: docs/benchmarks.md); a short write's rest written, then fdatasynced."""
    view = memoryview(data)
    try:
        try:
            done = os.pwritev(fd, [view], offset, RWF_DSYNC)
        except OSError as exc:
            raise StorageError(f"write to {path} failed at byte {offset}: {exc}") from exc
        if done == len(view):
            return
        write_all(fd, view[done:], path, offset + done)
    finally:
        view.release()
    sync_data(fd, path)


def sync_data(fd: int, path: Path | str) -> None:
    """fdatasync ``fd`` (the file at ``path``, for the message): StorageError on failure."""
    try:
        datasync(fd)
    except OSError as exc:
        raise StorageError(f"fsync of {path} failed: {exc}") from exc


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (creates, renames, deletes) durable."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as exc:
        raise StorageError(f"cannot open directory {path} to fsync it: {exc}") from exc
    try:
        os.fsync(fd)
    except OSError as exc:
        raise StorageError(f"fsync of directory {path} failed: {exc}") from exc
    finally:
        os.close(fd)


def make_dirs(path: Path) -> None:
    """``mkdir -p`` whose new directories are durable: each one created is followed by an
    fsync of its parent. Without it a power cut can take a new directory away, and with it
    everything later fsynced inside (a file's fsync does not cover its directory's name)."""
    missing = []
    probe = path
    while not probe.is_dir():
        missing.append(probe)
        probe = probe.parent
    for directory in reversed(missing):
        try:
            directory.mkdir()
        except FileExistsError:
            if not directory.is_dir():
                raise StorageError(
                    f"cannot create directory {directory}: a file is there") from None
        except OSError as exc:
            raise StorageError(f"cannot create directory {directory}: {exc}") from exc
        fsync_dir(directory.parent)  # also when another thread just made it: cheap, safe


def write_all(fd: int, data: bytes | bytearray | memoryview, path: Path | str,
              offset: int | None = None) -> None:
    """All of ``data`` written at the file position, or at ``offset`` (pwrite)."""
    view = memoryview(data)
    done = 0
    try:
        while done < len(view):
            if offset is None:
                done += os.write(fd, view[done:])
            else:
                done += os.pwrite(fd, view[done:], offset + done)
    except OSError as exc:
        raise StorageError(
            f"write to {path} failed at byte {(offset or 0) + done}: {exc}") from exc
    finally:
        view.release()


def atomic_write(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` so a crash leaves the old or the new file, never a mix
    (``mode``: its permission bits, 0o600 for a secret)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        os.fchmod(fd, mode)  # a leftover tmp keeps the mode it was created with
    except OSError as exc:
        raise StorageError(f"cannot create {tmp}: {exc}") from exc
    try:
        write_all(fd, data, tmp)
        try:
            os.fsync(fd)
        except OSError as exc:
            raise StorageError(f"fsync of {tmp} failed: {exc}") from exc
    finally:
        os.close(fd)
    fault_point("storage.before_rename")
    try:
        os.replace(tmp, path)
    except OSError as exc:
        raise StorageError(f"cannot rename {tmp} to {path.name}: {exc}") from exc
    fsync_dir(path.parent)


def read_number_file(path: Path, what: str) -> int:
    """A file holding one decimal number (``seen_txid``, an epoch); 0 when it does not exist."""
    try:
        text = path.read_text("ascii").strip()
    except FileNotFoundError:
        return 0
    except (OSError, UnicodeDecodeError) as exc:
        raise StorageError(f"cannot read {path}: {exc}") from exc
    if not text.isdigit():
        raise StorageError(f"{path}: expected {what}, found {text[:40]!r}")
    return int(text)


def write_number_file(path: Path, value: int) -> None:
    atomic_write(path, f"{value}\n".encode("ascii"))


class LockHolder(NamedTuple):
    """What a lock file records of its holder: ``pid@host`` (as HDFS), or a bare pid."""

    pid: int | None
    host: str

    def __str__(self) -> str:
        return f"pid {self.pid or '?'}" + (f" on {self.host}" if self.host else "")


def parse_lock_holder(text: str) -> LockHolder:
    pid, _, host = text.strip().partition("@")
    return LockHolder(int(pid) if pid.isdigit() else None, host)


def probe_lock(path: Path) -> LockHolder | None:
    """Who holds the flock of the lock file ``path``: None when nobody does (the lock is
    taken and released at once), else what the file records. StorageError when ``path``
    cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise StorageError(f"cannot open {path}: {exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise StorageError(f"cannot probe the lock {path}: {exc}") from exc
        return _read_holder(fd)
    else:
        return None
    finally:
        os.close(fd)  # releases the flock if we took it


class DirLock:
    """``in_use.lock`` of a storage directory: ``flock(LOCK_EX|LOCK_NB)`` holding
    ``pid@host`` (as HDFS writes it), so a second process on the same directory refuses to
    start (naming the holder), and a fencing method can find and kill the holder."""

    def __init__(self, root: Path, name: str = "in_use.lock") -> None:
        self.root = root
        self.path = root / name
        self._fd: int | None = None

    @property
    def locked(self) -> bool:
        return self._fd is not None

    def lock(self) -> None:
        if self._fd is not None:
            return
        make_dirs(self.root)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot open {self.path}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_holder(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise StorageError(
                    f"storage directory {self.root} is locked by {holder}"
                ) from None
            raise StorageError(f"cannot lock {self.path}: {exc}") from exc
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}@{socket.gethostname()}\n".encode(), 0)
            os.fsync(fd)
        except OSError as exc:
            os.close(fd)
            raise StorageError(f"cannot write {self.path}: {exc}") from exc
        self._fd = fd

    def unlock(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the flock
            self._fd = None


def _read_holder(fd: int) -> LockHolder:
    try:
        return parse_lock_holder(os.pread(fd, 300, 0).decode("ascii", "replace"))
    except OSError:
        return LockHolder(None, "")


def parse_key_values(text: str, source: str) -> dict[str, str]:
    """``key=value`` lines (HDFS's VERSION format; blank lines and ``#`` comments allowed)."""
    values: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise StorageError(f"{source} line {lineno}: expected key=value, got {raw!r}")
        values[key.strip()] = value.strip()
    return values
