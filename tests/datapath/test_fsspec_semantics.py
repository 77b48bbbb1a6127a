"""What the fsspec file system does beyond fsspec's abstract suites (test_fsspec_conformance):
the NameNode calls each operation costs, ``mv`` as the NameNode's rename (fsspec's own
``tests/abstract/mv.py`` checks, which it runs on the local file system only, here on xdfs),
transactions, exclusive and refused modes, and downloads into file objects and missing
directories."""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest

from tests.datapath.conftest import LIVE_BLOCK_BYTES, LiveCluster, payload
from xdfs.client.fsspec_impl import XdfsFileSystem
from xdfs.errors import AuthenticationFailed

pytestmark = pytest.mark.usefixtures("no_ambient_xdfs_env")


class Calls:
    """The NameNode calls a file system's client makes (by method name)."""

    def __init__(self, fs: XdfsFileSystem, monkeypatch: pytest.MonkeyPatch) -> None:
        self.names: list[str] = []
        rpc = fs.client.async_client.rpc
        call = rpc.call

        async def counted(method: Any, request: Any, **options: Any) -> Any:
            self.names.append(method.name)
            return await call(method, request, **options)

        monkeypatch.setattr(rpc, "call", counted)

    def take(self) -> list[str]:
        names, self.names = self.names, []
        return names


@pytest.fixture
def calls(xdfs: XdfsFileSystem, monkeypatch: pytest.MonkeyPatch) -> Calls:
    return Calls(xdfs, monkeypatch)


def test_one_namenode_call_per_metadata_operation(
    xdfs: XdfsFileSystem, xdfs_dir: str, calls: Calls
) -> None:
    """Issue 14 measured fsspec's mkdir making two calls: each of these makes one."""
    d = xdfs_dir
    xdfs.mkdir(f"{d}/a")
    assert calls.take() == ["mkdirs"]
    xdfs.makedirs(f"{d}/a", exist_ok=True)
    assert calls.take() == ["mkdirs"]
    xdfs.makedirs(f"{d}/b", exist_ok=False)
    assert calls.take() == ["mkdirs"]
    with pytest.raises(FileExistsError):
        xdfs.mkdir(f"{d}/a")
    assert calls.take() == ["mkdirs"]
    with pytest.raises(FileExistsError):
        xdfs.makedirs(f"{d}/a")
    assert calls.take() == ["mkdirs"]
    xdfs.makedirs(f"{d}/x/y/z")  # missing parents: the second call makes them
    assert calls.take() == ["mkdirs", "mkdirs"] and xdfs.isdir(f"{d}/x/y/z")
    calls.take()
    for check in (xdfs.exists, xdfs.info, xdfs.isdir, xdfs.isfile):
        check(f"{d}/a")
        assert calls.take() == ["stat"], check
    assert not xdfs.exists(f"{d}/missing")
    assert calls.take() == ["stat"]
    xdfs.touch(f"{d}/file")
    calls.take()
    assert not xdfs.exists(f"{d}/file/child") and not xdfs.isdir(f"{d}/file/child")
    assert calls.take() == ["stat", "stat"]
    xdfs.mv(f"{d}/a", f"{d}/c")
    assert calls.take() == ["rename"]


def test_exists_raises_what_is_not_absence(live_cluster: LiveCluster) -> None:
    """A refused login must not read as "no such file"."""
    wrong = XdfsFileSystem(fs=live_cluster.url, user="root", password="wrong",
                           skip_instance_cache=True)
    try:
        with pytest.raises(AuthenticationFailed):
            wrong.exists("/")
    finally:
        wrong.client.close()


