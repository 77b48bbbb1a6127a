"""How an edits flush is made durable: on a file system that honours ``RWF_DSYNC`` (ext2/3/4,
xfs, btrfs) one ``pwritev`` with that flag writes and syncs the batch; elsewhere (FUSE) a
write and then an fdatasync. Either way the segment holds every record, in order, at the
offsets the flushes left (the segment is preallocated: records overwrite zeros)."""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import pytest

from xdfs.common import files
from xdfs.editlog import segments
from xdfs.editlog.segments import FileJournal, read_segment_records
from xdfs.errors import StorageError
from xdfs.namenode.editlog.codec import encode_record
from xdfs.namenode.namespace.ops import LAYOUT_VERSION, MkdirOp


class SyncCalls:
    """The durable-write system calls a journal makes (and makes them)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[str] = []
        pwritev, fdatasync = os.pwritev, files.datasync

        def recording_pwritev(fd: int, buffers: Any, offset: int, flags: int = 0) -> int:
            self.calls.append("pwritev+dsync" if flags & files.RWF_DSYNC else "pwritev")
            return pwritev(fd, buffers, offset, flags)

        def recording_datasync(fd: int) -> None:
            self.calls.append("fdatasync")
            fdatasync(fd)

        monkeypatch.setattr(os, "pwritev", recording_pwritev)
        monkeypatch.setattr(files, "datasync", recording_datasync)
        monkeypatch.setattr(segments, "datasync", recording_datasync)


def write_records(current: Path, count: int) -> list[bytes]:
    journal = FileJournal(current, LAYOUT_VERSION, preallocate_bytes=1 << 20)
    journal.start_segment_sync(1)
    records = [encode_record(txid, MkdirOp(f"/d{txid}", 100 + txid, 0o755, "a", "g", txid))
               for txid in range(1, count + 1)]
    for record in records:
        journal.write_sync(record)
    journal.close_sync()
    return records


def segment_records(current: Path, count: int) -> list[bytes]:
    data, offsets = read_segment_records(current, 1, count, layout_version=LAYOUT_VERSION)
    return [data[a:b] for a, b in itertools.pairwise(offsets)]


@pytest.mark.parametrize(("honoured", "flush"), [
    pytest.param(True, "pwritev+dsync", id="one RWF_DSYNC write where honoured",
                 marks=pytest.mark.skipif(not hasattr(os, "pwritev"), reason="Linux's")),
    pytest.param(False, "fdatasync", id="a write then an fdatasync elsewhere"),
])
def test_a_flush_is_made_durable_as_its_file_system_allows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, honoured: bool, flush: str
) -> None:
    monkeypatch.setattr(segments, "honours_dsync_writes", lambda path: honoured)
    calls = SyncCalls(monkeypatch)
    records = write_records(tmp_path, 5)
    assert calls.calls[-5:] == [flush] * 5, calls.calls
    assert ("pwritev+dsync" in calls.calls) == honoured
    assert segment_records(tmp_path, 5) == records


def test_the_choice_follows_the_file_system_type() -> None:
    mountinfo = (
        "22 1 8:1 / / rw - ext4 /dev/vda rw\n"
        "40 22 0:40 / /mnt/lazy rw - fuse.lazyfs lazyfs rw\n"
    )
    assert files.file_system_type("/var/nn", mountinfo) == "ext4"
    assert files.file_system_type("/mnt/lazy/nn", mountinfo) == "fuse.lazyfs"
    assert "ext4" in files.DSYNC_FILE_SYSTEMS
    assert "fuse.lazyfs" not in files.DSYNC_FILE_SYSTEMS


def test_a_failed_durable_write_is_a_storage_error_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing_pwritev(fd: int, buffers: Any, offset: int, flags: int = 0) -> int:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "pwritev", failing_pwritev)
    path = tmp_path / "f"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        with pytest.raises(StorageError, match=r"write to .*f failed at byte 7: .*Input/output"):
            files.write_dsync(fd, b"abc", 7, path)
    finally:
        os.close(fd)


def test_a_short_dsync_write_is_finished_and_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    pwritev = os.pwritev

    def short_pwritev(fd: int, buffers: Any, offset: int, flags: int = 0) -> int:
        calls.append("pwritev")
        return pwritev(fd, [bytes(buffers[0])[:2]], offset, flags)

    def recording_datasync(fd: int) -> None:
        calls.append("fdatasync")

    monkeypatch.setattr(os, "pwritev", short_pwritev)
    monkeypatch.setattr(files, "datasync", recording_datasync)
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        files.write_dsync(fd, b"abcdef", 3, path)
    finally:
        os.close(fd)
    assert path.read_bytes() == b"\0\0\0abcdef"
    assert calls == ["pwritev", "fdatasync"]
