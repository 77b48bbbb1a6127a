"""The power-loss layer as processes see it: real system calls on the FUSE mount, a real
power cut, and the mount showing only what was durable (xdfs.testing.lazyfs)."""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from xdfs.common.files import DirLock, atomic_write, fsync_dir
from xdfs.common.process import ProcessGroup, ServerProcess
from xdfs.testing.lazyfs import LazyFS

pytestmark = pytest.mark.powerloss


# A writer doing what careless and careful programs do, then waiting to be killed.
WRITER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from xdfs.common.files import atomic_write
    d = Path(sys.argv[1])
    atomic_write(d / "careful", b"written the right way")
    (d / "config.tmp").write_bytes(b"new config")  # replaced without an fsync of the data
    os.replace(d / "config.tmp", d / "config")
    dfd = os.open(d, os.O_RDONLY)
    os.fsync(dfd)
    os.close(dfd)
    (d / "no-fsync").write_bytes(b"page cache only")
    fd = os.open(d / "fsync-no-dirsync", os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"data durable, name not")
    os.fsync(fd)
    os.close(fd)
    print("written", flush=True)
    time.sleep(600)
""")


def start_writer(processes: ProcessGroup, directory: Path) -> ServerProcess:
    proc = ServerProcess([sys.executable, "-c", WRITER, str(directory)],
                         log_path=processes.base_dir / "writer.log", ready_pattern="written")
    return processes.start(proc, 60.0)


def contents(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def prepare(directory: Path) -> None:
    directory.mkdir()
    atomic_write(directory / "config", b"old config")
    fsync_dir(directory.parent)


def test_sigkill_keeps_what_a_power_cut_drops(
    lazyfs: LazyFS, processes: ProcessGroup
) -> None:
    killed, cut = lazyfs.path / "killed", lazyfs.path / "cut"
    for directory in (killed, cut):
        prepare(directory)
    start_writer(processes, killed).kill()  # SIGKILL: the page cache keeps everything
    assert contents(killed) == {
        "careful": b"written the right way", "config": b"new config",
        "fsync-no-dirsync": b"data durable, name not", "no-fsync": b"page cache only",
    }
    proc = start_writer(processes, cut)
    dropped = lazyfs.power_cut(proc)
    assert contents(cut) == {
        "careful": b"written the right way",
        "config": b"",  # renamed over the old one durably, its data never synced
    }
    assert dropped.dirty_files >= 2 and dropped.names >= 2  # the killed writer's files too


def test_open_files_and_locks_across_a_cut(lazyfs: LazyFS) -> None:
    lock = DirLock(lazyfs.path / "store")
    lock.lock()  # flock works on the mount (the kernel keeps the locks)
    with pytest.raises(Exception, match="locked by pid"):
        DirLock(lazyfs.path / "store").lock()
    fsync_dir(lazyfs.path)
    f = lazyfs.path / "store" / "log"
    fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(fd, b"one\n")
    os.fsync(fd)
    fsync_dir(f.parent)
    os.write(fd, b"two\n")
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, b"three\n")  # O_APPEND: at the end whatever the offset
    assert f.read_bytes() == b"one\ntwo\nthree\n"
    assert lazyfs.pending().dirty_files == 1
    lazyfs.power_cut()
    with pytest.raises(OSError) as raised:  # a handle from before the cut is dead
        os.write(fd, b"after\n")
    assert raised.value.errno in (errno.ENOTCONN, errno.EIO, errno.EBADF)
    with contextlib.suppress(OSError):  # closed, with the same error
        os.close(fd)
    with contextlib.suppress(OSError):
        lock.unlock()
    assert f.read_bytes() == b"one\n"
    DirLock(lazyfs.path / "store").lock()  # nobody holds the lock after the cut


def test_hard_links_renamed_directories_and_unlinked_open_files(lazyfs: LazyFS) -> None:
    top = lazyfs.path
    (top / "a").mkdir()
    atomic_write(top / "a" / "f", b"f")
    os.link(top / "a" / "f", top / "a" / "g")
    fsync_dir(top / "a")
    fsync_dir(top)
    assert (top / "a" / "g").stat().st_nlink == 2
    (top / "b").mkdir()
    os.rename(top / "a", top / "b" / "a")  # neither parent synced: reverted
    held = os.open(top / "b" / "a" / "f", os.O_RDWR)
    os.unlink(top / "b" / "a" / "f")
    os.write(held, b"F")
    os.fsync(held)  # data of a file whose unlink is not durable
    assert os.pread(held, 10, 0) == b"F"
    lazyfs.power_cut()
    with contextlib.suppress(OSError):  # closed, with "not connected"
        os.close(held)
    assert sorted(p.name for p in top.iterdir()) == ["a"]
    assert (top / "a" / "f").read_bytes() == b"F" == (top / "a" / "g").read_bytes()


def test_large_files_and_sync_throughput(lazyfs: LazyFS) -> None:
    """Not a timing assertion: prints what crash tests can expect of the layer."""
    data = os.urandom(8 << 20)
    started = time.monotonic()
    path = lazyfs.path / "big"
    with open(path, "wb") as f:
        for i in range(0, len(data), 1 << 20):
            f.write(data[i : i + (1 << 20)])
        f.flush()
        os.fsync(f.fileno())
    written = time.monotonic() - started
    fsync_dir(lazyfs.path)
    lazyfs.power_cut()
    started = time.monotonic()
    assert path.read_bytes() == data
    read = time.monotonic() - started
    fd = os.open(lazyfs.path / "small", os.O_WRONLY | os.O_CREAT, 0o644)
    started = time.monotonic()
    for _ in range(200):
        os.write(fd, b"x" * 100)
        os.fdatasync(fd)
    syncs = time.monotonic() - started
    os.close(fd)
    print(f"\n8 MiB written+fsynced in {written:.2f} s, read after a cut in {read:.2f} s; "
          f"200 write+fdatasync in {syncs:.2f} s")
    statvfs = os.statvfs(lazyfs.path)
    assert statvfs.f_bsize > 0 and statvfs.f_blocks > 0


def test_unavailable_fuse_fails_with_a_clear_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from xdfs.testing.lazyfs import mount

    monkeypatch.setattr(mount, "FUSERMOUNT", "no-such-fusermount")
    assert "no-such-fusermount is not installed" in str(mount.fuse_unavailable_reason())
    with pytest.raises(RuntimeError, match="cannot mount the power-loss layer"):
        LazyFS(tmp_path / "b", tmp_path / "m").mount()