def test_mv_is_a_rename(xdfs: XdfsFileSystem, xdfs_dir: str, calls: Calls) -> None:
    d = xdfs_dir
    data = payload(3 * LIVE_BLOCK_BYTES, seed=7)
    xdfs.pipe_file(f"{d}/tree/sub/big", data)
    inode = xdfs.info(f"{d}/tree/sub/big")["inode_id"]
    calls.take()
    # a directory moves whole, whatever ``recursive`` says, and nothing is copied
    xdfs.mv(f"{d}/tree", f"{d}/moved")
    assert calls.take() == ["rename"]
    moved = xdfs.info(f"{d}/moved/sub/big")
    assert (moved["inode_id"], moved["size"]) == (inode, len(data))
    assert not xdfs.exists(f"{d}/tree")
    # into an existing directory, and into a new one named with a trailing slash
    xdfs.mkdir(f"{d}/into")
    xdfs.mv(f"{d}/moved", f"{d}/into")
    assert xdfs.cat_file(f"{d}/into/moved/sub/big") == data
    xdfs.mv(f"{d}/into/moved/sub/big", f"{d}/new/")
    assert xdfs.cat_file(f"{d}/new/big") == data
    # a file in the way is replaced, as local mv does; a directory is not
    xdfs.pipe_file(f"{d}/other", b"old")
    xdfs.mv(f"{d}/new/big", f"{d}/other")
    assert xdfs.cat_file(f"{d}/other") == data and not xdfs.exists(f"{d}/new/big")
    xdfs.mkdir(f"{d}/into/new")
    with pytest.raises(FileExistsError):
        xdfs.mv(f"{d}/new", f"{d}/into")
    # several sources (a glob, a list) go into the target directory
    for name in ("p1.csv", "p2.csv", "keep.txt"):
        xdfs.pipe_file(f"{d}/many/{name}", name.encode())
    xdfs.mv(f"{d}/many/*.csv", f"{d}/csv")
    assert xdfs.ls(f"{d}/csv", detail=False) == [f"{d}/csv/p1.csv", f"{d}/csv/p2.csv"]
    xdfs.mv([f"{d}/csv/p1.csv", f"{d}/many/keep.txt"], [f"{d}/one", f"{d}/two"])
    assert xdfs.cat_file(f"{d}/one") == b"p1.csv" and xdfs.cat_file(f"{d}/two") == b"keep.txt"


def test_mv_errors_as_fsspecs_local_mv_tests(
    xdfs: XdfsFileSystem, xdfs_dir: str, live_cluster: LiveCluster
) -> None:
    """fsspec.tests.abstract.mv, run there on the local file system: a missing target
    directory is FileNotFoundError; a read-only one PermissionError, nothing moved."""
    d = xdfs_dir
    xdfs.pipe_file(f"{d}/source_file.txt", b"content")
    with pytest.raises(FileNotFoundError):
        xdfs.mv(f"{d}/source_file.txt", f"{d}/non_existent_directory/destination_file.txt")
    user = f"u{uuid.uuid4().hex[:8]}"
    xdfs.client.add_user(user, "user-pw")
    xdfs.client.set_owner(d, owner=user)
    xdfs.client.set_owner(f"{d}/source_file.txt", owner=user)
    xdfs.mkdir(f"{d}/protected_directory")
    xdfs.client.set_permission(f"{d}/protected_directory", 0o555)
    fs = XdfsFileSystem(fs=live_cluster.url, user=user, password="user-pw",
                        skip_instance_cache=True)
    try:
        for recursive in (True, False):
            with pytest.raises(PermissionError):
                fs.mv(f"{d}/source_file.txt", f"{d}/protected_directory/destination_file.txt",
                      recursive=recursive)
            assert not xdfs.exists(f"{d}/protected_directory/destination_file.txt")
            assert xdfs.cat_file(f"{d}/source_file.txt") == b"content"
    finally:
        fs.client.close()


def test_open_modes(xdfs: XdfsFileSystem, xdfs_dir: str) -> None:
    d = xdfs_dir
    with xdfs.open(f"{d}/f", "xb") as fh:
        fh.write(b"first")
    with pytest.raises(FileExistsError):
        xdfs.open(f"{d}/f", "xb")
    with pytest.raises(FileExistsError):
        xdfs.pipe_file(f"{d}/f", b"second", mode="create")
    assert xdfs.cat_file(f"{d}/f") == b"first"
    # the file exists, under construction, from the moment it is opened
    fh = xdfs.open(f"{d}/g", "wb")
    assert xdfs.exists(f"{d}/g")
    fh.write(b"g")
    fh.close()
    assert xdfs.cat_file(f"{d}/g") == b"g"
    with pytest.raises(IsADirectoryError):
        xdfs.open(d, "wb")
    with xdfs.open(f"{d}/f", "ab") as appended:  # through HDFS-style append
        appended.write(b"+more")
    assert xdfs.cat_file(f"{d}/f") == b"first+more"
    with pytest.raises(ValueError, match="'ab'"):
        xdfs.open(f"{d}/f", "r+b")
    # text mode and a replication of one's own
    with xdfs.open(f"{d}/t.txt", "w", replication=3) as text:
        text.write("héllo\n")
    assert xdfs.cat_file(f"{d}/t.txt") == "héllo\n".encode()
    assert xdfs.info(f"{d}/t.txt")["replication"] == 3
    # touch truncates, or only touches
    xdfs.touch(f"{d}/g", truncate=False)
    assert xdfs.cat_file(f"{d}/g") == b"g"
    xdfs.touch(f"{d}/g")
    assert xdfs.cat_file(f"{d}/g") == b""


