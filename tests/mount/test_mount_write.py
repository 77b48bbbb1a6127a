"""``xdfs mount``, write side: ``cp``, ``cp -a``, ``tar x``, ``mv`` and Python's ``open()``
make the files the cluster then holds; what xdfs cannot do is refused with its errno and
leaves the data as it was."""

from __future__ import annotations

import ctypes
import errno
import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.datapath.conftest import LiveCluster, payload
from tests.mount.conftest import Mount
from xdfs.client.client import Client

RENAME_NOREPLACE = 1


def run(*command: str, cwd: Path | None = None) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return done.stdout


def tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root``: a file's bytes, None for a directory."""
    found: dict[str, bytes | None] = {}
    for path in sorted(root.rglob("*")):
        found[str(path.relative_to(root))] = None if path.is_dir() else path.read_bytes()
    return found


def make_tree(root: Path) -> None:
    (root / "a/b").mkdir(parents=True)
    (root / "top.txt").write_bytes(b"top\n")
    (root / "a/empty").write_bytes(b"")
    (root / "a/b/big.bin").write_bytes(payload(2 * 1024 * 1024 + 5, seed=7))
    (root / "a/b/small").write_bytes(payload(200 * 1024, seed=8))
    os.chmod(root / "a/b/small", 0o640)


def test_cp_tar_and_mv_make_the_same_tree(client: Client, mount: Mount, base: str,
                                          tmp_path: Path) -> None:
    local = tmp_path / "src"
    make_tree(local)
    root = mount.path / base.lstrip("/")
    run("cp", "-r", str(local), str(root / "cp"))
    run("cp", "-a", str(local), str(root / "cpa"))
    archive = tmp_path / "t.tar"
    run("tar", "-cf", str(archive), "-C", str(local), ".")
    (root / "tar").mkdir()
    run("tar", "-xf", str(archive), "-C", str(root / "tar"))
    for copy in ("cp", "cpa", "tar"):
        assert tree(root / copy) == tree(local), copy
        assert client.read_file(f"{base}/{copy}/a/b/big.bin") == (
            local / "a/b/big.bin").read_bytes()
    assert os.stat(root / "cpa/a/b/small").st_mode & 0o777 == 0o640  # cp -a kept modes
    assert client.stat(f"{base}/cpa/a/b/small").mode == 0o640
    local_mtime = int(os.stat(local / "top.txt").st_mtime)
    assert int(os.stat(root / "cpa/top.txt").st_mtime) == local_mtime  # and times
    run("mv", str(root / "cp"), str(root / "moved"))
    assert not (root / "cp").exists() and tree(root / "moved") == tree(local)
    assert client.exists(f"{base}/moved/a/b/big.bin")
    run("mv", str(root / "moved/top.txt"), str(root / "tar/top.txt"))  # replaces a file
    assert client.read_file(f"{base}/tar/top.txt") == b"top\n"
    assert run("diff", "-r", str(local / "a"), str(root / "tar/a")) == ""


def test_open_calls(client: Client, mount: Mount, base: str) -> None:
    root = mount.path / base.lstrip("/")
    path = root / "f"
    with open(path, "wb") as out:  # a sequential new file, in 1 MiB-ish writes
        for i in range(5):
            out.write(payload(300 * 1024, seed=i))
    expected = b"".join(payload(300 * 1024, seed=i) for i in range(5))
    assert client.read_file(f"{base}/f") == expected  # complete once close returned
    with open(path, "ab") as out:
        out.write(b"appended")
    assert client.read_file(f"{base}/f") == expected + b"appended"
    with open(path, "wb") as out:  # O_TRUNC: a rewrite
        out.write(b"new")
    assert client.read_file(f"{base}/f") == b"new"
    assert path.read_bytes() == b"new"
    fd = os.open(path, os.O_RDWR)  # in place: refused, nothing changed
    try:
        with pytest.raises(OSError) as raised:
            os.pwrite(fd, b"X", 1)
        assert raised.value.errno == errno.EOPNOTSUPP
    finally:
        os.close(fd)
    assert client.read_file(f"{base}/f") == b"new"
    with open(path, "r+b") as out:  # at the end of an existing file: an append
        out.seek(3)
        out.write(b"+more")
    assert path.read_bytes() == b"new+more"
    with pytest.raises(OSError) as raised:
        os.link(path, root / "hard")
    assert raised.value.errno == errno.EPERM
    os.truncate(path, 3)
    assert client.read_file(f"{base}/f") == b"new"
    os.truncate(path, 0)
    assert path.read_bytes() == b""
    with pytest.raises(OSError) as raised:
        os.truncate(path, 10)
    assert raised.value.errno == errno.EOPNOTSUPP


