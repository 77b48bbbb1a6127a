"""The directory scanner (HDFS's DirectoryScanner): reconciles the data dir with the replica
map, so a replica whose files vanished (deleted by hand, a disk losing a directory) stops
counting, and one the map does not know starts counting.

Every ``datanode.directory_scan_interval_s`` a pass lists ``rbw/`` and every leaf directory
of ``finalized/`` (and the home directory of every replica in the map, even where that
directory is gone), ``directory_scan_batch_dirs`` directories per worker-thread job, and
after each job compares them with the map on the event loop (:func:`reconcile`, pure):

* a replica whose data file or checksum file is missing goes to ``on_missing``: the
  DataNode drops it, deletes what is left of its files and reports it deleted at once, so
  the NameNode copies the block again (to this node too: nothing of it is left here);
* data and checksum files in their proper ``finalized/`` directory (``layout.homes``) that
  the map does not know go to ``on_found``: the DataNode adds the replica and reports it
  (the NameNode decides whether it belongs to a file).

The map may change while a directory is listed: a replica that is busy (written, deleted,
recovered) or no longer the one the pass started with is left for the next pass.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from xdfs.config import DataNodeConfig
from xdfs.datanode import layout
from xdfs.datanode.replica import Replica
from xdfs.datanode.storage import DataStorage
from xdfs.datanode.transfer import in_thread
from xdfs.errors import StorageError

log = logging.getLogger(__name__)


@dataclass
class Found:
    """The files of one block id in one directory."""

    data_bytes: int = -1  # -1: no data file
    metas: dict[int, int] = field(default_factory=dict)  # genstamp -> checksum file bytes


@dataclass
class ScanResult:
    directories: int = 0
    missing: list[int] = field(default_factory=list)
    added: list[int] = field(default_factory=list)


def reconcile(
    known: Mapping[int, Replica], found: Mapping[int, Found]
) -> tuple[list[Replica], list[tuple[int, int, Found]]]:
    """Compare the replicas the map places in one directory with the files listed there:
    ``(replicas with a file missing, (block id, genstamp, files) of complete replicas the
    map does not know)``."""
    missing = [
        replica
        for block_id, replica in sorted(known.items())
        if (files := found.get(block_id)) is None
        or files.data_bytes < 0
        or replica.genstamp not in files.metas
    ]
    unknown = [
        (block_id, max(files.metas), files)
        for block_id, files in sorted(found.items())
        if block_id not in known and files.data_bytes >= 0 and files.metas
    ]
    return missing, unknown


def list_dir(directory: Path) -> dict[int, Found]:
    """The replica files of one directory (worker thread); a missing directory is empty."""
    found: dict[int, Found] = {}
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return found
    except OSError as exc:
        raise StorageError(f"cannot list {directory}: {exc}") from exc
    for entry in entries:
        block_id = layout.parse_data_name(entry.name)
        parsed = layout.parse_meta_name(entry.name)
        try:
            if block_id is not None:
                found.setdefault(block_id, Found()).data_bytes = entry.stat().st_size
            elif parsed is not None:
                found.setdefault(parsed[0], Found()).metas[parsed[1]] = entry.stat().st_size
        except FileNotFoundError:
            continue  # deleted since the listing: as if never seen
        except OSError as exc:
            raise StorageError(f"cannot stat {entry.path}: {exc}") from exc
    return found


def _list_dirs(directories: list[Path]) -> list[dict[int, Found]]:
    return [list_dir(directory) for directory in directories]


def leaf_dirs(finalized: Path) -> list[Path]:
    """Every ``subdir<a>/subdir<b>`` directory under ``finalized/`` (worker thread)."""
    leaves: list[Path] = []
    for first in _subdirs(finalized):
        leaves.extend(_subdirs(first))
    return leaves


def _subdirs(directory: Path) -> list[Path]:
    try:
        return sorted(Path(e.path) for e in os.scandir(directory) if e.is_dir())
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise StorageError(f"cannot list {directory}: {exc}") from exc


class DirectoryScanner:
    def __init__(
        self,
        storage: DataStorage,
        config: DataNodeConfig,
        on_missing: Callable[[list[Replica]], Awaitable[object]],
        on_found: Callable[[list[Replica]], None],
    ) -> None:
        self.storage = storage
        self.interval_s = config.directory_scan_interval_s
        self.batch_dirs = config.directory_scan_batch_dirs
        self.on_missing = on_missing
        self.on_found = on_found
        self.passes = 0

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                result = await self.scan_once()
            except StorageError as exc:
                log.error("directory scan failed: %s", exc)
                continue
            if result.missing or result.added:
                log.warning("directory scan of %d directories: %d replica(s) missing from "
                            "disk %s, %d found that the map did not know %s",
                            result.directories, len(result.missing), result.missing,
                            len(result.added), result.added)

    async def scan_once(self) -> ScanResult:
        storage = self.storage
        homes: dict[Path, dict[int, Replica]] = {}
        for block_id, replica in storage.replicas.items():
            homes.setdefault(replica.data_path.parent, {})[block_id] = replica
        directories: list[Path] = []
        for shard in storage.shards:  # every pool: its rbw/, then the leaves of finalized/
            directories += [storage.pool_rbw[shard],
                            *await in_thread(leaf_dirs, storage.pool_finalized[shard])]
        directories += sorted(set(homes) - set(directories))
        result = ScanResult(directories=len(directories))
        for start in range(0, len(directories), self.batch_dirs):
            batch = directories[start : start + self.batch_dirs]
            listings = await in_thread(_list_dirs, batch)
            for directory, found in zip(batch, listings, strict=True):
                await self._apply(directory, homes.get(directory, {}), found, result)
        self.passes += 1
        return result

    async def _apply(
        self, directory: Path, known: dict[int, Replica], found: dict[int, Found],
        result: ScanResult,
    ) -> None:
        storage = self.storage
        missing, unknown = reconcile(known, found)
        gone = [r for r in missing if self._unchanged(r.block_id, r)]
        if gone:
            result.missing += [r.block_id for r in gone]
            await self.on_missing(gone)
        if directory in storage.pool_rbw.values():
            return  # files of writes in progress: never adopted here
        added = list(self._adopt(directory, unknown))
        if added:
            result.added += [r.block_id for r in added]
            self.on_found(added)

    def _adopt(self, directory: Path, unknown: list[tuple[int, int, Found]]) -> Iterable[Replica]:
        storage = self.storage
        for block_id, genstamp, files in unknown:
            if not storage.serves(block_id):
                continue  # another pool's block in this pool's tree: never adopted
            homes = layout.homes(storage.finalized_of(block_id), block_id)
            if directory not in homes or not self._unchanged(block_id, None):
                continue
            replica = Replica(
                block_id, genstamp, files.data_bytes, directory / layout.data_name(block_id),
                directory / layout.meta_name(block_id, genstamp), files.metas[genstamp],
            )
            storage.add(replica)
            yield replica

    def _unchanged(self, block_id: int, replica: Replica | None) -> bool:
        """The map still holds ``replica`` (None: nothing) for the block, and no write,
        delete or recovery of it is under way."""
        storage = self.storage
        return storage.get(block_id) is replica and not storage.is_busy(block_id)