def test_transactions(xdfs: XdfsFileSystem, xdfs_dir: str) -> None:
    """Files written in a transaction appear under their names only when it commits."""
    d = xdfs_dir
    xdfs.pipe_file(f"{d}/old", b"old")
    with xdfs.transaction:
        with xdfs.open(f"{d}/new", "wb") as fh:
            fh.write(b"new")
        with xdfs.open(f"{d}/old", "wb") as fh:
            fh.write(b"replaced")
        assert not xdfs.exists(f"{d}/new") and xdfs.cat_file(f"{d}/old") == b"old"
    assert xdfs.cat_file(f"{d}/new") == b"new" and xdfs.cat_file(f"{d}/old") == b"replaced"
    assert xdfs.ls(d, detail=False) == [f"{d}/new", f"{d}/old"]

    with pytest.raises(RuntimeError), xdfs.transaction:
        with xdfs.open(f"{d}/never", "wb") as fh:
            fh.write(b"x")
        raise RuntimeError("abandon")
    assert xdfs.ls(d, detail=False) == [f"{d}/new", f"{d}/old"]
    with pytest.raises(FileExistsError), xdfs.transaction:
        xdfs.open(f"{d}/old", "xb")


def test_copies(xdfs: XdfsFileSystem, xdfs_dir: str, tmp_path: Path) -> None:
    d = xdfs_dir
    data = payload(2 * LIVE_BLOCK_BYTES + 11, seed=3)
    with xdfs.open(f"{d}/src", "wb", replication=3) as fh:
        fh.write(data)
    xdfs.cp_file(f"{d}/src", f"{d}/deep/new/copy")
    copy = xdfs.info(f"{d}/deep/new/copy")
    assert xdfs.cat_file(f"{d}/deep/new/copy") == data and copy["replication"] == 3
    xdfs.cp_file(f"{d}/src", f"{d}/src")  # onto itself: nothing to do, nothing lost
    assert xdfs.cat_file(f"{d}/src") == data
    # downloads make missing local directories and leave no temporary files
    xdfs.get(f"{d}/src", str(tmp_path / "a" / "b" / "local"))
    assert (tmp_path / "a" / "b" / "local").read_bytes() == data
    assert [p.name for p in (tmp_path / "a" / "b").iterdir()] == ["local"]
    sink = io.BytesIO()
    xdfs.get_file(f"{d}/src", sink)
    assert sink.getvalue() == data
    # uploads: a file is replaced, or refused with mode="create"
    (tmp_path / "up").write_bytes(b"up")
    xdfs.put_file(str(tmp_path / "up"), f"{d}/src")
    assert xdfs.cat_file(f"{d}/src") == b"up"
    with pytest.raises(FileExistsError):
        xdfs.put_file(str(tmp_path / "up"), f"{d}/src", mode="create")


def test_failed_upload_leaves_nothing(
    xdfs: XdfsFileSystem, xdfs_dir: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An upload that fails half way deletes what it wrote."""
    local = tmp_path / "big"
    local.write_bytes(payload(3 * LIVE_BLOCK_BYTES, seed=5))
    seen: list[int] = []

    class Progress(fsspec.callbacks.Callback):  # type: ignore[misc]
        def relative_update(self, inc: int = 1) -> None:
            seen.append(inc)
            raise OSError("local disk failed")

    with pytest.raises(OSError, match="local disk failed"):
        xdfs.put_file(str(local), f"{xdfs_dir}/big", callback=Progress())
    assert seen and not xdfs.exists(f"{xdfs_dir}/big")


@pytest.fixture
def url_fs(live_cluster: LiveCluster) -> Iterator[Any]:
    fs, _ = fsspec.core.url_to_fs(live_cluster.url + "/", **live_cluster.storage_options)
    yield fs


def test_urls_and_compression(live_cluster: LiveCluster, xdfs_dir: str, url_fs: Any) -> None:
    url = f"{live_cluster.url}{xdfs_dir}/notes.txt.gz"
    with fsspec.open(url, "wt", compression="infer", **live_cluster.storage_options) as fh:
        fh.write("line\n" * 1000)
    with fsspec.open(url, "rt", compression="infer", **live_cluster.storage_options) as fh:
        assert fh.read() == "line\n" * 1000
    assert url_fs.cat_file(f"{xdfs_dir}/notes.txt.gz")[:2] == b"\x1f\x8b"  # gzip on xdfs
