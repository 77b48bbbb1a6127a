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

The fault hooks (:mod:`xdfs.common.faults`) and durable-file helpers
(:mod:`xdfs.common.files`) are shared with the other roles.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from xdfs.common.files import (
    DirLock,
    atomic_write,
    fsync_dir,
    parse_key_values,
    read_number_file,
    write_number_file,
)
from xdfs.common.images import image_name, md5_name, parse_image_name
from xdfs.errors import StorageError
from xdfs.namenode.namespace.ops import LAYOUT_VERSION

log = logging.getLogger("xdfs.namenode.image.storage")

CURRENT_DIR = "current"
LOCK_FILE = "in_use.lock"
VERSION_FILE = "VERSION"
SEEN_TXID_FILE = "seen_txid"
STORAGE_TYPE = "NAME_NODE"

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
    values = parse_key_values(text, source)
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


# --- the storage directory ---------------------------------------------------------------


class StorageDirectory:
    """One name dir. Lock it (``with sd:`` or :meth:`lock`) before reading or writing it."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.current = self.root / CURRENT_DIR
        self._lock = DirLock(self.root, LOCK_FILE)

    def __repr__(self) -> str:
        return f"StorageDirectory({str(self.root)!r})"

    # -- lock --

    @property
    def locked(self) -> bool:
        return self._lock.locked

    def lock(self) -> None:
        """Take ``in_use.lock``; StorageError("... is locked by pid N") when someone has it."""
        self._lock.lock()

    def unlock(self) -> None:
        self._lock.unlock()

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



def read_seen_txid(current: Path) -> int:
    return read_number_file(current / SEEN_TXID_FILE, "a txid")


def write_seen_txid(current: Path, txid: int) -> None:
    """Raise ``seen_txid`` to ``txid`` (never lowers it)."""
    if txid <= read_seen_txid(current):
        return
    write_number_file(current / SEEN_TXID_FILE, txid)
