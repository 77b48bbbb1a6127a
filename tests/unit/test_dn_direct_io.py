"""Replica data files written and read with O_DIRECT (datanode.direct_io, direct.py)."""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from xdfs.datanode import direct
from xdfs.datanode.replica import Replica, ReplicaReader, ReplicaWriter

CHUNK = 64 * 1024
STAGE = direct.STAGE_BYTES


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
    return writer.finalize(dest)


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


def test_flush_puts_what_arrived_in_the_file_and_writing_goes_on(rbw: Path) -> None:
    writer = ReplicaWriter(1, 1, rbw, CHUNK, direct_io=True)
    writer.open()
    first, second = os.urandom(10_000), os.urandom(3 * STAGE // 2)
    writer.write(first)
    writer.flush()  # a batch ended: an rbw reader (or recovery) sees what arrived
    assert writer.data_path.read_bytes() == first
    writer.write(second)
    writer.flush()
    assert writer.data_path.read_bytes() == first + second
    dest = rbw.parent / "finalized"
    dest.mkdir()
    replica = writer.finalize(dest)
    assert _read(replica, 0, replica.num_bytes) == first + second


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

    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "write", write)
    data = os.urandom(2 * STAGE + 333)
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
