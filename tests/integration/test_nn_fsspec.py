"""The fsspec file system (``xdfs://``) against a real NameNode (metadata operations).

The fsspec object runs its own event loop thread, so the checks run in a worker thread
while the in-process NameNode keeps serving on the test's loop."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Iterator
from typing import Any

import fsspec
import pytest

from xdfs.client.client import AsyncClient
from xdfs.client.fsspec_impl import XdfsFileSystem
from xdfs.errors import AuthenticationFailed
from xdfs.namenode.server import NameNode

from .conftest import ROOT, ROOT_PW, write_file


@pytest.fixture(autouse=True)
def _no_ambient_xdfs_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("XDFS_CONF", "XDFS_FS", "XDFS_USER", "XDFS_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    yield
    fsspec.AbstractFileSystem.clear_instance_cache()


def _open(address: str, **kwargs: Any) -> Any:
    return fsspec.filesystem(
        "xdfs", fs=f"xdfs://{address}", user=ROOT, password=ROOT_PW,
        skip_instance_cache=True, **kwargs,
    )


def test_registered_through_the_entry_point() -> None:
    assert fsspec.get_filesystem_class("xdfs") is XdfsFileSystem


async def test_fsspec_metadata_operations(nn: NameNode, root: AsyncClient) -> None:
    await root.mkdirs("/fs/data")
    await write_file(root, "/fs/data/blob", [300, 200])
    await asyncio.to_thread(_metadata_checks, nn.address)
    # fsspec's rm bypasses the trash
    assert not await root.exists("/user/root/.Trash")
    assert not await root.exists("/fs/tree")


def _metadata_checks(address: str) -> None:
    fs = _open(address)
    try:
        assert isinstance(fs, XdfsFileSystem)
        # mkdir creates parents and refuses an existing path
        fs.mkdir("/fs/tree/a/b")
        assert fs.isdir("/fs/tree/a") and fs.isdir("/fs/tree/a/b")
        with pytest.raises(FileExistsError):
            fs.mkdir("/fs/tree/a/b")
        with pytest.raises(FileNotFoundError):
            fs.mkdir("/fs/missing/x", create_parents=False)
        fs.makedirs("/fs/tree/a/b", exist_ok=True)
        with pytest.raises(FileExistsError):
            fs.makedirs("/fs/tree/a/b")
        fs.makedirs("/fs/tree/c/d/e")
        assert fs.isdir("/fs/tree/c/d/e")

        # touch, info
        fs.touch("/fs/tree/a/f")
        info = fs.info("/fs/tree/a/f")
        assert info["name"] == "/fs/tree/a/f" and info["type"] == "file" and info["size"] == 0
        assert (info["owner"], info["mode"], info["replication"]) == (ROOT, 0o644, 2)
        with pytest.raises(FileExistsError):
            fs.makedirs("/fs/tree/a/f", exist_ok=True)  # a file is in the way
        assert fs.info("/fs/tree/a")["type"] == "directory"
        assert fs.info(f"xdfs://{address}/fs/tree/a/")["name"] == "/fs/tree/a"
        blob = fs.info("/fs/data/blob")
        assert (blob["size"], blob["type"]) == (500, "file")
        with pytest.raises(FileNotFoundError):
            fs.info("/fs/missing")
        assert fs.size("/fs/data/blob") == 500
        assert isinstance(fs.modified("/fs/tree/a/f"), dt.datetime)

        # touch of an existing file without truncation updates its modification time
        before = fs.info("/fs/tree/a/f")["mtime"]
        fs.client.set_times("/fs/tree/a/f", mtime_ms=1_000)
        fs.touch("/fs/tree/a/f", truncate=False)
        assert fs.info("/fs/tree/a/f")["mtime"] >= before
        fs.client.set_times("/fs/data/blob", mtime_ms=1_000)
        fs.touch("/fs/data/blob", truncate=False)
        assert fs.info("/fs/data/blob")["mtime"] > 1.0 and fs.size("/fs/data/blob") == 500

        # ls with and without detail
        assert fs.ls("/fs/tree/a", detail=False) == ["/fs/tree/a/b", "/fs/tree/a/f"]
        detail = fs.ls("/fs/tree/a", detail=True)
        assert [(e["name"], e["type"]) for e in detail] == [
            ("/fs/tree/a/b", "directory"), ("/fs/tree/a/f", "file"),
        ]
        assert fs.ls(f"xdfs://{address}/fs/tree", detail=False) == ["/fs/tree/a", "/fs/tree/c"]
        with pytest.raises(FileNotFoundError):
            fs.ls("/fs/missing")

        # exists / isdir / isfile
        assert fs.exists("/fs/tree/a/f") and not fs.exists("/fs/tree/nope")
        assert fs.isfile("/fs/tree/a/f") and not fs.isfile("/fs/tree/a")
        assert fs.isdir("/fs/tree/a") and not fs.isdir("/fs/tree/a/f")
        assert not fs.isdir("/fs/tree/nope") and not fs.isfile("/fs/tree/nope")

        # the generic helpers built on ls/info work
        assert fs.find("/fs/tree") == ["/fs/tree/a/f"]
        assert sorted(fs.find("/fs/tree", withdirs=True)) == [
            "/fs/tree", "/fs/tree/a", "/fs/tree/a/b", "/fs/tree/a/f", "/fs/tree/c", "/fs/tree/c/d",
            "/fs/tree/c/d/e",
        ]
        assert fs.glob("/fs/*/a/f") == ["/fs/tree/a/f"]
        assert fs.du("/fs/data") == 500

        # mv: rename, and into an existing directory
        fs.mv("/fs/tree/a/f", "/fs/tree/a/g")
        assert not fs.exists("/fs/tree/a/f") and fs.isfile("/fs/tree/a/g")
        fs.mv("/fs/tree/a/g", "/fs/tree/c")
        assert fs.isfile("/fs/tree/c/g")
        with pytest.raises(FileNotFoundError):
            fs.mv("/fs/tree/nope", "/fs/tree/x")

        # rm: non-recursive refuses a non-empty directory; recursive removes it all
        with pytest.raises(OSError):
            fs.rm("/fs/tree/c")
        assert fs.exists("/fs/tree/c/g")
        fs.rm("/fs/tree/c/g")
        assert not fs.exists("/fs/tree/c/g")
        fs.rmdir("/fs/tree/c/d/e")
        assert not fs.exists("/fs/tree/c/d/e")
        with pytest.raises(FileNotFoundError):
            fs.rm("/fs/tree/nope")
        fs.rm("/fs/tree", recursive=True)
        assert not fs.exists("/fs/tree") and not fs.exists("/fs/tree/a/b")
    finally:
        fs.client.close()


async def test_fsspec_url_and_credentials(nn: NameNode, root: AsyncClient) -> None:
    await root.add_user("alice", "alice-pw", ["staff"])
    await root.mkdirs("/private", mode=0o700)
    await asyncio.to_thread(_url_checks, nn.address)


def _url_checks(address: str) -> None:
    # the file system comes from the URL
    fs, path = fsspec.core.url_to_fs(
        f"xdfs://{address}/private", user=ROOT, password=ROOT_PW, skip_instance_cache=True
    )
    try:
        assert path == "/private" and fs.isdir(path)
    finally:
        fs.client.close()
    # another user's permissions apply; a wrong password fails
    alice = fsspec.filesystem(
        "xdfs", fs=f"xdfs://{address}", user="alice", password="alice-pw",
        skip_instance_cache=True,
    )
    try:
        with pytest.raises(PermissionError):
            alice.ls("/private")
        with pytest.raises(PermissionError):
            alice.mkdir("/private/x")
        alice.touch("/tmp/alice-file")
        assert alice.info("/tmp/alice-file")["owner"] == "alice"
    finally:
        alice.client.close()
    wrong = fsspec.filesystem(
        "xdfs", fs=f"xdfs://{address}", user="alice", password="nope", skip_instance_cache=True
    )
    try:
        with pytest.raises(AuthenticationFailed):
            wrong.ls("/")
    finally:
        wrong.client.close()
