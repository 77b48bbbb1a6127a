"""Replica data files written and read with O_DIRECT (datanode.direct_io, direct.py)."""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from xdfs.common import aio
from xdfs.common.files import fsync_dir
from xdfs.datanode import checksums, direct
from xdfs.datanode.replica import Replica, ReplicaReader, ReplicaWriter
from xdfs.testing.page_cache import cached_pages

CHUNK = 64 * 1024
STAGE = direct.STAGE_BYTES
ALIGN_PAGE = mmap.PAGESIZE


def _accepts_o_direct(directory: Path) -> bool:
    """Whether this file system takes O_DIRECT (asked without the code under test)."""
    probe = directory / "probe"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644))
    except OSError:
        return False
    finally:
        probe.unlink(missing_ok=True)
    return True


def _write(rbw: Path, data: bytes, piece: int, *, keep: bool = False,
           seen: Callable[[int], None] = lambda fd: None) -> Replica:
    """``data`` written as the write path does, in pieces of ``piece`` bytes, then
    finalized into ``rbw/../finalized`` (or kept, as a broken stream's write is)."""
    writer = ReplicaWriter(1, 1, rbw, CHUNK, direct_io=True)
    writer.open()
    seen(writer._data_fd)
    for at in range(0, len(data), piece):
        writer.write(data[at : at + piece])
    if keep:
        kept = writer.keep()
        assert kept is not None
        return kept
    dest = rbw.parent / "finalized"
    dest.mkdir(exist_ok=True)
    return _finalize(writer, dest)


def _finalize(writer: ReplicaWriter, dest: Path) -> Replica:
    """The writer's part of ``DataStorage.commit_steps`` (``dest`` exists)."""
    writer.sync_and_close()
    moved = writer.move_synced(dest)
    fsync_dir(dest)
    return writer.finalize_moved(*moved)


def _read(replica: Replica, offset: int, length: int, direct_io: bool = True) -> bytes:
    reader = ReplicaReader(replica, offset, length, 4 * CHUNK, direct_io)
    try:
        parts = []
        while (piece := reader.read_piece()) is not None:
            parts.append(bytes(piece))
        return b"".join(parts)
    finally:
        reader.close()


@pytest.fixture
def rbw(tmp_path: Path) -> Path:
    path = tmp_path / "rbw"
    path.mkdir()
    return path


@pytest.mark.parametrize("size", [1, 4095, 4096, 4097, 200 * 1024, STAGE - 1, STAGE,
                                  STAGE + 4097, 3 * STAGE + 5])
