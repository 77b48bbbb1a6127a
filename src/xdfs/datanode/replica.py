"""One replica's files: writing one in ``rbw/`` and reading one with every checksum verified.

Synchronous file I/O, run in worker threads by the async callers (``transfer.py``). A
writer never moves anything into ``finalized/`` before the whole block is on disk and
fsynced, so a crash at any point leaves either no finalized replica or a complete one. A
write whose stream breaks is *kept* in ``rbw/`` (as HDFS keeps its rbw replicas): the
checksum file is completed up to the last byte written and both files are fsynced, so a
block recovery can later finalize what every holder agrees on (``rbw.py``).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import mmap
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from xdfs.common import aio
from xdfs.common.faults import FAULTS, fault_point
from xdfs.common.files import atomic_write, fsync_dir, sync_data, write_all
from xdfs.datanode import checksums, direct
from xdfs.datanode.layout import data_name, meta_name
from xdfs.datanode.spares import Spares
from xdfs.errors import BlockNotFound, CorruptReplica, StorageError
from xdfs.protocol.blocks import BlockRecord

FAULTS.register(
    "datanode.before_finalize",
    "a replica's data and checksums are fsynced in rbw/ but not yet moved to finalized/",
)
FAULTS.register(
    "datanode.after_finalize",
    "a replica is in finalized/ (directories fsynced) but not yet in the map or reported",
)


@dataclass
class Replica:
    """A finalized replica as the DataNode's replica map holds it."""

    block_id: int
    genstamp: int
    num_bytes: int
    data_path: Path
    meta_path: Path
    meta_bytes: int
    #: Failed a checksum: excluded from reads and reports until the NameNode deletes it.
    corrupt: bool = False
    #: False for a replica in state rbw (in ``rbw/``: a write broke, or is being recovered).
    finalized: bool = True
    #: The newest block recovery that claimed this replica (0: none; HDFS's RUR state).
    recovery_genstamp: int = 0
    #: Being appended to: ``num_bytes`` and ``meta_path`` describe the part written before
    #: (finalized, or hflushed), readable while the data file grows in ``rbw/``.
    appending: bool = False

    @property
    def record(self) -> BlockRecord:
        return BlockRecord(self.block_id, self.genstamp, self.num_bytes)

    @property
    def disk_bytes(self) -> int:
        return self.num_bytes + self.meta_bytes


#: Threads for the checksum files' fdatasyncs (:meth:`ReplicaWriter._finish_and_sync`):
#: one per block being finalized at once, never waiting on each other, so a bound only
#: queues a burst; as many as asyncio's default executor (the callers' threads) has.
_SYNCS = ThreadPoolExecutor(min(32, (os.cpu_count() or 1) + 4), "xdfs-meta-sync")


def _open(path: Path | str, flags: int) -> int:
    try:
        return os.open(path, flags, 0o644)
    except OSError as exc:
        raise StorageError(f"cannot open {path}: {exc}") from exc


def unlink_quietly(*paths: Path) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def move_files(data_path: Path, meta_path: Path, dest_dir: Path) -> tuple[Path, Path]:
    """Move a replica's fsynced files into ``dest_dir`` (which exists, durably); returns
    their new paths. The checksum file moves first: a data file in ``finalized/`` is the
    commit point, and a checksum file without one is a leftover that startup removes."""
    moved = rename_files(data_path, meta_path, dest_dir)
    fsync_dir(dest_dir)
    fsync_dir(data_path.parent)
    return moved


def rename_files(data_path: Path | str, meta_path: Path | str, dest_dir: Path,
                 names: tuple[str, str] | None = None) -> tuple[Path, Path]:
    """The renames of :func:`move_files`, not yet durable (``names``: the files' names,
    when the caller has them: string work, no pathlib joins)."""
    data_name, meta_name = names or (Path(data_path).name, Path(meta_path).name)
    dest = os.fspath(dest_dir)
    data_dest, meta_dest = f"{dest}/{data_name}", f"{dest}/{meta_name}"
    try:
        os.replace(meta_path, meta_dest)
        os.replace(data_path, data_dest)
    except OSError as exc:
        raise StorageError(f"cannot move {data_name} to {dest_dir}: {exc}") from exc
    return Path(data_dest), Path(meta_dest)


