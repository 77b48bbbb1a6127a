"""fsspec's own ``webhdfs`` file system (fsspec.implementations.webhdfs, a WebHDFS client
nobody here wrote) against the gateway: every part of it that maps to operations xdfs
has. Its writes go through CREATE then APPEND; most files are written here through the
REST CREATE, one through fsspec's own writer."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fsspec.implementations.webhdfs import WebHDFS

from tests.integration.conftest import ROOT, ROOT_PW
from tests.webhdfs.conftest import ALICE, ALICE_PW, BLOCK_BYTES, WebCluster
from tests.webhdfs.test_rest import DATA, hdfs_checksum, put_file


def webhdfs(web: WebCluster, **kwargs: object) -> WebHDFS:
    host, port = web.http.rsplit(":", 1)
    return WebHDFS(host, port=int(port), skip_instance_cache=True, **kwargs)


@pytest.fixture
def fs(web: WebCluster) -> Iterator[WebHDFS]:
    yield webhdfs(web, user=ROOT, password=ROOT_PW)


def test_metadata_operations(fs: WebHDFS, web: WebCluster, web_dir: str) -> None:
    fs.mkdir(f"{web_dir}/a/b")
    put_file(web, f"{web_dir}/a/f", DATA)
    assert fs.ls(f"{web_dir}/a") == [f"{web_dir}/a/b", f"{web_dir}/a/f"]
    info = fs.info(f"{web_dir}/a/f")
    assert (info["type"], info["size"]) == ("file", len(DATA))
    assert fs.info(f"{web_dir}/a/b")["type"] == "directory"
    assert fs.exists(f"{web_dir}/a/f") and not fs.exists(f"{web_dir}/nope")
    assert fs.isdir(f"{web_dir}/a") and fs.isfile(f"{web_dir}/a/f")
    assert sorted(fs.find(web_dir)) == [f"{web_dir}/a/f"]
    assert fs.du(web_dir) == len(DATA)
    summary = fs.content_summary(web_dir)
    assert (summary["fileCount"], summary["directoryCount"]) == (1, 3)
    fs.mv(f"{web_dir}/a/f", f"{web_dir}/g")
    assert fs.ls(web_dir) == [f"{web_dir}/a", f"{web_dir}/g"]
    fs.chmod(f"{web_dir}/g", "600")
    fs.chown(f"{web_dir}/g", owner=ALICE, group="staff")
    info = fs.info(f"{web_dir}/g")
    assert (info["permission"], info["owner"], info["group"]) == ("600", ALICE, "staff")
    fs.set_replication(f"{web_dir}/g", 1)
    assert fs.info(f"{web_dir}/g")["replication"] == 1
    assert fs.modified(f"{web_dir}/g").year >= 2024
    fs.rm(f"{web_dir}/a", recursive=True)
    assert fs.ls(web_dir) == [f"{web_dir}/g"]
    with pytest.raises(FileNotFoundError):
        fs.info(f"{web_dir}/a")


def test_reads(fs: WebHDFS, web: WebCluster, web_dir: str) -> None:
    path = f"{web_dir}/f"
    put_file(web, path, DATA)
    assert fs.cat(path) == DATA
    assert fs.cat_file(path, start=BLOCK_BYTES - 3, end=BLOCK_BYTES + 5) == DATA[
        BLOCK_BYTES - 3:BLOCK_BYTES + 5]
    with fs.open(path, "rb", block_size=10_000) as f:
        f.seek(2 * BLOCK_BYTES + 11)
        assert f.read(50_000) == DATA[2 * BLOCK_BYTES + 11:2 * BLOCK_BYTES + 50_011]
        f.seek(-7, 2)
        assert f.read() == DATA[-7:]
    assert fs.head(path, 100) == DATA[:100]
    assert fs.tail(path, 100) == DATA[-100:]


def test_checksum_home_and_tokens(fs: WebHDFS, web: WebCluster, web_dir: str) -> None:
    put_file(web, f"{web_dir}/f", DATA)
    algorithm, hexdigest = hdfs_checksum(DATA, BLOCK_BYTES)
    assert fs.ukey(f"{web_dir}/f") == {"algorithm": algorithm, "bytes": hexdigest,
                                       "length": 28}
    assert fs.home_directory() == f"/user/{ROOT}"
    alice = webhdfs(web, user=ALICE, password=ALICE_PW)
    token = alice.get_delegation_token()
    by_token = webhdfs(web, token=token)
    assert by_token.home_directory() == f"/user/{ALICE}"
    assert by_token.cat(f"{web_dir}/f") == DATA


def test_refusals_reach_fsspec_as_python_errors(fs: WebHDFS, web: WebCluster,
                                                web_dir: str) -> None:
    fs.mkdir(f"{web_dir}/private")
    fs.chmod(f"{web_dir}/private", "700")
    alice = webhdfs(web, user=ALICE, password=ALICE_PW)
    with pytest.raises(PermissionError):
        alice.ls(f"{web_dir}/private")
    with pytest.raises(PermissionError):
        alice.mkdir(f"{web_dir}/private/x")
    wrong = webhdfs(web, user=ALICE, password="wrong")
    with pytest.raises(PermissionError):
        wrong.ls(web_dir)
    anonymous = webhdfs(web, user=ALICE)  # user.name only: not trusted by default
    with pytest.raises(PermissionError):
        anonymous.ls(web_dir)
    with pytest.raises(FileNotFoundError):
        fs.cat(f"{web_dir}/none")
    put_file(web, f"{web_dir}/f", b"abc")
    with fs.open(f"{web_dir}/w", "wb") as f:  # CREATE, then APPEND per block of data
        f.write(b"through append")
    assert fs.cat(f"{web_dir}/w") == b"through append"
