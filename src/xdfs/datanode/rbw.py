"""Replica files outside the write path: rbw replicas found at startup, and the rewrite a
block recovery makes of a replica (new generation stamp, shorter length).

Synchronous file I/O, run in worker threads (or at startup, before serving).

* **Startup** (HDFS's validateIntegrityAndSetLength): a replica left in ``rbw/`` is as long
  as its checksum file covers, the last covered chunk verified against the data; a last
  chunk that fails (its CRC was for fewer or other bytes: the write was cut between the two
  files) is kept only as far as its CRC covers a prefix of it (an append cut short before
  summing the chunk again), else dropped. Both files are truncated to that length and
  fsynced, so what is kept is consistent and reads back verified.
* **Recovery**: the new checksum file (named after the new genstamp) is written atomically
  and durably before the data file is cut and the old checksum file removed. A crash in
  between leaves an rbw replica whose next startup finds the consistent prefix again.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import crc32c

from xdfs.common.files import atomic_write, datasync, fsync_dir
from xdfs.datanode import checksums
from xdfs.datanode.layout import meta_name
from xdfs.datanode.replica import Replica, unlink_quietly
from xdfs.errors import CorruptReplica, StorageError


def load_rbw(block_id: int, genstamp: int, data_path: Path, meta_path: Path) -> Replica | None:
    """The rbw replica these files hold, cut to its valid length; None when no byte of it
    is valid (the caller removes the files)."""
    try:
        length, chunk_bytes = _valid_length(data_path, meta_path)
    except CorruptReplica:
        return None
    if length == 0:
        return None
    meta_bytes = checksums.meta_file_bytes(length, chunk_bytes)
    _truncate(data_path, length)
    _truncate(meta_path, meta_bytes)
    return Replica(block_id, genstamp, length, data_path, meta_path, meta_bytes, finalized=False)


def rewrite_for_recovery(replica: Replica, genstamp: int, length: int) -> tuple[Path, int]:
    """Give the replica's files ``genstamp`` and cut them to ``length`` where they are;
    returns the new checksum file and its size. CorruptReplica when the chunk that is cut
    does not match its checksum."""
    assert 0 <= length <= replica.num_bytes
    new_meta = replica.meta_path.with_name(meta_name(replica.block_id, genstamp))
    if length == replica.num_bytes:  # a rename says it all, atomically
        _replace(replica.meta_path, new_meta)
        fsync_dir(new_meta.parent)
        return new_meta, replica.meta_bytes
    content = _truncated_meta(replica, length)
    atomic_write(new_meta, content)
    _truncate(replica.data_path, length)
    unlink_quietly(replica.meta_path)
    fsync_dir(new_meta.parent)
    return new_meta, len(content)


def _valid_length(data_path: Path, meta_path: Path) -> tuple[int, int]:
    with _opened(data_path) as data_fd, _opened(meta_path) as meta_fd:
        header = os.pread(meta_fd, checksums.META_HEADER.size, 0)
        chunk_bytes = checksums.parse_meta_header(header, str(meta_path))
        data_size = os.fstat(data_fd).st_size
        crc_count = (os.fstat(meta_fd).st_size - len(header)) // checksums.CRC_BYTES
        chunks = min(checksums.chunk_count(data_size, chunk_bytes), crc_count)
        if chunks <= 0:
            return 0, chunk_bytes
        start = (chunks - 1) * chunk_bytes
        data = os.pread(data_fd, min(chunk_bytes, data_size - start), start)
        crc = os.pread(meta_fd, checksums.CRC_BYTES, checksums.crc_offset(chunks - 1))
    if checksums.first_bad_chunk(data, crc, chunk_bytes) is None:
        return start + len(data), chunk_bytes
    return start + _checksummed_prefix(data, crc), chunk_bytes


def _checksummed_prefix(data: bytes, crc: bytes) -> int:
    """How much of a last chunk its CRC covers (0: none). An append cut short leaves the
    CRC of the chunk as it was before (it is rewritten when the chunk is summed again), so
    the bytes written before the append are still covered and kept."""
    (expected,) = checksums.unpack_crcs(crc)
    running = 0
    covered = 0
    for end in range(1, len(data) + 1):
        running = crc32c.crc32c(data[end - 1 : end], running)
        if running == expected:
            covered = end
    return covered


def _truncated_meta(replica: Replica, length: int) -> bytes:
    """Header and CRCs of the first ``length`` bytes: whole chunks keep their CRCs (so
    damage stays detectable); the cut chunk is verified, then summed anew."""
    name = f"block {replica.block_id} ({replica.data_path})"
    with _opened(replica.data_path) as data_fd, _opened(replica.meta_path) as meta_fd:
        header = os.pread(meta_fd, checksums.META_HEADER.size, 0)
        step = checksums.parse_meta_header(header, name)
        whole = length // step
        crcs = os.pread(meta_fd, whole * checksums.CRC_BYTES, checksums.crc_offset(0))
        tail = length - whole * step
        if tail:
            old = os.pread(data_fd, min(step, replica.num_bytes - whole * step), whole * step)
            old_crc = os.pread(meta_fd, checksums.CRC_BYTES, checksums.crc_offset(whole))
            if checksums.first_bad_chunk(old, old_crc, step) is not None:
                raise CorruptReplica(f"{name}: checksum mismatch in the chunk at {whole * step}")
            crcs += checksums.pack_crcs([crc32c.crc32c(old[:tail])])
    if len(crcs) != checksums.CRC_BYTES * checksums.chunk_count(length, step):
        raise CorruptReplica(f"{name}: checksum file shorter than the data")
    return header + crcs


@contextlib.contextmanager
def _opened(path: Path) -> Iterator[int]:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise CorruptReplica(f"{path} is missing") from None
    except OSError as exc:
        raise StorageError(f"cannot open {path}: {exc}") from exc
    try:
        yield fd
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc}") from exc
    finally:
        os.close(fd)


def _truncate(path: Path, size: int) -> None:
    try:
        fd = os.open(path, os.O_WRONLY)
        try:
            if os.fstat(fd).st_size != size:
                os.ftruncate(fd, size)
                datasync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise StorageError(f"cannot cut {path} to {size} bytes: {exc}") from exc


def _replace(src: Path, dst: Path) -> None:
    try:
        os.replace(src, dst)
    except OSError as exc:
        raise StorageError(f"cannot rename {src} to {dst.name}: {exc}") from exc