class ReplicaWriter:
    """A replica being written in ``rbw/``: data file plus checksum file built on the fly."""

    def __init__(
        self, block_id: int, genstamp: int, rbw_dir: Path, bytes_per_checksum: int,
        direct_io: bool = False, spares: Spares | None = None,
    ) -> None:
        self.block_id = block_id
        self.genstamp = genstamp
        self.rbw_dir = rbw_dir
        # The files' paths as strings: pathlib's joins and conversions were a third of the
        # Python calls of a small replica's write (``data_path``/``meta_path`` make Paths).
        self._data_name = data_name(block_id)
        self._meta_name = meta_name(block_id, genstamp)
        rbw = os.fspath(rbw_dir)
        self._data_file = f"{rbw}/{self._data_name}"
        self._meta_file = f"{rbw}/{self._meta_name}"
        self.num_bytes = 0
        self.meta_bytes = 0
        #: Checksum-file bytes not written yet (:meth:`_flush_meta`).
        self._meta_out = bytearray()
        self._builder = checksums.ChecksumBuilder(bytes_per_checksum)
        self._data_fd = -1
        self._meta_fd = -1
        self._direct_io = direct_io
        #: Where the files come from (a spare renamed, no inode allocated) and go back to.
        self._spares = spares
        #: The data file's writer when it is open with O_DIRECT (``direct.py``).
        self._staged: direct.StagedWriter | None = None
        #: Set once the replica is in finalized/ (the writer is then done).
        self.finalized: Replica | None = None
        #: An append's old checksum file, kept for readers of the part written before and
        #: removed once the writer is done (see :meth:`reopen`).
        self.stale_meta: Path | None = None
        #: An append finished and synced, not moved yet (see :meth:`finish_append`).
        self.synced = False
        #: :meth:`finish_writes` ran (the last checksum is written).
        self._writes_finished = False

    def open(self, buffered: bool = False) -> None:
        """Create both files in ``rbw/``; ``buffered``: the data file through the page
        cache even when direct I/O is on (a replica known to be small: it would stay
        buffered anyway, see ``direct.py``). Each is a spare renamed when there is one
        (``spares.py``), else created."""
        if self._spares is not None:
            self._spares.take(self._data_file)
            self._spares.take(self._meta_file)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        if self._direct_io and not buffered:
            self._data_fd, is_direct = direct.open_direct(self._data_file, flags)
            if is_direct:
                self._staged = direct.StagedWriter(self._data_fd, self._data_file)
        else:
            self._data_fd = _open(self._data_file, flags)
        self._meta_fd = _open(self._meta_file, flags)
        self._write_meta(checksums.meta_header(self._builder.bytes_per_checksum))

    def prepare_reopen(self, replica: Replica) -> bytes:
        """Append, step 1 of 3 (worker thread; HDFS's append to a finalized replica): copy
        the replica's checksum file, whole and durably, to ``rbw/`` under the new genstamp;
        returns the replica's partial last chunk, which the checksums go on from. The
        replica itself is untouched (a crash now leaves only a checksum file that startup
        removes)."""
        name = f"block {replica.block_id} ({replica.data_path})"
        length = replica.num_bytes
        try:
            meta = replica.meta_path.read_bytes()
            step = checksums.parse_meta_header(meta[: checksums.META_HEADER.size], name)
            whole = length // step
            with open(replica.data_path, "rb") as data:
                data.seek(whole * step)
                tail = data.read(length - whole * step)
        except FileNotFoundError:
            raise BlockNotFound(f"block {replica.block_id}: replica was removed") from None
        except OSError as exc:
            raise StorageError(f"cannot read {name}: {exc}") from exc
        if len(meta) != checksums.meta_file_bytes(length, step) or (
            tail and checksums.first_bad_chunk(tail, meta[checksums.crc_offset(whole):], step)
            is not None
        ):
            raise CorruptReplica(f"{name}: its last chunk does not match its checksum file")
        atomic_write(self.meta_path, meta)
        self._builder = checksums.ChecksumBuilder(step)
        return tail

    def reopen(self, replica: Replica, tail: bytes) -> Replica:
        """Append, step 2 (on the event loop, where readers open replicas: a rename and
        two opens, no data is copied): move the data file to ``rbw/`` and open both files
        to go on at the end. Returns the replica as readers see it meanwhile, to put in the
        map at once: the part written before, checked against the old checksum file (kept
        until the writer is done)."""
        try:
            os.replace(replica.data_path, self.data_path)
        except OSError as exc:
            raise StorageError(f"cannot move block {replica.block_id} to rbw/: {exc}") from exc
        self.stale_meta = replica.meta_path
        self._data_fd = _open(self.data_path, os.O_WRONLY | os.O_APPEND)
        self._meta_fd = _open(self.meta_path, os.O_WRONLY)
        whole = replica.num_bytes - len(tail)
        chunk = whole // self._builder.bytes_per_checksum
        os.lseek(self._meta_fd, checksums.crc_offset(chunk), os.SEEK_SET)  # the tail's CRC
        self._builder.update(tail)
        self.num_bytes = replica.num_bytes
        self.meta_bytes = checksums.crc_offset(chunk)
        return Replica(replica.block_id, self.genstamp, replica.num_bytes, self.data_path,
                       replica.meta_path, replica.meta_bytes, finalized=False, appending=True)

    def sync_reopened(self, old_dir: Path) -> None:
        """Append, step 3 (worker thread), before any new byte: make the move durable. A
        crash from then on leaves an rbw replica of every byte it had."""
        fsync_dir(self.rbw_dir)
        fsync_dir(old_dir)

    def _drop_stale_meta(self, keep: Path) -> None:
        if self.stale_meta is not None and self.stale_meta != keep:
            unlink_quietly(self.stale_meta)
            fsync_dir(self.stale_meta.parent)
        self.stale_meta = None

    def _write_meta(self, data: bytes) -> None:
        """Checksum-file bytes, written out by the next :meth:`_flush_meta` (a small
        replica's header and checksums in one write)."""
        self._meta_out += data
        self.meta_bytes += len(data)

    def _flush_meta(self, data_in_file: int | None = None) -> None:
        """``data_in_file``: only the checksums of the chunks within the first that many
        bytes of the data file (a direct writer's bytes still staged or being written
        have none in the checksum file yet: it never covers more than the data file)."""
        out = self._meta_out
        if not out:
            return
        take = len(out)
        if data_in_file is not None:
            in_file = self.meta_bytes - take
            covered = checksums.crc_offset(data_in_file // self._builder.bytes_per_checksum)
            take = min(take, max(0, covered - in_file))
        if take == len(out):
            write_all(self._meta_fd, out, self._meta_file)
            self._meta_out = bytearray()
        elif take:
            write_all(self._meta_fd, out[:take], self._meta_file)
            del out[:take]

    def write(self, data: bytes | memoryview, *, defer_checksums: bool = False) -> None:
        """``defer_checksums``: the checksums of the chunks ``data`` completes are written
        by the next :meth:`flush` or :meth:`finish_writes` (a caller writing a batch of
        chunks: one write of the checksum file for all of them)."""
        assert self._data_fd >= 0, "writer is not open"
        if self._staged is not None:
            self._staged.write(data)
        else:
            write_all(self._data_fd, data, self._data_file)
        self.num_bytes += len(data)
        self._write_meta(self._builder.update(data))
        if not defer_checksums:
            self._flush_meta(None if self._staged is None else self._staged.bytes_in_file)

    def flush(self, everything: bool = False) -> None:
        """What was written so far into the files, with the checksums of the chunks
        completed in them: a direct writer's staged bytes only within its first buffer,
        unless ``everything`` (``direct.StagedWriter.flush``)."""
        if self._staged is not None:
            self._staged.flush(everything)
            self._flush_meta(self._staged.bytes_in_file)
        else:
            self._flush_meta()

    def sync_and_close(self) -> None:
        """Finalize, step 0 done in a worker thread (``DataStorage.commit``): the last
        checksum, both files durable and closed."""
        self._finish_and_sync()

    @property
    def sync_fds(self) -> tuple[int, int]:
        """The data and checksum files' descriptors, for a caller that makes them durable
        itself (``aio.py``) before :meth:`close_synced`."""
        return self._data_fd, self._meta_fd

    def close_synced(self) -> None:
        """Both files were made durable by the caller (after :meth:`finish_writes`):
        step 0 as done by the event loop's AIO instead of :meth:`sync_and_close`."""
        self._close()

    def move_synced(self, dest_dir: Path) -> tuple[Path, Path]:
        """Finalize, step 1 (the files durable): move them into ``dest_dir`` (which exists,
        durably); the caller then fsyncs ``dest_dir`` and calls :meth:`finalize_moved`
        (``DataStorage.commit_steps``)."""
        fault_point("datanode.before_finalize")
        # Durable once ``dest_dir`` is synced: the data file there is the commit point. The
        # names leaving rbw/ are not synced (one fsync less per block): a rename is one
        # atomic change of the file system, and should a crash still show the files in
        # rbw/ too, startup drops them there for the finalized replica (DataStorage).
        return rename_files(self._data_file, self._meta_file, dest_dir,
                            (self._data_name, self._meta_name))

    def finalize_moved(self, data_dest: Path, meta_dest: Path) -> Replica:
        """Finalize, step 2: ``dest_dir`` was fsynced; the replica is finalized."""
        self._drop_stale_meta(meta_dest)
        self.finalized = Replica(
            self.block_id, self.genstamp, self.num_bytes, data_dest, meta_dest, self.meta_bytes
        )
        fault_point("datanode.after_finalize")
        return self.finalized

    def finish_append(self) -> None:
        """End of an append, step 1 of 3 (worker thread): the last chunk's checksum, both
        files durable. Steps 2 and 3 are :meth:`move_appended` and :meth:`sync_appended`."""
        self._finish_and_sync()
        self.synced = True

    def move_appended(self, dest_dir: Path) -> Replica:
        """Step 2, on the event loop with the replica map (readers never open a path
        between the move and the map's update): into ``dest_dir``, which exists durably."""
        data_dest, meta_dest = rename_files(self.data_path, self.meta_path, dest_dir)
        self.finalized = Replica(
            self.block_id, self.genstamp, self.num_bytes, data_dest, meta_dest, self.meta_bytes
        )
        return self.finalized

    def sync_appended(self) -> None:
        """Step 3 (worker thread): the move made durable, the old checksum file gone."""
        assert self.finalized is not None
        fsync_dir(self.finalized.data_path.parent)
        fsync_dir(self.rbw_dir)
        self._drop_stale_meta(self.finalized.meta_path)

    def keep(self) -> Replica | None:
        """The stream broke: complete the checksum file up to the last byte written, fsync
        both files and return them as a replica in state rbw (None, and no files, when
        nothing was written). Only for a writer still open, or an append's synced but not
        moved yet (not past ``finalize``)."""
        assert self._data_fd >= 0 or self.synced, "only an open writer is kept"
        if self.num_bytes == 0:
            self.abort()
            return None
        if not self.synced:
            self._finish_and_sync()
        fsync_dir(self.rbw_dir)
        self._drop_stale_meta(self.meta_path)
        return Replica(self.block_id, self.genstamp, self.num_bytes, self.data_path,
                       self.meta_path, self.meta_bytes, finalized=False)

    @property
    def data_path(self) -> Path:
        return Path(self._data_file)

    @property
    def meta_path(self) -> Path:
        return Path(self._meta_file)

    @property
    def is_open(self) -> bool:
        return self._data_fd >= 0

    def finish_writes(self) -> None:
        """The stream ended: write the last partial chunk's checksum (and, for a direct
        data file, the staged rest, unless all of it is staged: :meth:`kernel_write`).
        Only page-cache writes: a small replica's writer does this on the event loop,
        leaving the fsyncs to the kernel's AIO or the worker thread's ``finalize``."""
        if self._staged is not None and not self._staged.untouched:
            self._staged.finish()  # the data before their checksums
        self._write_meta(self._builder.finish())
        self._flush_meta()
        self._writes_finished = True

    def kernel_write(self) -> tuple[int, int] | None:
        """Finalize, step 0 for a caller that hands the data file's direct write to the
        kernel (``aio.py``), after :meth:`finish_writes`: when every byte of the replica is
        staged, the file gets its size and unaligned end now, and the address and length
        of the aligned part to write direct at offset 0 are returned (``direct.py``,
        ``StagedWriter.kernel_write``); the caller then fdatasyncs what this leaves in the
        page cache. None: the data are in the file already (only fdatasyncs are needed)."""
        if self._staged is None or not self._staged.untouched or not direct.KERNEL_WRITES:
            return None
        return self._staged.kernel_write()

    def write_aligned_buffered(self) -> None:
        """The file system refused :meth:`kernel_write`'s direct write: write that part
        through the page cache (the caller fdatasyncs the file)."""
        assert self._staged is not None
        self._staged.write_aligned_buffered()

    def _finish_and_sync(self) -> None:
        """Checksum the last partial chunk, make both files durable and close them.

        The two fdatasyncs run at once (the checksum file's in a helper thread): two in
        flight together cost about one (the file system commits them together), where
        one after the other they cost two, on the path of every acknowledged block."""
        if not self._writes_finished:
            self._write_meta(self._builder.finish())
        self._flush_meta()
        meta = _SYNCS.submit(sync_data, self._meta_fd, self._meta_file)
        try:
            if self._staged is not None:  # its last bytes go out while the checksums sync
                self._staged.finish()
            sync_data(self._data_fd, self._data_file)
        finally:
            meta.result()  # waited for even when the data file failed: it closes the fd
        self._close()

    def _close(self) -> None:
        if self._staged is not None:
            self._staged.release()
            self._staged = None
        for fd in (self._data_fd, self._meta_fd):
            if fd >= 0:
                os.close(fd)
        self._data_fd = self._meta_fd = -1

    def abort(self) -> None:
        """Drop the partial replica (never finalized): close and delete its rbw files
        (recycled as spares when there is room)."""
        self._close()
        if self._spares is not None:
            self._spares.discard(self._data_file, self._meta_file)
        else:
            unlink_quietly(self.data_path, self.meta_path)


#: preadv2's flag for "only what is in the page cache" (0: this platform has none).
_NOWAIT: int = getattr(os, "RWF_NOWAIT", 0)


class NotCached(Exception):
    """A ``cached_only`` read would have waited for the disk: read it in a thread."""


def _read_cached(data_fd: int, meta_fd: int, view: memoryview, at: int, crc_bytes: int,
                 crc_at: int) -> tuple[int, bytes]:
    """The data and checksums of a piece from the page cache only (NotCached otherwise:
    part of it is not there, or the file system does not read that way)."""
    crcs = bytearray(crc_bytes)
    try:
        got = os.preadv(data_fd, [view], at, _NOWAIT)
        if got == len(view) and os.preadv(meta_fd, [crcs], crc_at, _NOWAIT) == crc_bytes:
            return got, bytes(crcs)
    except (BlockingIOError, InterruptedError):
        pass
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
    raise NotCached  # (a short read too: the thread's read tells a short file apart)


class ReplicaReader:
    """An open finalized replica, read in pieces aligned to checksum chunks; every chunk
    is verified against the checksum file before its bytes are returned.

    Files are opened at construction, so a replica deleted while it is read stays
    readable to the end (POSIX unlink semantics)."""

    def __init__(
        self, replica: Replica, offset: int, length: int, piece_bytes: int,
        direct_io: bool = False, kernel_reads: bool = False,
    ) -> None:
        """``kernel_reads`` (with ``direct_io``): a small replica is read direct too, into
        a pooled buffer, by a caller that hands its reads to the kernel's AIO
        (:meth:`kernel_read`): a small replica written direct (``kernel_write``) is not in
        the page cache, and a buffered read of it would fill fresh page-cache pages, as
        costly here as the buffered write was."""
        assert offset >= 0 and length >= 0 and offset + length <= replica.num_bytes
        self.replica = replica
        self._data_fd = self._meta_fd = -1
        self._pooled = False
        try:
            self._data_fd = os.open(replica.data_path, os.O_RDONLY)
            self._meta_fd = os.open(replica.meta_path, os.O_RDONLY)
            header = os.pread(self._meta_fd, checksums.META_HEADER.size, 0)
            data_size = os.fstat(self._data_fd).st_size
            meta_size = os.fstat(self._meta_fd).st_size
        except FileNotFoundError:
            self.close()
            raise BlockNotFound(f"block {replica.block_id}: replica was removed") from None
        except OSError as exc:
            self.close()
            raise StorageError(f"cannot read block {replica.block_id}: {exc}") from exc
        try:
            self.chunk_bytes = checksums.parse_meta_header(header, self._name)
            expected_meta = checksums.meta_file_bytes(replica.num_bytes, self.chunk_bytes)
            # an appended replica's data file grows past the part readers may see
            short = data_size < replica.num_bytes if replica.appending else (
                data_size != replica.num_bytes)
            if short or meta_size != expected_meta:
                raise CorruptReplica(
                    f"{self._name}: data file has {data_size} bytes and checksum file "
                    f"{meta_size}; expected {replica.num_bytes} and {expected_meta}"
                )
        except CorruptReplica:
            self.close()
            raise
        step = self.chunk_bytes
        self._start = offset
        self._end = offset + length
        self._pos = offset - offset % step
        # The last chunk to verify ends at a chunk boundary or at the end of the block.
        self._verify_end = min(replica.num_bytes, -(-self._end // step) * step)
        # Two buffers used in turn: a piece handed out stays intact while the next one is
        # read ahead into the other buffer (see PieceStream).
        # Sized to the range when it is short: zeroing two full pieces for a 200 KiB read
        # cost more than reading it.
        span = self._verify_end - self._pos
        size = max(step, min(piece_bytes, -(-span // step) * step) // step * step)
        # Direct reads (``direct.py``) of all but small replicas (those stay in the page
        # cache, unless ``kernel_reads``), when the chunks are aligned: pieces start at one.
        large = direct.reads_direct(replica.num_bytes)
        is_direct = (direct_io and (large or kernel_reads)
                     and step % aio.ALIGN == 0 and direct.set_direct(self._data_fd))
        self._buffers: tuple[bytearray | mmap.mmap, bytearray | mmap.mmap]
        if is_direct and not large:  # one piece (the range is shorter than the buffer)
            pooled = direct.borrow_buffer()
            self._buffers, self._pooled = (pooled, pooled), True
        elif is_direct and size <= direct.LARGE_STAGE_BYTES:  # pooled: no page faults
            self._buffers, self._pooled = (direct.borrow_large(), direct.borrow_large()), True
        elif is_direct:
            self._buffers = (direct.aligned_buffer(size), direct.aligned_buffer(size))
        else:
            self._buffers = (bytearray(size), bytearray(size))
        self._turn = 0
        self.bytes_read = 0
        with contextlib.suppress(OSError, AttributeError):  # a hint: larger kernel read-ahead
            os.posix_fadvise(self._data_fd, offset, length, os.POSIX_FADV_SEQUENTIAL)

    @property
    def _name(self) -> str:
        return f"block {self.replica.block_id} ({self.replica.data_path})"

    @property
    def exhausted(self) -> bool:
        """Whether every piece of the range was read (the next read returns None)."""
        return self._pos >= self._end

    @property
    def cached_reads(self) -> bool:
        """Whether :meth:`read_piece` may be asked for pages already in the page cache
        only (``cached_only``): a buffered reader, on a kernel with ``RWF_NOWAIT``."""
        return _NOWAIT != 0 and not isinstance(self._buffers[0], mmap.mmap)

    def read_piece(self, cached_only: bool = False) -> memoryview | None:
        """The next verified piece of the requested range (a view of a buffer that the call
        after next reuses), or None at the end. ``cached_only`` (see :attr:`cached_reads`):
        :class:`NotCached`, and nothing changed, unless all of the piece and its checksums
        are in the page cache, so the event loop can read it without waiting for a disk."""
        if self._pos >= self._end:
            return None
        buffer = self._buffers[self._turn]
        count = min(len(buffer), self._verify_end - self._pos)
        view = memoryview(buffer)[:count]
        crc_bytes, crc_at = self._crc_range(count)
        try:
            if cached_only:
                got, crcs = _read_cached(self._data_fd, self._meta_fd, view, self._pos,
                                         crc_bytes, crc_at)
            elif isinstance(buffer, mmap.mmap):
                got = direct.pread_direct(self._data_fd, buffer, count, self._pos)
                crcs = os.pread(self._meta_fd, crc_bytes, crc_at)
            else:
                got = os.preadv(self._data_fd, [view], self._pos)
                crcs = os.pread(self._meta_fd, crc_bytes, crc_at)
        except OSError as exc:
            raise StorageError(f"read of {self._name} failed: {exc}") from exc
        return self._verified(view, got, crcs)

    def _crc_range(self, count: int) -> tuple[int, int]:
        """Bytes and offset of the checksums of the ``count`` bytes at the position."""
        step = self.chunk_bytes
        return (checksums.CRC_BYTES * checksums.chunk_count(count, step),
                checksums.crc_offset(self._pos // step))

    def _verified(self, view: memoryview, got: int, crcs: bytes) -> memoryview:
        """The piece just read into ``view`` (``got`` bytes of it arrived), checked against
        ``crcs``; the position moves past it."""
        self._turn ^= 1
        count = len(view)
        if got != count:
            raise CorruptReplica(f"{self._name}: data ends at byte {self._pos + got}")
        step = self.chunk_bytes
        bad = checksums.first_bad_chunk(view, crcs, step)
        if bad is not None:
            at = (self._pos // step + bad) * step
            raise CorruptReplica(f"{self._name}: checksum mismatch in bytes {at}-{at + step - 1}")
        low = max(self._start, self._pos) - self._pos
        high = min(self._end, self._pos + count) - self._pos
        self._pos += count
        self.bytes_read += count
        return view[low:high]

    @property
    def kernel_reads(self) -> bool:
        """Whether the data file is read direct (its pieces may be read by the kernel's
        AIO: :meth:`kernel_read`)."""
        return isinstance(self._buffers[0], mmap.mmap)

    def kernel_read(self) -> tuple[int, ctypes.c_char, int, int]:
        """For a caller that hands the next piece's direct read to the kernel (``aio.py``):
        the data file's fd, the buffer to read into (pinned: it stays mapped while the
        kernel fills it; keep it until the read is done), the byte count (aligned) and
        the offset; then :meth:`kernel_read_done`. Only before the end of the range."""
        buffer = self._buffers[self._turn]
        assert isinstance(buffer, mmap.mmap) and self._pos < self._end
        count = min(len(buffer), self._verify_end - self._pos)
        return (self._data_fd, ctypes.c_char.from_buffer(buffer),
                min(len(buffer), aio.round_up(count)), self._pos)

    def kernel_read_done(self, result: int) -> memoryview:
        """The piece :meth:`kernel_read` asked for, verified, once the kernel read
        ``result`` bytes (or failed: minus an errno); the checksums are read here (their
        file is small and was written through the page cache). A file system that refuses
        the direct read (EINVAL) is read as :meth:`read_piece` reads it."""
        if result == -errno.EINVAL:
            piece = self.read_piece()
            assert piece is not None
            return piece
        if result < 0:
            raise StorageError(f"read of {self._name} failed: {os.strerror(-result)}")
        buffer = self._buffers[self._turn]
        count = min(len(buffer), self._verify_end - self._pos)
        crc_bytes, crc_at = self._crc_range(count)
        try:
            crcs = os.pread(self._meta_fd, crc_bytes, crc_at)
        except OSError as exc:
            raise StorageError(f"read of {self._name} failed: {exc}") from exc
        return self._verified(memoryview(buffer)[:count], min(result, count), crcs)

    def close(self) -> None:
        for fd in (self._data_fd, self._meta_fd):
            if fd >= 0:
                os.close(fd)
        self._data_fd = self._meta_fd = -1
        if self._pooled:
            self._pooled = False
            first, second = self._buffers
            self._buffers = (bytearray(), bytearray())
            assert isinstance(first, mmap.mmap) and isinstance(second, mmap.mmap)
            if second is first:  # (a small replica's one piece: one buffer)
                del second
                direct.give_back(first)
            else:
                direct.give_back(first)
                direct.give_back(second)
