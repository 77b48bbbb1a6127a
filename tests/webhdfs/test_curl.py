"""curl (a separate process) against the gateway, as the WebHDFS documentation uses it:
``-L`` follows the redirects to the DataNodes, ``-u user:password`` sends HTTP Basic."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integration.conftest import ROOT, ROOT_PW
from tests.webhdfs.conftest import WebCluster

if shutil.which("curl") is None:
    pytest.fail("tests/webhdfs need curl on PATH", pytrace=False)


def curl(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["curl", "-sS", "--max-time", "60", *args], capture_output=True,
                          timeout=90)


def test_put_and_get_a_file_with_curl(web: WebCluster, web_dir: str, tmp_path: Path) -> None:
    local = tmp_path / "upload.bin"
    data = bytes(range(256)) * 1000
    local.write_bytes(data)
    url = f"{web.url}{web_dir}/up.bin"
    put = curl("-L", "-u", f"{ROOT}:{ROOT_PW}", "-X", "PUT", "-T", str(local),
               "-w", "%{http_code}", f"{url}?op=CREATE&overwrite=false")
    assert put.returncode == 0 and put.stdout.endswith(b"201"), put
    got = curl("-L", "-u", f"{ROOT}:{ROOT_PW}", f"{url}?op=OPEN&offset=1000&length=300")
    assert got.returncode == 0 and got.stdout == data[1000:1300]
    listed = curl("-u", f"{ROOT}:{ROOT_PW}", f"{web.url}{web_dir}?op=LISTSTATUS")
    statuses = json.loads(listed.stdout)["FileStatuses"]["FileStatus"]
    assert [(s["pathSuffix"], s["length"]) for s in statuses] == [("up.bin", len(data))]


def test_curl_sees_remote_exceptions(web: WebCluster, web_dir: str) -> None:
    missing = curl("-u", f"{ROOT}:{ROOT_PW}", "-w", "\n%{http_code}",
                   f"{web.url}{web_dir}/none?op=GETFILESTATUS")
    body, status = missing.stdout.rsplit(b"\n", 1)
    assert status == b"404"
    assert json.loads(body)["RemoteException"]["exception"] == "FileNotFoundException"
    anonymous = curl("-w", "\n%{http_code}", f"{web.url}{web_dir}?op=LISTSTATUS&user.name=root")
    body, status = anonymous.stdout.rsplit(b"\n", 1)
    assert status == b"401"
    assert json.loads(body)["RemoteException"]["exception"] == "SecurityException"
