"""A DataNode's data directory: lock, ``VERSION``, startup scan, the replica map, capacity.

Synchronous. The replica map and the set of busy block ids are changed only on the event
loop; file work (open, scan, finalize, delete) runs in worker threads. A block id is
*busy* while a write, a delete or a recovery of it is in progress, so they never race on
its files. The map holds finalized replicas and replicas in state rbw (kept after a broken
write, and loaded again at startup for block recovery). See ``layout.py`` for the directory
tree, ``replica.py`` for the files of one replica, ``rbw.py`` for rbw replicas and
``spares.py`` for the empty files new replicas' files are made of.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path

from xdfs.common.files import (
    DSYNC_FILE_SYSTEMS,
    DirLock,
    atomic_write,
    file_system_type,
    fsync_dir,
    make_dirs,
)
from xdfs.datanode import layout
from xdfs.datanode.layout import DataNodeVersion
from xdfs.datanode.rbw import load_rbw, rewrite_for_recovery
from xdfs.datanode.replica import Replica, ReplicaWriter, move_files, unlink_quietly
from xdfs.datanode.spares import Spares
from xdfs.errors import AlreadyExists, StorageError
from xdfs.protocol.blocks import BlockRecord
from xdfs.protocol.datanode import StorageReport
from xdfs.sharding.ids import shard_of_id

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StartupSummary:
    replicas: int  # finalized and rbw
    rbw_kept: int
    rbw_removed: list[str]
    leftovers_removed: list[str]


class CommitStep(Enum):
    """A step of :meth:`DataStorage.commit_steps` besides a directory's fsync (a Path)."""

    #: Make the writer's data and checksum files durable and close them.
    DURABLE = 1
    #: Make the replica's leaf directory in finalized/ (durably); its Path is sent back.
    MAKE_DIR = 2


