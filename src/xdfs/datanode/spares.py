"""Spare files: empty files kept in ``current/spares/`` for the files of new replicas.

Why: a file create costs an inode allocation, and on ext4 without a journal that walks past
every inode of the directory's block group freed in the last minutes (``find_inode_bit``
skips "recently deleted" inodes one buffer lookup at a time): ~1 ms of kernel CPU per create
after deletions, against ~35 us in a quiet group. A replica makes two files (data, checksums).
So a new rbw file is a spare *renamed* into ``rbw/`` (no inode allocated), a deleted
replica's files are renamed here and cut to 0 bytes instead of unlinked (no inode freed, so
nothing poisons the group either), and the stock is topped up ahead, in a worker thread while
the node writes nothing (``idle_work.py``), up to ``datanode.spare_files_max``.

Spares are never replicas: their names (``spare_<n>``) match no replica name, no scanner,
directory scanner, block report or used-bytes count looks in this directory.

Crash safety (nothing here is fsynced on the write path):

* **take** (rename ``spares/spare_<n>`` -> ``rbw/blk_<id>``, then the writer opens it with
  O_TRUNC): a crash leaves an empty data file in ``rbw/`` without a checksum file, which
  startup removes as it removes any (``DataStorage._load_rbw``); the commit order of the
  replica (``DataStorage.commit_steps``) is unchanged.
* **give** (rename a deleted replica's file here, then truncate it): a crash in between leaves
  a spare with old bytes; :meth:`Spares.load` cuts every spare to 0 at startup. The
  directories left are fsynced by the caller (``DataStorage.delete_files``).
* A spare name that a crash left pointing at the same inode as a replica file (a rename
  whose source directory was not yet written back) is never cut or taken: startup compares
  inode numbers (``shared``) and drops such a name.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import threading
from collections.abc import Iterable
from pathlib import Path

from xdfs.common.faults import FAULTS, fault_point

log = logging.getLogger(__name__)

FAULTS.register("datanode.spare_taken",
                "a spare was renamed to a new replica's rbw/ name, not yet opened")
FAULTS.register("datanode.spare_given",
                "a deleted replica's file was renamed into spares/, not yet cut to 0 bytes")

_NAME_RE = re.compile(r"^spare_(\d+)$")


class Spares:
    """The stock of one data dir's ``spares/`` (thread-safe: taken on the event loop or in
    worker threads, given and made in worker threads)."""

    def __init__(self, directory: Path, max_files: int) -> None:
        self.directory = directory
        self._dir = os.fspath(directory)
        self.max_files = max_files
        self._stock: list[str] = []  # names of empty spares, ready to take
        self._pending = 0  # names handed out by _reserve, not in the stock yet
        self._next = 0
        self._lock = threading.Lock()
        #: Spares taken and given since startup (metrics, tests).
        self.taken = 0
        self.given = 0

    def __len__(self) -> int:
        return len(self._stock)

    @property
    def wanted(self) -> int:
        """How many spares :meth:`make` would add to fill the stock."""
        return max(0, self.max_files - len(self._stock) - self._pending)

    # -- startup ------------------------------------------------------------------------

    def scan(self) -> dict[int, str]:
        """Startup, step 1 (before the replicas are loaded): list ``spares/`` (made if
        missing); returns the inode number of each spare (``scandir``'s, no stat) for
        :meth:`load` to tell shared names apart. Other names are removed."""
        self.directory.mkdir(exist_ok=True)
        inodes: dict[int, str] = {}
        for entry in os.scandir(self.directory):
            match = _NAME_RE.match(entry.name)
            if match is None or not entry.is_file(follow_symlinks=False):
                log.warning("removing %s from %s: not a spare", entry.name, self.directory)
                _remove(entry.path)
                continue
            self._next = max(self._next, int(match.group(1)) + 1)
            inodes[entry.inode()] = entry.name
        return inodes

    def load(self, inodes: dict[int, str], shared: Iterable[int]) -> int:
        """Startup, step 2: the spares of :meth:`scan` less those whose inode a replica
        file also has (``shared``: dropped, never cut), each cut to 0 bytes (a give cut
        short by a crash), the stock bounded by ``max_files``; returns the stock's size."""
        for inode in set(shared) & inodes.keys():
            name = inodes.pop(inode)
            log.warning("spare %s is also a replica's file (a crash cut a move short): "
                        "dropping the spare's name", name)
            path = f"{self._dir}/{name}"
            with contextlib.suppress(FileNotFoundError):
                if os.stat(path).st_nlink > 1:  # else the inode's only count: keep it
                    os.unlink(path)
        names = sorted(inodes.values(), key=lambda n: int(n.removeprefix("spare_")))
        for name in names[self.max_files:]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{self._dir}/{name}")
        for name in names[: self.max_files]:
            path = f"{self._dir}/{name}"
            try:
                if os.stat(path).st_size:
                    os.truncate(path, 0)
            except FileNotFoundError:  # removed by hand meanwhile
                continue
            self._stock.append(name)
        return len(self._stock)

    # -- use ----------------------------------------------------------------------------

    def take(self, dest: str) -> bool:
        """Rename a spare to ``dest`` (a new replica's file in ``rbw/``, opened then with
        O_TRUNC); False when there is none (or it vanished): the caller creates the file."""
        with self._lock:
            if not self._stock:
                return False
            name = self._stock.pop()
        try:
            os.replace(f"{self._dir}/{name}", dest)
        except OSError as exc:
            log.warning("cannot take spare %s: %s", name, exc)
            return False
        self.taken += 1
        fault_point("datanode.spare_taken")
        return True

    def give(self, path: Path | str) -> bool:
        """A deleted replica's file (its name already out of the replica map) renamed here
        and cut to 0 bytes; False when the stock is full or the move failed: the caller
        unlinks it."""
        name = self._reserve()
        if name is None:
            return False
        spare = f"{self._dir}/{name}"
        try:
            os.replace(path, spare)
        except OSError:
            self._unreserve(None)
            return False
        fault_point("datanode.spare_given")
        try:
            os.truncate(spare, 0)
        except OSError as exc:
            log.warning("cannot empty spare %s (removed): %s", name, exc)
            _remove(spare)
            self._unreserve(None)
            return True  # the replica's name is gone all the same
        self._unreserve(name)
        self.given += 1
        return True

    def discard(self, *paths: Path | str) -> bool:
        """Files of a replica no longer in the map, data file first: each given (or, the
        stock full, unlinked); True when any was given (the caller fsyncs ``spares/`` with
        the directories they left)."""
        given = False
        for path in paths:
            if self.give(path):
                given = True
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
        return given

    def make(self, count: int) -> int:
        """Make up to ``count`` new spares (worker thread); returns how many were made."""
        made = 0
        for _ in range(count):
            name = self._reserve()
            if name is None:
                break
            try:
                os.close(os.open(f"{self._dir}/{name}",
                                 os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            except OSError:
                self._unreserve(None)
                raise
            self._unreserve(name)
            made += 1
        return made

    def _reserve(self) -> str | None:
        with self._lock:
            if len(self._stock) + self._pending >= self.max_files:
                return None
            self._pending += 1
            self._next += 1
            return f"spare_{self._next - 1}"

    def _unreserve(self, name: str | None) -> None:
        with self._lock:
            self._pending -= 1
            if name is not None:
                self._stock.append(name)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except IsADirectoryError:
        shutil.rmtree(path, ignore_errors=True)
    except FileNotFoundError:
        pass
