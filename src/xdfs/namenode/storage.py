"""NameNode storage directories: layout, ``VERSION``, ``seen_txid``, the ``in_use.lock``, and
the named fault hooks of every persist point.

Layout of one name dir (``namenode.name_dirs``; the NameNode writes to every one)::

    DIR/
      in_use.lock                  flock(LOCK_EX|LOCK_NB) held while in use; holds our pid
      current/
        VERSION                    key=value lines (see below)
        seen_txid                  decimal txid + "\\n": every txid <= it was durable once
        edits_<start>-<end>        finalized segments (19-digit zero-padded txids)
        edits_inprogress_<start>   the open segment
        fsimage_<txid>             an image of the namespace after <txid>
        fsimage_<txid>.md5         "<32 hex>  fsimage_<txid>\\n" (the md5sum format HDFS uses)
        fsimage.ckpt_<txid>        an image being written (renamed when complete)

``VERSION`` (written like HDFS's, one ``key=value`` per line, ``#`` comments allowed)::

    namespaceID=<int>   clusterID=<str>   cTime=<creation, ms>   storageType=NAME_NODE
    layoutVersion=<ops.LAYOUT_VERSION>

``seen_txid`` is rewritten atomically (temp file, fsync, rename, fsync dir) when a segment
starts (start - 1), when one is finalized (its end) and when an image is saved (its txid),
always to the max of old and new. Startup refuses to run when the edits found end before it:
edits that were once durable have been lost.

Every write that must survive a crash goes through :func:`atomic_write` or fsyncs the file
and then its directory. Failures are :class:`~xdfs.errors.StorageError` naming the file.

Fault hooks: :func:`fault_point` is called at each persist point with a dotted name listed in
:data:`FAULT_POINTS`. It costs one truthiness test in production. Tests arm a point with
:meth:`FaultRegistry.arm` (raise an exception, call a function, ``exit`` or ``kill`` the
process); real processes can be armed through ``XDFS_FAULTS="name=kill,name2=exit"`` read
by :func:`arm_faults_from_env`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import shutil
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from xdfs.errors import StorageError
from xdfs.namenode.ops import LAYOUT_VERSION

log = logging.getLogger("xdfs.namenode.storage")

CURRENT_DIR = "current"
LOCK_FILE = "in_use.lock"
VERSION_FILE = "VERSION"
SEEN_TXID_FILE = "seen_txid"
STORAGE_TYPE = "NAME_NODE"
TXID_DIGITS = 19

# --- fault hooks -----------------------------------------------------------------------

#: Every named persist point, with what has (and has not) happened when it fires.
FAULT_POINTS: dict[str, str] = {
    "editlog.before_write": "a flush batch is about to be written to a segment",
    "editlog.before_fsync": "a batch is written (page cache) but not yet fsynced",
    "editlog.after_fsync": "a batch is durable but no waiter has been told",
    "editlog.segment_created": "a new in-progress segment exists with its header",
    "editlog.before_finalize": "a segment is complete and about to be renamed",
    "editlog.after_finalize": "a segment was renamed to edits_<start>-<end>",
    "storage.before_rename": "a temp file (VERSION, seen_txid, md5) is fsynced, not renamed",
    "image.before_rename": "fsimage.ckpt_<txid> and its md5 are durable, not yet renamed",
    "image.after_rename": "fsimage_<txid> is in place",
    "recovery.before_truncate": "recovery found a torn tail and is about to truncate it",
    "purge.before_delete": "purge decided what to delete and is about to delete it",
}

FAULTS_ENV = "XDFS_FAULTS"
FaultAction = BaseException | Callable[[str], None] | Literal["exit", "kill"]


class FaultRegistry:
    """Armed fault points. Thread-safe: points fire in I/O worker threads."""

    def __init__(self) -> None:
        self._armed: dict[str, tuple[FaultAction, int, int | None]] = {}
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self._armed)

    def register(self, name: str, doc: str) -> None:
        """Declare a fault point defined elsewhere (server, journal) so it can be armed."""
        FAULT_POINTS.setdefault(name, doc)

    def arm(
        self, name: str, action: FaultAction, *, skip: int = 0, times: int | None = None
    ) -> None:
        """Fire ``action`` at ``name`` after ``skip`` passes, ``times`` times (None: always).

        ``action``: an exception instance (raised), a callable (called with the name; it may
        raise), ``"exit"`` (``os._exit(86)``) or ``"kill"`` (SIGKILL ourselves).
        """
        if name not in FAULT_POINTS:
            raise KeyError(f"unknown fault point {name!r}; known: {sorted(FAULT_POINTS)}")
        with self._lock:
            self._armed[name] = (action, skip, times)

    def disarm(self, name: str | None = None) -> None:
        with self._lock:
            if name is None:
                self._armed.clear()
            else:
                self._armed.pop(name, None)

    @contextlib.contextmanager
    def armed(
        self, name: str, action: FaultAction, *, skip: int = 0, times: int | None = None
    ) -> Iterator[None]:
        self.arm(name, action, skip=skip, times=times)
        try:
            yield
        finally:
            self.disarm(name)

    def hit(self, name: str) -> None:
        with self._lock:
            entry = self._armed.get(name)
            if entry is None:
                return
            action, skip, times = entry
            if skip > 0:
                self._armed[name] = (action, skip - 1, times)
                return
            if times is not None:
                if times <= 1:
                    del self._armed[name]
                else:
                    self._armed[name] = (action, 0, times - 1)
        if action == "exit":
            log.critical("fault point %s: exiting", name)
            os._exit(86)
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if isinstance(action, BaseException):
            raise action
        if callable(action):
            action(name)


FAULTS = FaultRegistry()


def fault_point(name: str) -> None:
    """A named persist point; a no-op unless a test armed it."""
    if FAULTS:
        FAULTS.hit(name)


def arm_faults_from_env(env: Mapping[str, str] | None = None) -> list[str]:
    """Arm ``XDFS_FAULTS="point=exit,point2=kill[@skip]"``; returns the armed names."""
    spec = (os.environ if env is None else env).get(FAULTS_ENV, "").strip()
    armed: list[str] = []
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, rest = item.partition("=")
        action, _, skip = rest.partition("@")
        if action not in ("exit", "kill"):
            raise ValueError(f"{FAULTS_ENV}: action of {name!r} must be exit or kill")
        FAULTS.arm(name, "exit" if action == "exit" else "kill", skip=int(skip or 0))
        armed.append(name)
    return armed


# --- durable file helpers ----------------------------------------------------------------

#: fdatasync where the platform has it: enough for appends (the size is flushed too).
datasync: Callable[[int], None] = getattr(os, "fdatasync", os.fsync)


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


def write_all(fd: int, data: bytes | bytearray | memoryview, path: Path) -> None:
    view = memoryview(data)
    offset = 0
    try:
        while offset < len(view):
            offset += os.write(fd, view[offset:])
    except OSError as exc:
        raise StorageError(f"write to {path} failed at byte {offset}: {exc}") from exc
    finally:
        view.release()


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so a crash leaves the old or the new file, never a mix."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
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


# --- VERSION (pure) ----------------------------------------------------------------------


@dataclass(frozen=True)
class VersionInfo:
    namespace_id: int
    cluster_id: str
    ctime_ms: int
    layout_version: int = LAYOUT_VERSION
    storage_type: str = STORAGE_TYPE


_VERSION_KEYS = {
    "namespaceID": "namespace_id",
    "clusterID": "cluster_id",
    "cTime": "ctime_ms",
    "layoutVersion": "layout_version",
    "storageType": "storage_type",
}


def format_version(info: VersionInfo) -> str:
    return (
        "#xdfs NameNode storage\n"
        f"namespaceID={info.namespace_id}\n"
        f"clusterID={info.cluster_id}\n"
        f"cTime={info.ctime_ms}\n"
        f"storageType={info.storage_type}\n"
        f"layoutVersion={info.layout_version}\n"
    )


def parse_version(text: str, source: str = "VERSION") -> VersionInfo:
    """Parse VERSION text; unknown keys are ignored, missing or malformed ones are errors."""
    values: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise StorageError(f"{source} line {lineno}: expected key=value, got {raw!r}")
        values[key.strip()] = value.strip()
    missing = [key for key in _VERSION_KEYS if key not in values]
    if missing:
        raise StorageError(f"{source}: missing {', '.join(missing)}")
    try:
        info = VersionInfo(
            namespace_id=int(values["namespaceID"]),
            cluster_id=values["clusterID"],
            ctime_ms=int(values["cTime"]),
            layout_version=int(values["layoutVersion"]),
            storage_type=values["storageType"],
        )
    except ValueError as exc:
        raise StorageError(f"{source}: bad number: {exc}") from None
    if info.storage_type != STORAGE_TYPE:
        raise StorageError(f"{source}: storageType is {info.storage_type}, not {STORAGE_TYPE}")
    return info


# --- image file names (pure) -------------------------------------------------------------

_IMAGE_RE = re.compile(r"^fsimage_(\d{19})$")
_CKPT_RE = re.compile(r"^fsimage\.ckpt_(\d{19})$")
_MD5_RE = re.compile(r"^fsimage_(\d{19})\.md5$")


def image_name(txid: int) -> str:
    return f"fsimage_{txid:0{TXID_DIGITS}d}"


def ckpt_name(txid: int) -> str:
    return f"fsimage.ckpt_{txid:0{TXID_DIGITS}d}"


def md5_name(txid: int) -> str:
    return image_name(txid) + ".md5"


def parse_image_name(name: str) -> tuple[Literal["image", "ckpt", "md5"], int] | None:
    for kind, pattern in (("image", _IMAGE_RE), ("ckpt", _CKPT_RE), ("md5", _MD5_RE)):
        match = pattern.match(name)
        if match:
            return kind, int(match.group(1))  # type: ignore[return-value]
    return None


def format_md5_file(hexdigest: str, image_file: str) -> str:
    return f"{hexdigest}  {image_file}\n"


_MD5_LINE = re.compile(r"^([0-9a-fA-F]{32}) [ *](\S.*)$")


def parse_md5_file(text: str, source: str) -> tuple[str, str]:
    """-> (hexdigest lowercased, file name)."""
    match = _MD5_LINE.match(text.strip("\n"))
    if not match:
        raise StorageError(f"{source}: not an md5 file: {text[:80]!r}")
    return match.group(1).lower(), match.group(2)


# --- the storage directory ---------------------------------------------------------------


class StorageDirectory:
    """One name dir. Lock it (``with sd:`` or :meth:`lock`) before reading or writing it."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.current = self.root / CURRENT_DIR
        self.lock_path = self.root / LOCK_FILE
        self._lock_fd: int | None = None

    def __repr__(self) -> str:
        return f"StorageDirectory({str(self.root)!r})"

    # -- lock --

    @property
    def locked(self) -> bool:
        return self._lock_fd is not None

    def lock(self) -> None:
        """Take ``in_use.lock``; StorageError("... is locked by pid N") when someone has it."""
        if self._lock_fd is not None:
            return
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot open {self.lock_path}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_pid(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise StorageError(
                    f"storage directory {self.root} is locked by pid {holder or '?'}"
                ) from None
            raise StorageError(f"cannot lock {self.lock_path}: {exc}") from exc
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            os.fsync(fd)
        except OSError as exc:
            os.close(fd)
            raise StorageError(f"cannot write {self.lock_path}: {exc}") from exc
        self._lock_fd = fd

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    def __enter__(self) -> StorageDirectory:
        self.lock()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.unlock()

    # -- format / VERSION --

    def is_formatted(self) -> bool:
        return (self.current / VERSION_FILE).is_file()

    def format(
        self, cluster_id: str, namespace_id: int, ctime_ms: int, *, force: bool = False
    ) -> VersionInfo:
        """Create ``current/`` with VERSION and seen_txid=0. Refuses a non-empty directory
        (anything but our lock file) unless ``force``, which deletes ``current/``."""
        self.lock()
        others = sorted(p.name for p in self.root.iterdir() if p.name != LOCK_FILE)
        if others and not force:
            raise StorageError(
                f"storage directory {self.root} is not empty ({', '.join(others[:5])}); "
                "refusing to format without force"
            )
        if force and self.current.exists():
            log.warning("formatting %s: deleting %s", self.root, self.current)
            shutil.rmtree(self.current)
        info = VersionInfo(namespace_id=namespace_id, cluster_id=cluster_id, ctime_ms=ctime_ms)
        try:
            self.current.mkdir()
        except OSError as exc:
            raise StorageError(f"cannot create {self.current}: {exc}") from exc
        fsync_dir(self.root)
        atomic_write(self.current / SEEN_TXID_FILE, b"0\n")
        atomic_write(self.current / VERSION_FILE, format_version(info).encode())
        log.info("formatted %s (cluster %s, namespace %d)", self.root, cluster_id, namespace_id)
        return info

    def read_version(self) -> VersionInfo:
        path = self.current / VERSION_FILE
        try:
            text = path.read_text("utf-8")
        except FileNotFoundError:
            raise StorageError(f"{self.root} is not formatted: {path} does not exist") from None
        except OSError as exc:
            raise StorageError(f"cannot read {path}: {exc}") from exc
        return parse_version(text, str(path))

    def write_version(self, info: VersionInfo) -> None:
        atomic_write(self.current / VERSION_FILE, format_version(info).encode())

    # -- seen_txid --

    def read_seen_txid(self) -> int:
        return read_seen_txid(self.current)

    def write_seen_txid(self, txid: int) -> None:
        write_seen_txid(self.current, txid)

    # -- images --

    def image_path(self, txid: int) -> Path:
        return self.current / image_name(txid)

    def images(self) -> list[int]:
        """Txids of complete images (``fsimage_<txid>`` with its ``.md5``), newest first."""
        names = set(os.listdir(self.current))
        txids = []
        for name in names:
            parsed = parse_image_name(name)
            if parsed and parsed[0] == "image":
                if md5_name(parsed[1]) in names:
                    txids.append(parsed[1])
                else:
                    log.warning("%s has no md5 file; ignoring it", self.current / name)
        return sorted(txids, reverse=True)


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        return int(text) if text.isdigit() else None
    except OSError:
        return None


def read_seen_txid(current: Path) -> int:
    path = current / SEEN_TXID_FILE
    try:
        text = path.read_text("ascii").strip()
    except FileNotFoundError:
        return 0
    except (OSError, UnicodeDecodeError) as exc:
        raise StorageError(f"cannot read {path}: {exc}") from exc
    if not text.isdigit():
        raise StorageError(f"{path}: expected a txid, found {text[:40]!r}")
    return int(text)


def write_seen_txid(current: Path, txid: int) -> None:
    """Raise ``seen_txid`` to ``txid`` (never lowers it)."""
    if txid <= read_seen_txid(current):
        return
    atomic_write(current / SEEN_TXID_FILE, f"{txid}\n".encode())
