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
import os
from dataclasses import dataclass
from pathlib import Path

from xdfs.common.faults import FAULTS, fault_point
from xdfs.common.files import datasync, fsync_dir, write_all
from xdfs.datanode import checksums
from xdfs.datanode.layout import data_name, meta_name
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

    @property
    def record(self) -> BlockRecord:
        return BlockRecord(self.block_id, self.genstamp, self.num_bytes)

    @property
    def disk_bytes(self) -> int:
        return self.num_bytes + self.meta_bytes


def _open(path: Path, flags: int) -> int:
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
    data_dest = dest_dir / data_path.name
    meta_dest = dest_dir / meta_path.name
    try:
        os.replace(meta_path, meta_dest)
        os.replace(data_path, data_dest)
    except OSError as exc:
        raise StorageError(f"cannot move {data_path.name} to {dest_dir}: {exc}") from exc
    fsync_dir(dest_dir)
    fsync_dir(data_path.parent)
    return data_dest, meta_dest


class ReplicaWriter:
    """A replica being written in ``rbw/``: data file plus checksum file built on the fly."""

    def __init__(self, block_id: int, genstamp: int, rbw_dir: Path, bytes_per_checksum: int):
        self.block_id = block_id
        self.genstamp = genstamp
        self.rbw_dir = rbw_dir
        self.data_path = rbw_dir / data_name(block_id)
        self.meta_path = rbw_dir / meta_name(block_id, genstamp)
        self.num_bytes = 0
        self.meta_bytes = 0
        self._builder = checksums.ChecksumBuilder(bytes_per_checksum)
        self._data_fd = -1
        self._meta_fd = -1
        #: Set once the replica is in finalized/ (the writer is then done).
        self.finalized: Replica | None = None

    def open(self) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        self._data_fd = _open(self.data_path, flags)
        self._meta_fd = _open(self.meta_path, flags)
        self._write_meta(checksums.meta_header(self._builder.bytes_per_checksum))

    def _write_meta(self, data: bytes) -> None:
        if data:
            write_all(self._meta_fd, data, self.meta_path)
            self.meta_bytes += len(data)

    def write(self, data: bytes | memoryview) -> None:
        assert self._data_fd >= 0, "writer is not open"
        write_all(self._data_fd, data, self.data_path)
        self.num_bytes += len(data)
        self._write_meta(self._builder.update(data))

    def finalize(self, dest_dir: Path) -> Replica:
        """Make the replica durable and move it into ``dest_dir`` (which exists, durably;
        see :func:`move_files`)."""
        self._finish_and_sync()
        fault_point("datanode.before_finalize")
        data_dest, meta_dest = move_files(self.data_path, self.meta_path, dest_dir)
        self.finalized = Replica(
            self.block_id, self.genstamp, self.num_bytes, data_dest, meta_dest, self.meta_bytes
        )
        fault_point("datanode.after_finalize")
        return self.finalized

    def keep(self) -> Replica | None:
        """The stream broke: complete the checksum file up to the last byte written, fsync
        both files and return them as a replica in state rbw (None, and no files, when
        nothing was written). Only for a writer still open (not past ``finalize``)."""
        assert self._data_fd >= 0, "only an open writer is kept"
        if self.num_bytes == 0:
            self.abort()
            return None
        self._finish_and_sync()
        fsync_dir(self.rbw_dir)
        return Replica(self.block_id, self.genstamp, self.num_bytes, self.data_path,
                       self.meta_path, self.meta_bytes, finalized=False)

    @property
    def is_open(self) -> bool:
        return self._data_fd >= 0

    def _finish_and_sync(self) -> None:
        """Checksum the last partial chunk, make both files durable and close them."""
        self._write_meta(self._builder.finish())
        for fd, path in ((self._data_fd, self.data_path), (self._meta_fd, self.meta_path)):
            try:
                datasync(fd)
            except OSError as exc:
                raise StorageError(f"fsync of {path} failed: {exc}") from exc
        self._close()

    def _close(self) -> None:
        for fd in (self._data_fd, self._meta_fd):
            if fd >= 0:
                os.close(fd)
        self._data_fd = self._meta_fd = -1

    def abort(self) -> None:
        """Drop the partial replica (never finalized): close and delete its rbw files."""
        self._close()
        unlink_quietly(self.data_path, self.meta_path)


class ReplicaReader:
    """An open finalized replica, read in pieces aligned to checksum chunks; every chunk
    is verified against the checksum file before its bytes are returned.

    Files are opened at construction, so a replica deleted while it is read stays
    readable to the end (POSIX unlink semantics)."""

    def __init__(self, replica: Replica, offset: int, length: int, piece_bytes: int) -> None:
        assert offset >= 0 and length >= 0 and offset + length <= replica.num_bytes
        self.replica = replica
        self._data_fd = self._meta_fd = -1
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
            if data_size != replica.num_bytes or meta_size != expected_meta:
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
        self._buffers = (bytearray(size), bytearray(size))
        self._turn = 0
        self.bytes_read = 0
        with contextlib.suppress(OSError, AttributeError):  # a hint: larger kernel read-ahead
            os.posix_fadvise(self._data_fd, offset, length, os.POSIX_FADV_SEQUENTIAL)

    @property
    def _name(self) -> str:
        return f"block {self.replica.block_id} ({self.replica.data_path})"

    def read_piece(self) -> memoryview | None:
        """The next verified piece of the requested range (a view of a buffer that the call
        after next reuses), or None at the end."""
        if self._pos >= self._end:
            return None
        buffer = self._buffers[self._turn]
        self._turn ^= 1
        count = min(len(buffer), self._verify_end - self._pos)
        view = memoryview(buffer)[:count]
        step = self.chunk_bytes
        first_chunk = self._pos // step
        try:
            got = os.preadv(self._data_fd, [view], self._pos)
            crcs = os.pread(
                self._meta_fd,
                checksums.CRC_BYTES * checksums.chunk_count(count, step),
                checksums.crc_offset(first_chunk),
            )
        except OSError as exc:
            raise StorageError(f"read of {self._name} failed: {exc}") from exc
        if got != count:
            raise CorruptReplica(f"{self._name}: data ends at byte {self._pos + got}")
        bad = checksums.first_bad_chunk(view, crcs, step)
        if bad is not None:
            at = (first_chunk + bad) * step
            raise CorruptReplica(f"{self._name}: checksum mismatch in bytes {at}-{at + step - 1}")
        low = max(self._start, self._pos) - self._pos
        high = min(self._end, self._pos + count) - self._pos
        self._pos += count
        self.bytes_read += count
        return view[low:high]

    def close(self) -> None:
        for fd in (self._data_fd, self._meta_fd):
            if fd >= 0:
                os.close(fd)
        self._data_fd = self._meta_fd = -1