def test_metadata_calls(client: Client, mount: Mount, base: str) -> None:
    root = mount.path / base.lstrip("/")
    (root / "d").mkdir()
    (root / "d/x").write_bytes(b"x")
    os.chmod(root / "d/x", 0o600)
    assert client.stat(f"{base}/d/x").mode == 0o600
    os.utime(root / "d/x", (1_600_000_000, 1_600_000_000))
    assert client.stat(f"{base}/d/x").mtime_ms == 1_600_000_000_000
    os.chown(root / "d/x", 0, 0)  # root: the mount's user and group by name
    assert client.stat(f"{base}/d/x").owner == "root"
    with pytest.raises(OSError) as raised:
        os.chown(root / "d/x", 987654, -1)  # no local name to give the NameNode
    assert raised.value.errno == errno.EINVAL
    with pytest.raises(OSError) as raised:
        os.rmdir(root / "d")
    assert raised.value.errno == errno.ENOTEMPTY
    (root / "y").write_bytes(b"y")
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(root, os.O_RDONLY)
    try:
        result = libc.renameat2(fd, b"y", fd, b"d", RENAME_NOREPLACE)
        assert result == -1 and ctypes.get_errno() == errno.EEXIST
    finally:
        os.close(fd)
    os.rename(root / "y", root / "d/x")  # POSIX: replaces the file
    assert client.read_file(f"{base}/d/x") == b"y" and not client.exists(f"{base}/y")
    (root / "e1").mkdir()
    (root / "e2").mkdir()
    (root / "e1/inside").write_bytes(b"i")
    os.rename(root / "e1", root / "e2")  # a directory replaces an empty one
    assert client.read_file(f"{base}/e2/inside") == b"i" and not client.exists(f"{base}/e1")
    (root / "e3").mkdir()
    for src, dst, number in [(root / "e3", root / "e2", errno.ENOTEMPTY),
                             (root / "d/x", root / "e3", errno.EISDIR),
                             (root / "e3", root / "d/x", errno.ENOTDIR)]:
        with pytest.raises(OSError) as raised:
            os.rename(src, dst)
        assert raised.value.errno == number
    assert client.exists(f"{base}/e3") and client.read_file(f"{base}/d/x") == b"y"
    os.unlink(root / "d/x")  # into the trash (the cluster keeps one)
    assert not client.exists(f"{base}/d/x")
    assert client.read_file(f"/user/root/.Trash/Current{base}/d/x") == b"y"
    os.rmdir(root / "d")
    assert not client.exists(f"{base}/d")


def test_python_tarfile_and_textio(client: Client, mount: Mount, base: str) -> None:
    root = mount.path / base.lstrip("/")
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        for i in range(20):
            info = tarfile.TarInfo(f"t/{i}.txt")
            body = f"file {i}\n".encode() * 100
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    data.seek(0)
    with tarfile.open(fileobj=data) as tar:
        tar.extractall(root, filter="data")
    assert sorted(os.listdir(root / "t")) == sorted(f"{i}.txt" for i in range(20))
    assert client.read_file(f"{base}/t/7.txt") == b"file 7\n" * 100
    (root / "notes.txt").write_text("one\n")
    with open(root / "notes.txt", "a") as notes:
        notes.write("two\n")
    assert (root / "notes.txt").read_text() == "one\ntwo\n"