class DataStorage:
    def __init__(
        self, root: Path, checksum_chunk_bytes: int, reserved_bytes: int = 0,
        capacity_bytes: int = 0, direct_io: bool = False, loop_write_max_bytes: int = 0,
        small_direct_io: bool = True, spare_files_max: int = 0,
        shards: Iterable[int] = (0,),
    ) -> None:
        self.root = root
        self.current = root / layout.CURRENT
        #: The shards whose block pools this node serves (``layout.py``), ascending.
        self.shards = tuple(sorted(set(shards)))
        assert self.shards, "a DataNode serves at least one block pool"
        #: Each pool's finalized/ and rbw/ (shard 0's are current/finalized, current/rbw).
        self.pool_finalized = {k: self.pool_current(k) / layout.FINALIZED for k in self.shards}
        self.pool_rbw = {k: self.pool_current(k) / layout.RBW for k in self.shards}
        first = self.shards[0]
        self.finalized = self.pool_finalized[first]
        self.rbw = self.pool_rbw[first]
        self.checksum_chunk_bytes = checksum_chunk_bytes
        self.reserved_bytes = reserved_bytes
        self.capacity_bytes = capacity_bytes  # 0: the file system's size
        self.direct_io = direct_io  # replica data files written with O_DIRECT (direct.py)
        #: Replicas up to this long are written on the event loop (``transfer.py``).
        self.loop_write_max_bytes = loop_write_max_bytes
        #: Small replicas written (and read) direct by the kernel's AIO (``transfer.py``).
        self.small_direct_io = small_direct_io
        #: Whether the data dir's file system makes a direct write with ``RWF_DSYNC``
        #: durable (``common.files.DSYNC_FILE_SYSTEMS``; known once :meth:`open` ran).
        self.dsync_direct_writes = False
        self.version: DataNodeVersion | None = None
        self.replicas: dict[int, Replica] = {}
        #: Bytes on disk of each pool's replicas (what each shard is told is used).
        self.pool_used = dict.fromkeys(self.shards, 0)
        self._busy: set[int] = set()
        #: When a block was last claimed or released (monotonic s): see :meth:`idle`.
        self._last_activity_s = time.monotonic()
        self._lock = DirLock(root)
        # Directory creation in finalized/ happens in worker threads: one at a time, so a
        # writer never finds a directory that exists but whose entry is not yet durable.
        self._mkdir_lock = threading.Lock()
        #: Leaves of finalized/ known to exist durably, by ``layout.leaf_key``: no stat of
        #: its directory per replica written.
        self._leaves: dict[int, Path] = {}
        #: Leaves being made ahead of the writes (``leaf_ahead``), by ``layout.leaf_key``.
        self._leaves_ahead: set[int] = set()
        #: Empty files for new replicas' files, deleted ones' files recycled (``spares.py``).
        self.spares = Spares(self.current / layout.SPARES, spare_files_max)
        #: At startup: inode numbers of the spares (:meth:`Spares.scan`) and those of them
        #: a replica file found has too.
        self._spare_inodes: dict[int, str] = {}
        self._shared_inodes: list[int] = []

    # -- block pools --------------------------------------------------------------------

    def pool_current(self, shard: int) -> Path:
        """The ``current/`` of shard ``shard``'s pool (its ``active_epoch`` lives there)."""
        return Path(layout.pool_dir(self.current, shard))

    def serves(self, block_id: int) -> bool:
        """Whether the block's shard is one whose pool this node serves."""
        return shard_of_id(block_id) in self.pool_used

    def finalized_of(self, block_id: int) -> Path:
        return self.pool_finalized[shard_of_id(block_id)]

    def rbw_of(self, block_id: int) -> Path:
        return self.pool_rbw[shard_of_id(block_id)]

    @property
    def used_bytes(self) -> int:
        """Bytes on disk of every pool's replicas."""
        return sum(self.pool_used.values())

    def _count(self, replica: Replica, sign: int) -> None:
        self.pool_used[shard_of_id(replica.block_id)] += sign * replica.disk_bytes

    # -- lifecycle ----------------------------------------------------------------------

    def open(self, now_ms: int) -> StartupSummary:
        """Lock the dir, read (or create) VERSION, load rbw/ and finalized/."""
        self._lock.lock()
        try:
            self.version = self._load_or_create_version(now_ms)
            for shard in self.shards:
                make_dirs(self.pool_finalized[shard])
                make_dirs(self.pool_rbw[shard])
            self._note_unserved_pools()
            kind = file_system_type(self.current)
            self.dsync_direct_writes = kind in DSYNC_FILE_SYSTEMS
            log.info("data dir %s is on %s: a small replica's direct write is made durable "
                     "%s", self.root, kind or "an unknown file system",
                     "by the write itself (RWF_DSYNC)" if self.dsync_direct_writes
                     else "by an fdatasync after it")
            self._spare_inodes = self.spares.scan()
            rbw_removed = [name for k in self.shards for name in self._load_rbw(k)]
            rbw_kept = len(self.replicas)
            leftovers = [name for k in self.shards for name in self._load_finalized(k)]
            self.spares.load(self._spare_inodes, self._shared_inodes)
            self._spare_inodes, self._shared_inodes = {}, []
        except OSError as exc:  # mkdir, listdir or unlink on a broken disk
            self._lock.unlock()
            raise StorageError(f"cannot open data dir {self.root}: {exc}") from exc
        except BaseException:
            self._lock.unlock()
            raise
        return StartupSummary(len(self.replicas), rbw_kept, rbw_removed, leftovers)

    def close(self) -> None:
        self._lock.unlock()

    def _load_or_create_version(self, now_ms: int) -> DataNodeVersion:
        path = self.current / layout.VERSION_FILE
        if path.exists():
            try:
                text = path.read_text()
            except OSError as exc:
                raise StorageError(f"cannot read {path}: {exc}") from exc
            version = layout.parse_version(text, str(path))
            if version.layout_version != layout.LAYOUT_VERSION:
                version = self._upgrade(version)
            return version
        self.current.mkdir(parents=True, exist_ok=True)
        version = DataNodeVersion(node_id=uuid.uuid4().hex, cluster_id="", ctime_ms=now_ms)
        atomic_write(path, layout.format_version(version).encode())
        fsync_dir(self.root)
        log.info("new data dir %s: node id %s", self.root, version.node_id)
        return version

    def _upgrade(self, old: DataNodeVersion) -> DataNodeVersion:
        """A data dir of an older layout version taken as it is: its replicas stay where
        they are (``layout.homes``); the new version is recorded so that a DataNode of
        the older layout, which would not find the replicas written from now on, refuses
        the dir instead of reporting it nearly empty."""
        version = replace(old, layout_version=layout.LAYOUT_VERSION)
        atomic_write(self.current / layout.VERSION_FILE, layout.format_version(version).encode())
        log.info("data dir %s: layout version %d upgraded to %d (replicas left in place)",
                 self.root, old.layout_version, version.layout_version)
        return version

    @property
    def node_id(self) -> str:
        assert self.version is not None, "storage is not open"
        return self.version.node_id

    @property
    def cluster_id(self) -> str:
        assert self.version is not None, "storage is not open"
        return self.version.cluster_id

    def set_cluster_id(self, cluster_id: str) -> None:
        """Record the cluster this dir joined (once, at the first registration)."""
        assert self.version is not None, "storage is not open"
        version = self.version.with_cluster(cluster_id)
        atomic_write(self.current / layout.VERSION_FILE, layout.format_version(version).encode())
        self.version = version

    def _note_unserved_pools(self) -> None:
        """Pools on disk of shards not configured now: left as they are, said once."""
        for entry in os.scandir(self.current):
            shard = layout.parse_pool_name(entry.name)
            if shard is not None and shard not in self.pool_used and entry.is_dir():
                log.warning("block pool %s of shard %d is not loaded: this DataNode does not "
                            "serve shard %d (datanode.shards); its files are left as they are",
                            entry.path, shard, shard)

    def _load_rbw(self, shard: int) -> list[str]:
        """Replicas in state rbw of one pool, each cut to what its checksums cover
        (``rbw.py``), for block recovery; returns the names of the files that held nothing
        worth keeping."""
        data: dict[int, Path] = {}
        metas: dict[int, list[tuple[int, Path]]] = {}
        junk: list[Path] = []
        rbw_dir = self.pool_rbw[shard]
        for entry in os.scandir(rbw_dir):
            self._note_inode(entry)
            path = Path(entry.path)
            block_id = layout.parse_data_name(entry.name)
            parsed = layout.parse_meta_name(entry.name)
            named = block_id if block_id is not None else parsed[0] if parsed else None
            if named is not None and named >= 0 and shard_of_id(named) != shard:
                log.warning("ignoring %s: block %d belongs to the pool of shard %d",
                            path, named, shard_of_id(named))
                continue
            if block_id is not None and entry.is_file():
                data[block_id] = path
            elif parsed is not None and entry.is_file():
                metas.setdefault(parsed[0], []).append((parsed[1], path))
            else:
                junk.append(path)
        for block_id, entries in metas.items():
            entries.sort()
            *stale, (genstamp, meta) = entries  # the newest genstamp goes with the data
            junk.extend(path for _gs, path in stale)
            data_path = data.pop(block_id, None)
            replica = None if data_path is None else load_rbw(block_id, genstamp, data_path, meta)
            if replica is None:
                junk.extend(path for path in (data_path, meta) if path is not None)
                continue
            self.replicas[block_id] = replica
            self._count(replica, 1)
        junk.extend(data.values())  # data files without any checksum file
        return self._remove_junk(junk, rbw_dir)

    def _remove_junk(self, paths: list[Path], rbw_dir: Path) -> list[str]:
        existing = [path for path in paths if path.exists()]
        for path in existing:
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
        names = sorted(path.name for path in existing)
        if names:
            fsync_dir(rbw_dir)
            log.warning("removed %d unusable file(s) from %s: %s",
                        len(names), rbw_dir, ", ".join(names))
        return names

    def _load_finalized(self, shard: int) -> list[str]:
        leftovers: list[str] = []
        finalized = self.pool_finalized[shard]
        for first in sorted(os.scandir(finalized), key=lambda e: e.name):
            if not first.is_dir():
                continue
            for second in sorted(os.scandir(first.path), key=lambda e: e.name):
                if second.is_dir():
                    leaf = Path(second.path)
                    leftovers += self._load_dir(leaf, shard)
                    self._note_leaf(shard, first.name, second.name, leaf)
        if leftovers:
            log.warning("removed %d half-written file(s) from %s: %s",
                        len(leftovers), finalized, ", ".join(leftovers))
        return leftovers

    def _note_inode(self, entry: os.DirEntry[str]) -> None:
        """A file of rbw/ or finalized/ whose inode a spare name also has (``spares.py``:
        a crash cut a move short): that spare is dropped, never cut."""
        if self._spare_inodes and entry.inode() in self._spare_inodes:
            self._shared_inodes.append(entry.inode())

    def _note_leaf(self, shard: int, first: str, second: str, path: Path) -> None:
        """A leaf found at startup is taken as made, as ``_ensure_dir`` takes a directory
        it finds: no check before its next replica."""
        a, b = first.removeprefix("subdir"), second.removeprefix("subdir")
        if a.isdigit() and b.isdigit() and int(a) < 256 and int(b) < 256:
            self._leaves[shard << 16 | int(a) << 8 | int(b)] = path

    def _load_dir(self, directory: Path, shard: int) -> list[str]:
        """Load the replicas of one leaf directory of shard ``shard``'s pool; returns the
        leftovers it removed."""
        finalized = self.pool_finalized[shard]
        data: dict[int, os.DirEntry[str]] = {}
        metas: dict[int, list[tuple[int, os.DirEntry[str]]]] = {}
        for entry in os.scandir(directory):
            self._note_inode(entry)
            block_id = layout.parse_data_name(entry.name)
            if block_id is not None:
                data[block_id] = entry
                continue
            parsed = layout.parse_meta_name(entry.name)
            if parsed is not None:
                metas.setdefault(parsed[0], []).append((parsed[1], entry))
        removed: list[str] = []
        for block_id, entries in metas.items():
            # Only the newest genstamp can belong to the data file; older ones are stale.
            entries.sort(key=lambda item: item[0])
            keep = entries.pop() if block_id in data else None
            for _genstamp, stale in entries:
                removed.append(stale.name)
                unlink_quietly(Path(stale.path))
            if keep is None:
                continue
            genstamp, meta = keep
            entry = data.pop(block_id)
            if shard_of_id(block_id) != shard or directory not in layout.homes(finalized,
                                                                                block_id):
                log.warning("ignoring %s: block %d belongs in another directory",
                            entry.path, block_id)
                continue
            if self._found_twice(block_id, genstamp, entry.path):
                continue
            size = entry.stat().st_size
            replica = Replica(block_id, genstamp, size, Path(entry.path), Path(meta.path),
                              meta.stat().st_size)
            self._drop_finalized_rbw(replica)
            self.add(replica)
        for entry in data.values():  # data files without any checksum file
            removed.append(entry.name)
            unlink_quietly(Path(entry.path))
        if removed:
            fsync_dir(directory)
        return [str(directory.relative_to(finalized) / name) for name in removed]

    def _found_twice(self, block_id: int, genstamp: int, path: str) -> bool:
        """A finalized replica of ``block_id`` loaded already, from its other home (one of
        layout version 1 never deleted): the one of the newer genstamp is kept, the other
        ignored (left on disk, as any replica found out of place). True: ignore this one."""
        loaded = self.replicas.get(block_id)
        if loaded is None or not loaded.finalized:
            return False
        older = genstamp <= loaded.genstamp
        log.warning("block %d found twice, in %s and %s: ignoring the older (genstamp %d)",
                    block_id, loaded.data_path, path, min(genstamp, loaded.genstamp))
        return older

    def _drop_finalized_rbw(self, finalized: Replica) -> None:
        """Names in rbw/ of a replica finalized since: a finalize syncs the directory the
        files move to, not rbw/ (``ReplicaWriter.finalize``), so after a crash a file
        system could show them in both places; the finalized replica is the one kept."""
        rbw = self.replicas.get(finalized.block_id)
        if rbw is None or rbw.finalized or rbw.genstamp > finalized.genstamp:
            return
        del self.replicas[finalized.block_id]
        self._count(rbw, -1)
        unlink_quietly(rbw.data_path, rbw.meta_path)
        fsync_dir(self.rbw_of(finalized.block_id))
        log.warning("removed rbw/ names of block %d, finalized before the restart",
                    finalized.block_id)

    # -- the replica map ----------------------------------------------------------------

    def get(self, block_id: int) -> Replica | None:
        return self.replicas.get(block_id)

    def report_records(self, shard: int | None = None) -> list[BlockRecord]:
        """Finalized, healthy replicas in block-id order (for full block reports), of one
        pool (``shard``) or all. A replica being appended to counts with the part readers
        see: it is still where readers find that part (were it reported rbw, the NameNode
        would stop naming it)."""
        return [
            r.record for _, r in self._sorted(shard)
            if (r.finalized or r.appending) and not r.corrupt
        ]

    def rbw_records(self, shard: int | None = None) -> list[BlockRecord]:
        """Replicas in state rbw, in block-id order (for full block reports)."""
        return [r.record for _, r in self._sorted(shard) if not r.finalized and not r.appending]

    def _sorted(self, shard: int | None) -> list[tuple[int, Replica]]:
        """The map in block-id order, of one pool or all (a pool's ids are one range)."""
        items = sorted(self.replicas.items())
        if shard is None:
            return items
        return [item for item in items if shard_of_id(item[0]) == shard]

    def claim(self, block_id: int) -> None:
        """Mark ``block_id`` busy (a write or delete is starting); AlreadyExists if it is."""
        if block_id in self._busy:
            raise AlreadyExists(f"block {block_id} is being written or deleted right now")
        self._busy.add(block_id)
        self._last_activity_s = time.monotonic()

    def release(self, block_id: int) -> None:
        self._busy.discard(block_id)
        self._last_activity_s = time.monotonic()

    def is_busy(self, block_id: int) -> bool:
        return block_id in self._busy

    def idle(self, quiet_s: float = 0.0) -> bool:
        """No block is being written, deleted or recovered, nor was for ``quiet_s``
        (spares are made then: a node between two of a client's writes is not idle)."""
        return not self._busy and time.monotonic() - self._last_activity_s >= quiet_s

    def new_writer(self, block_id: int, genstamp: int) -> ReplicaWriter:
        """A writer in rbw/ (files opened by ``writer.open()``, in a worker thread)."""
        assert block_id in self._busy, "claim the block before writing it"
        return ReplicaWriter(block_id, genstamp, self.rbw_of(block_id), self.checksum_chunk_bytes,
                             self.direct_io, self.spares)

    def commit(self, writer: ReplicaWriter, replaced: Replica | None) -> Replica:
        """Finalize ``writer`` (worker thread): :meth:`commit_steps` with every step done
        here, blocking."""
        steps = self.commit_steps(writer, replaced)
        answer: Path | None = None
        while True:
            try:
                step = steps.send(answer)
            except StopIteration as stop:
                replica: Replica = stop.value
                return replica
            answer = None
            if step is CommitStep.DURABLE:
                writer.sync_and_close()
            elif step is CommitStep.MAKE_DIR:
                answer = self.finalized_dir(writer.block_id)
            else:
                fsync_dir(step)

    def commit_steps(self, writer: ReplicaWriter, replaced: Replica | None
                     ) -> Generator[CommitStep | Path, Path | None, Replica]:
        """The commit of a new replica whose writes are done, the one sequence of the
        crash-tested order; its driver does the steps it yields (a worker thread's
        :meth:`commit`, or the event loop's AIO: ``transfer.KernelCommit``) and sends
        back MAKE_DIR's directory. Both files durable first; then a replica of an older
        genstamp it replaces removed, so a crash never pairs one replica's data with
        another's checksums (the crash window in between loses only the stale replica);
        then the move into finalized/ (the data file there is the commit point) and the
        fsync of that directory. Returns the finalized replica (``writer.finalized``)."""
        yield CommitStep.DURABLE
        self.unlink_replaced(replaced)
        dest = self.made_finalized_dir(writer.block_id)
        if dest is None:  # a leaf not made yet (once per 256 blocks): mkdir and its fsyncs
            dest = yield CommitStep.MAKE_DIR
            assert dest is not None
        moved = writer.move_synced(dest)
        yield dest  # fsync it
        return writer.finalize_moved(*moved)

    def finish_append(self, writer: ReplicaWriter) -> Path:
        """An append's files made durable (worker thread); returns the directory its
        replica moves to (made, durably) by ``writer.move_appended`` on the event loop."""
        writer.finish_append()
        return self.finalized_dir(writer.block_id)

    def finalized_dir(self, block_id: int) -> Path:
        """The directory of ``block_id`` in finalized/, made (durably) if missing (worker
        thread)."""
        dest = self.made_finalized_dir(block_id)
        if dest is None:
            dest = Path(layout.finalized_dir(self.finalized_of(block_id), block_id))
            self._ensure_dir(dest, block_id)
        return dest

    def made_finalized_dir(self, block_id: int) -> Path | None:
        """The directory of ``block_id`` in finalized/ if it is known to exist durably
        (no I/O); None: :meth:`finalized_dir` makes it."""
        return self._leaves.get(layout.leaf_key(block_id))

    def leaf_ahead(self, block_id: int) -> int | None:
        """A block id of the leaf of finalized/ after ``block_id``'s when that leaf is
        neither made nor being made: the caller makes it now (:meth:`finalized_dir` in a
        worker thread, then :meth:`leaf_ahead_done`), while block ids (allocated in
        sequence) still fill the current one, so no write waits for a mkdir."""
        ahead = block_id + 256
        key = layout.leaf_key(ahead)
        if key in self._leaves or key in self._leaves_ahead:
            return None
        self._leaves_ahead.add(key)
        return ahead

    def leaf_ahead_done(self, block_id: int) -> None:
        """The making started by :meth:`leaf_ahead` ended (made, or failed: a write that
        needs it makes it then)."""
        self._leaves_ahead.discard(layout.leaf_key(block_id))

    def idle_job(self, spares_batch: int) -> Callable[[], object] | None:
        """Work for a worker thread while the node is idle (``idle_work.py``), or None:
        up to ``spares_batch`` spare files while the stock is short (``spares.py``)."""
        if self.spares.wanted:
            return functools.partial(self.spares.make, min(spares_batch, self.spares.wanted))
        return None

    def unlink_replaced(self, replaced: Replica | None) -> None:
        """Before a new replica of the same block is finalized (``commit``)."""
        if replaced is not None:
            self._unlink(replaced)

    def recover(self, replica: Replica, genstamp: int, length: int) -> Replica:
        """Block recovery (worker thread; the block is claimed): cut the replica to
        ``length``, give it ``genstamp`` and finalize it (an rbw replica moves to
        ``finalized/`` as a finished write does)."""
        meta_path, meta_bytes = rewrite_for_recovery(replica, genstamp, length)
        data_path = replica.data_path
        if not replica.finalized:
            dest = self.finalized_dir(replica.block_id)
            data_path, meta_path = move_files(data_path, meta_path, dest)
        return Replica(replica.block_id, genstamp, length, data_path, meta_path, meta_bytes)

    def _ensure_dir(self, dest: Path, block_id: int) -> None:
        # Checked under the lock too: a directory another writer just made is durable
        # only once that writer's fsync of its parent is done, which the lock waits for.
        with self._mkdir_lock:
            if not dest.is_dir():
                # Each new directory durable in its parent before anything goes into it.
                for directory in (dest.parent, dest):
                    if directory.is_dir():
                        continue
                    try:
                        directory.mkdir()
                    except OSError as exc:
                        raise StorageError(f"cannot create {directory}: {exc}") from exc
                    fsync_dir(directory.parent)
            self._leaves[layout.leaf_key(block_id)] = dest

    def add(self, replica: Replica) -> None:
        """Put a just-finalized replica in the map (replacing an older one of its id)."""
        old = self.replicas.get(replica.block_id)
        if old is not None:
            self._count(old, -1)
        self.replicas[replica.block_id] = replica
        self._count(replica, 1)

    def take(self, block_id: int) -> Replica | None:
        """Remove a replica from the map before its files are deleted (``delete_files``)."""
        replica = self.replicas.pop(block_id, None)
        if replica is not None:
            self._count(replica, -1)
        return replica

    def delete_files(self, replicas: list[Replica]) -> None:
        """Delete the files of replicas taken from the map (worker thread): recycled as
        spares while the stock has room (``spares.py``), else unlinked."""
        directories = set()
        for replica in replicas:
            # Data first: without its data file a checksum file is a leftover startup removes.
            try:
                if self.spares.discard(replica.data_path, replica.meta_path):
                    directories.add(self.spares.directory)
            except OSError as exc:
                raise StorageError(f"cannot delete block {replica.block_id}: {exc}") from exc
            directories.add(replica.data_path.parent)
        for directory in directories:
            fsync_dir(directory)

    @staticmethod
    def _unlink(replica: Replica) -> None:
        # Data first: without its data file a checksum file is a leftover startup removes.
        try:
            unlink_quietly(replica.data_path, replica.meta_path)
        except OSError as exc:
            raise StorageError(f"cannot delete block {replica.block_id}: {exc}") from exc

    def mark_corrupt(self, replica: Replica) -> bool:
        """Exclude ``replica`` from reads and reports; True when it was healthy until now
        (and is still the replica the map holds: a replaced one is not reported)."""
        if self.replicas.get(replica.block_id) is not replica or replica.corrupt:
            return False
        replica.corrupt = True
        return True

    # -- space --------------------------------------------------------------------------

    def storage_report(self, shard: int | None = None) -> StorageReport:
        """Capacity and free space of the disk (shared by every pool: each shard is told
        the same), and the bytes used by one pool's replicas (``shard``) or by all."""
        try:
            usage = shutil.disk_usage(self.root)
        except OSError as exc:
            raise StorageError(f"cannot stat the file system of {self.root}: {exc}") from exc
        used = self.used_bytes if shard is None else self.pool_used.get(shard, 0)
        free = max(0, usage.free - self.reserved_bytes)
        if not self.capacity_bytes:
            return StorageReport(usage.total, used, free)
        # a share of a disk (several DataNodes on one machine): usage is against it
        free = min(free, max(0, self.capacity_bytes - self.used_bytes))
        return StorageReport(self.capacity_bytes, used, free)