def test_every_size_is_stored_whole_and_read_back_exactly(rbw: Path, size: int) -> None:
    data = os.urandom(size)
    flags: list[int] = []
    replica = _write(rbw, data, 100_000, seen=lambda fd: flags.append(fcntl.fcntl(
        fd, fcntl.F_GETFL)))
    assert bool(flags[0] & os.O_DIRECT) == _accepts_o_direct(rbw)  # direct where it can be
    assert replica.num_bytes == size and replica.data_path.read_bytes() == data
    ranges = [(0, size), (size // 3, size // 2), (size - 1, 1)]
    if size > CHUNK:
        ranges.append((CHUNK - 1, 2))  # across a checksum chunk boundary
    for offset, length in ranges:
        want = data[offset : offset + length]
        assert _read(replica, offset, length) == want
        assert _read(replica, offset, length, direct_io=False) == want


def test_a_broken_write_keeps_every_byte_it_staged(rbw: Path) -> None:
    data = os.urandom(STAGE + 5000)
    kept = _write(rbw, data, 7000, keep=True)
    assert not kept.finalized and kept.data_path.read_bytes() == data
    assert _read(kept, 0, len(data)) == data


def _crcs_in_file(writer: ReplicaWriter) -> int:
    return (writer.meta_path.stat().st_size - checksums.META_HEADER.size) // checksums.CRC_BYTES


def test_flush_puts_what_arrived_in_the_file_and_writing_goes_on(rbw: Path) -> None:
    writer = ReplicaWriter(1, 1, rbw, CHUNK, direct_io=True)
    writer.open()
    first, second = os.urandom(10_000), os.urandom(3 * STAGE // 2)
    writer.write(first)
    writer.flush()  # a batch ended: within the first buffer, what arrived is in the file
    assert writer.data_path.read_bytes() == first
    writer.write(second)
    writer.flush()
    # past the first buffer the bytes stay staged until a large buffer is full: the file
    # holds the first buffer, and the checksum file never covers more than the data file
    on_disk = writer.data_path.read_bytes()
    assert len(on_disk) >= STAGE and (first + second).startswith(on_disk)
    assert 0 < _crcs_in_file(writer) <= len(on_disk) // CHUNK
    more = os.urandom(3 * direct.LARGE_STAGE_BYTES + 5)  # large buffers written meanwhile
    writer.write(more)
    writer.flush()
    assert STAGE < len(writer.data_path.read_bytes()) <= len(first + second + more)
    assert _crcs_in_file(writer) <= len(writer.data_path.read_bytes()) // CHUNK
    writer.flush(everything=True)  # the stream paused: every byte that arrived, in the file
    assert writer.data_path.read_bytes() == first + second + more
    assert _crcs_in_file(writer) == len(first + second + more) // CHUNK
    writer.write(more)  # and writing goes on from there
    dest = rbw.parent / "finalized"
    dest.mkdir()
    replica = _finalize(writer, dest)
    assert _read(replica, 0, replica.num_bytes) == first + second + more + more
    assert replica.data_path.read_bytes() == first + second + more + more


def test_a_write_past_the_first_buffer_breaks_and_keeps_every_staged_byte(rbw: Path) -> None:
    """A stream broken while large buffers are staged and written: every byte received
    is kept (the writer waits for the writes in flight, then writes the rest)."""
    data = os.urandom(2 * direct.LARGE_STAGE_BYTES + STAGE + 12_345)
    writer = ReplicaWriter(1, 1, rbw, CHUNK, direct_io=True)
    writer.open()
    for at in range(0, len(data), 1 << 20):
        writer.write(data[at : at + (1 << 20)], defer_checksums=True)
        writer.flush()
    kept = writer.keep()
    assert kept is not None and kept.num_bytes == len(data)
    assert kept.data_path.read_bytes() == data and _read(kept, 0, len(data)) == data


def test_a_file_system_refusing_o_direct_is_written_buffered(
    rbw: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_open, real_write = os.open, os.write
    refuse = {"open": True}

    def open_(path: object, flags: int, *args: int) -> int:  # as tmpfs answers O_DIRECT
        if flags & os.O_DIRECT and refuse["open"]:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *args)  # type: ignore[arg-type]

    def write(fd: int, data: bytes | memoryview) -> int:  # opened direct, writes refused
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_write(fd, data)

    def pwrite(fd: int, data: bytes | memoryview, offset: int) -> int:
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_pwrite(fd, data, offset)

    real_pwrite = os.pwrite
    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(os, "pwrite", pwrite)
    data = os.urandom(2 * direct.LARGE_STAGE_BYTES + 333)  # large buffers refused too
    assert _write(rbw, data, 65_536).data_path.read_bytes() == data
    refuse["open"] = False
    (rbw.parent / "finalized" / "blk_1").unlink()
    assert _write(rbw, data, 65_536).data_path.read_bytes() == data


@pytest.mark.parametrize("size", [direct.READ_PART_BYTES + 1, 3 * direct.READ_PART_BYTES + 5,
                                  direct.READ_PIECE_BYTES])
def test_long_direct_reads_in_parts_return_exact_bytes(rbw: Path, size: int) -> None:
    data = os.urandom(size)
    replica = _write(rbw, data, 1 << 20)
    for offset, length in [(0, size), (CHUNK + 7, size - CHUNK - 9), (size - 5, 5)]:
        reader = ReplicaReader(replica, offset, length, direct.READ_PIECE_BYTES, True)
        try:
            parts = []
            while (piece := reader.read_piece()) is not None:
                parts.append(bytes(piece))
        finally:
            reader.close()
        assert b"".join(parts) == data[offset : offset + length]


# -- small replicas stay in the page cache (direct.BUFFERED_MAX_BYTES) -------------------

SMALL = direct.BUFFERED_MAX_BYTES
def _evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # clean pages leave the cache
    finally:
        os.close(fd)


def _on_disk(path: Path) -> bytes:
    """The file's bytes as the disk holds them (a direct read: no page cache)."""
    size = path.stat().st_size
    buffer = mmap.mmap(-1, aio.round_up(max(size, 1)))
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        got = os.preadv(fd, [buffer], 0)
    finally:
        os.close(fd)
    assert got == size
    return buffer[:size]


def _reader_is_direct(replica: Replica) -> bool:
    reader = ReplicaReader(replica, 0, replica.num_bytes, 4 * CHUNK, True)
    try:
        return bool(fcntl.fcntl(reader._data_fd, fcntl.F_GETFL) & os.O_DIRECT)
    finally:
        reader.close()


@pytest.mark.parametrize("size", [1, 200 * 1024, SMALL - 1, SMALL, SMALL + 1, 2 * SMALL + 7])
@pytest.mark.parametrize("flushed", [False, True])
def test_small_replicas_stay_buffered_larger_ones_go_direct(
    rbw: Path, size: int, flushed: bool
) -> None:
    if not _accepts_o_direct(rbw):
        pytest.fail("this test needs a file system taking O_DIRECT (tmp_path's does not)")
    data = os.urandom(size)
    writer = ReplicaWriter(1, 1, rbw, CHUNK, direct_io=True)
    writer.open()
    for at in range(0, size, 100_000):
        writer.write(data[at : at + 100_000])
        if flushed:
            writer.flush()  # a batch ended: within the first buffer, what arrived is in
            on_disk = _on_disk(writer.data_path)  # the file (past it: whole buffers)
            assert on_disk == data[: at + 100_000] if at + 100_000 <= SMALL - 1 or (
                size < SMALL) else (
                len(on_disk) >= SMALL and data.startswith(on_disk))  # leaves no cache
    dest = rbw.parent / "finalized"
    dest.mkdir()
    replica = _finalize(writer, dest)
    aligned = size - size % ALIGN_PAGE  # the unaligned end goes buffered in either case
    cached = cached_pages(replica.data_path, aligned) if aligned else 0
    if size < SMALL:  # written through the page cache, still there after the fdatasync
        assert cached == aligned // ALIGN_PAGE
    else:  # the first buffer's bytes went direct, past the page cache
        assert cached == 0
    assert _reader_is_direct(replica) == (size >= SMALL)
    assert _on_disk(replica.data_path) == data
    for direct_io in (True, False, True):  # both kinds of read, one after the other
        assert _read(replica, 0, size, direct_io) == data
        assert _read(replica, size // 2, size - size // 2, direct_io) == data[size // 2 :]


def test_a_small_replica_read_buffered_comes_from_the_page_cache(rbw: Path) -> None:
    data = os.urandom(300 * 1024)
    replica = _write(rbw, data, 64 * 1024)
    _evict(replica.data_path)
    assert _read(replica, 0, len(data)) == data
    # kernel read-ahead and the read itself left the replica cached for the next reader
    assert cached_pages(replica.data_path, len(data)) == len(data) // ALIGN_PAGE


def _append(replica: Replica, rbw: Path, more: bytes) -> Replica:
    """``more`` appended to ``replica`` as the append path does (genstamp + 1)."""
    writer = ReplicaWriter(replica.block_id, replica.genstamp + 1, rbw, CHUNK, direct_io=True)
    tail = writer.prepare_reopen(replica)
    visible = writer.reopen(replica, tail)
    writer.sync_reopened(replica.data_path.parent)
    for at in range(0, len(more), 70_000):
        writer.write(more[at : at + 70_000])
        writer.flush()
        # readers see the part written before while the append goes on
        assert _read(visible, 0, visible.num_bytes) == _read(visible, 0, visible.num_bytes,
                                                              False)
    writer.finish_append()
    appended = writer.move_appended(replica.data_path.parent)
    writer.sync_appended()
    return appended


@pytest.mark.parametrize("first", [SMALL - 1000, 200 * 1024 + 3, SMALL + 5000])
def test_appends_across_the_threshold_keep_every_byte_on_disk(rbw: Path, first: int) -> None:
    data = os.urandom(first)
    replica = _write(rbw, data, 100_000)
    assert _read(replica, 0, first) == _read(replica, 0, first, False) == data  # cached now
    more = os.urandom(SMALL + 4321)
    appended = _append(replica, rbw, more)
    assert appended.num_bytes == first + len(more)
    assert _on_disk(appended.data_path) == data + more
    assert _reader_is_direct(appended)  # it grew past the threshold: read direct now
    for direct_io in (True, False, True):
        assert _read(appended, 0, appended.num_bytes, direct_io) == data + more
        assert _read(appended, first - 10, 20, direct_io) == (data + more)[first - 10 : first + 10]
    # a second, small append to the now large replica
    again = _append(appended, rbw, b"x" * 777)
    assert _on_disk(again.data_path) == data + more + b"x" * 777
    assert _read(again, 0, again.num_bytes) == data + more + b"x" * 777


def test_large_direct_reads_borrow_pooled_buffers_and_give_back_unviewed_ones(
    rbw: Path,
) -> None:
    """A large replica's direct reader reads into two pooled buffers (fresh ones cost a
    page fault per page); closed, it gives back those no piece still views."""
    if not _accepts_o_direct(rbw):
        pytest.fail("this test needs a file system taking O_DIRECT (tmp_path's does not)")
    data = os.urandom(3 * direct.LARGE_STAGE_BYTES + 5)
    replica = _write(rbw, data, 1 << 20)
    direct._large_pool.clear()
    reader = ReplicaReader(replica, 0, len(data), direct.READ_PIECE_BYTES, True)
    lent = [id(buffer) for buffer in reader._buffers]  # (no reference: it would count)
    first = reader.read_piece()
    assert first is not None and bytes(first) == data[: len(first)]
    reader.close()
    # the other one only: the first piece still views its own
    assert [id(buffer) for buffer in direct._large_pool] == [lent[1]]
    del first
    again = ReplicaReader(replica, 0, len(data), direct.READ_PIECE_BYTES, True)
    try:
        assert id(again._buffers[0]) == lent[1]  # reused, not mapped afresh
        parts = []
        while (piece := again.read_piece()) is not None:
            parts.append(bytes(piece))
        del piece
        assert b"".join(parts) == data
    finally:
        again.close()
    assert len(direct._large_pool) == 2