def test_fsync_second_writer_and_read_only(client: Client, live_cluster: LiveCluster,
                                           mount: Mount, base: str, tmp_path: Path) -> None:
    root = mount.path / base.lstrip("/")
    with open(root / "synced", "wb") as out:
        out.write(b"part one ")
        out.flush()
        os.fsync(out.fileno())  # on the DataNodes; the name comes at close
        with pytest.raises(OSError) as raised:
            os.open(root / "synced", os.O_WRONLY | os.O_APPEND)  # one writer per file
        assert raised.value.errno == errno.EBUSY
        out.write(b"part two")
    assert client.read_file(f"{base}/synced") == b"part one part two"
    ro = Mount(live_cluster, tmp_path / "ro", tmp_path / "ro.log", "ro").start()
    try:
        seen = ro.path / base.lstrip("/")
        assert (seen / "synced").read_bytes() == b"part one part two"
        for attempt in (lambda: (seen / "x").write_bytes(b"x"), (seen / "d").mkdir,
                        lambda: os.unlink(seen / "synced")):
            with pytest.raises(OSError) as raised:
                attempt()
            assert raised.value.errno == errno.EROFS
    finally:
        ro.stop()
    assert client.read_file(f"{base}/synced") == b"part one part two"


def test_git_clone_fsck_status(mount: Mount, base: str, tmp_path: Path) -> None:
    """git writes objects, packs, the index and refs through create + rename and lock
    files: a clone onto the mount is whole (fsck) and clean (status)."""
    origin = tmp_path / "origin"
    make_tree(origin)
    for command in (["git", "init", "-q"], ["git", "add", "-A"],
                    ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]):
        run(*command, cwd=origin)
    clone = mount.path / base.lstrip("/") / "clone"
    run("git", "clone", "-q", "--no-hardlinks", str(origin), str(clone))
    run("git", "fsck", "--full", cwd=clone)
    assert run("git", "status", "--porcelain", cwd=clone) == ""
    assert tree(clone / "a") == tree(origin / "a")


def test_pandas_and_pyarrow_on_mount_paths(client: Client, mount: Mount, base: str) -> None:
    pandas = pytest.importorskip("pandas")
    parquet = pytest.importorskip("pyarrow.parquet")
    root = mount.path / base.lstrip("/")
    frame = pandas.DataFrame({"n": range(10_000), "s": [f"row {i}" for i in range(10_000)]})
    frame.to_parquet(root / "t.parquet")
    frame.to_csv(root / "t.csv", index=False)
    assert parquet.read_table(root / "t.parquet").num_rows == 10_000
    assert pandas.read_csv(root / "t.csv").equals(frame)
    assert client.stat(f"{base}/t.parquet").length == os.stat(root / "t.parquet").st_size


def test_a_second_truncating_open_takes_over_an_unwritten_file(client: Client, mount: Mount,
                                                               base: str) -> None:
    path = mount.path / base.lstrip("/") / "f"
    first = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        with open(path, "wb") as second:  # opened again by path, as pandas does
            second.write(b"the content")
        with pytest.raises(OSError) as raised:
            os.write(first, b"late")
        assert raised.value.errno == errno.EBUSY
    finally:
        os.close(first)  # its empty file is dropped, not renamed over the content
    assert client.read_file(f"{base}/f") == b"the content"
    assert [e.path.rsplit("/", 1)[1] for e in client.list_dir(base)] == ["f"]


def test_renaming_a_file_being_written(client: Client, mount: Mount, base: str) -> None:
    root = mount.path / base.lstrip("/")
    (root / "sub").mkdir()
    with open(root / "draft", "wb") as out:
        out.write(b"text")
        out.flush()
        os.rename(root / "draft", root / "final")  # the same directory: named at close
        assert os.stat(root / "final").st_size == 4
        with pytest.raises(OSError) as raised:
            os.rename(root / "final", root / "sub/final")
        assert raised.value.errno == errno.EBUSY
    assert client.read_file(f"{base}/final") == b"text"
    assert sorted(os.listdir(root)) == ["final", "sub"]
