"""HdfsCLI (the ``hdfs`` package) against the gateway, with a delegation token
(``TokenClient``): upload, download and walk on new and existing paths, which depend on
HDFS's exception messages (``File does not exist`` tells ``upload`` the path is new)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.webhdfs.conftest import ALICE, ALICE_PW, WebCluster

hdfs = pytest.importorskip("hdfs")


@pytest.fixture(scope="module")
def client(web: WebCluster) -> Any:

    token = web.call("GET", "/", "GETDELEGATIONTOKEN", auth=(ALICE, ALICE_PW)).json()[
        "Token"]["urlString"]
    return hdfs.TokenClient(f"http://{web.http}", token, root="/")


def test_upload_download_and_walk(client: Any, web_dir: str, tmp_path: Path) -> None:
    from hdfs.util import HdfsError

    c = client
    local = tmp_path / "report.csv"
    local.write_bytes(b"a,b\n1,2\n")
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "one.txt").write_bytes(b"one")
    (tree / "sub" / "two.txt").write_bytes(b"two")

    # to a new path: the file is created there
    assert c.upload(f"{web_dir}/new.csv", str(local)) == f"{web_dir}/new.csv"
    with c.read(f"{web_dir}/new.csv") as reader:
        assert reader.read() == b"a,b\n1,2\n"
    # into an existing directory: under its own name
    c.makedirs(f"{web_dir}/dir")
    assert c.upload(f"{web_dir}/dir", str(local)) == f"{web_dir}/dir/report.csv"
    # onto an existing file: refused unless overwrite
    with pytest.raises(HdfsError, match="already exists"):
        c.upload(f"{web_dir}/new.csv", str(local))
    local.write_bytes(b"changed")
    c.upload(f"{web_dir}/new.csv", str(local), overwrite=True)
    # a directory tree, then walk it
    c.upload(f"{web_dir}/tree", str(tree))
    walked = {(path, tuple(dirs), tuple(files))
              for path, dirs, files in c.walk(f"{web_dir}/tree")}
    assert walked == {(f"{web_dir}/tree", ("sub",), ("one.txt",)),
                      (f"{web_dir}/tree/sub", (), ("two.txt",))}
    with pytest.raises(HdfsError, match="File does not exist"):
        list(c.walk(f"{web_dir}/missing"))
    # download to a new local path and into an existing local directory
    target = tmp_path / "back.csv"
    assert c.download(f"{web_dir}/new.csv", str(target)) == str(target)
    assert target.read_bytes() == b"changed"
    out = tmp_path / "out"
    out.mkdir()
    c.download(f"{web_dir}/tree", str(out))
    assert (out / "tree" / "sub" / "two.txt").read_bytes() == b"two"
    with pytest.raises(HdfsError, match="File does not exist"):
        c.download(f"{web_dir}/missing", str(tmp_path / "nothing"))
    with pytest.raises(HdfsError, match="already exists"):
        c.download(f"{web_dir}/new.csv", str(target))
