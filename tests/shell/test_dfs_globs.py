"""``xdfs dfs`` against a real cluster (a NameNode and three DataNodes): Hadoop globs in
every command taking xdfs paths (issue 42 item 1), and the honesty of -put and -get
(issue 37 items 11-13)."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.datapath.conftest import LiveCluster
from tests.shell.test_dfs_parity import ROOT_ENV, Dfs
from xdfs.client import transfer
from xdfs.client.client import Client
from xdfs.errors import NotFound


def _codes(results: list[tuple[int, str, str]]) -> list[int]:
    return [code for code, _out, _err in results]


def test_globs_in_every_path_command(client: Client, dfs: Dfs, base: str, tmp_path: Path
                                     ) -> None:
    for name in ("a.log", "b.log", "c.txt", "keep/d.log", "x{y}"):
        client.write_file(f"{base}/{name}", name.encode())
    results = dfs.run(
        dfs("-ls", f"{base}/*.log"),                       # 0
        dfs("-stat", "%n", f"{base}/[ab].*"),              # 1
        dfs("-count", f"{base}/{{a,c}}.*"),                # 2
        dfs("-du", "-s", f"{base}/?.log"),                 # 3
        dfs("-chmod", "-R", "600", f"{base}/k*"),          # 4
        dfs("-test", "-e", f"{base}/*.txt"),               # 5
        dfs("-test", "-e", f"{base}/*.nothing"),           # 6
        dfs("-ls", f"{base}/*.nothing"),                   # 7
        dfs("-rm", "-f", f"{base}/*.nothing"),             # 8
        dfs("-stat", "%n", f"{base}/x\\{{y\\}}"),          # 9: an escaped brace is itself
        dfs("-ls", f"{base}/[ab"),                         # 10: a bad pattern
        dfs("-mkdir", f"{base}/moved"),                    # 11
        dfs("-mv", f"{base}/*.log", f"{base}/m*"),         # 12: the destination globbed too
        dfs("-mv", f"{base}/c.txt", f"{base}/*"),          # 13: several matches
        dfs("-rm", "-skipTrash", f"{base}/moved/b*"),      # 14
    )
    assert _codes(results) == [0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 1, 0, 0, 1, 0], results
    assert [line.rsplit(" ", 1)[-1] for line in results[0][1].splitlines()] == [
        f"{base}/a.log", f"{base}/b.log"]
    assert results[1][1].splitlines() == ["a.log", "b.log"]
    assert [line.split()[-1] for line in results[2][1].splitlines()] == [
        f"{base}/a.log", f"{base}/c.txt"]
    assert [line.split()[-1] for line in results[3][1].splitlines()] == [
        f"{base}/a.log", f"{base}/b.log"]
    assert client.stat(f"{base}/keep/d.log").mode == 0o600
    assert results[7][2] == f"ls: `{base}/*.nothing': No such file or directory\n"
    assert results[9][1] == "x{y}\n"
    assert results[10][2].startswith(f"ls: `{base}/[ab': Illegal file pattern")
    assert results[13][2] == f"mv: `{base}/*': Too many matches\n"
    assert [e.path.rsplit("/", 1)[-1] for e in client.list_dir(f"{base}/moved")] == ["a.log"]
    got = tmp_path / "got"
    got.mkdir()
    fetched = dfs.each(dfs("-cat", f"{base}/*/a.log", f"{base}/c.*"),
                       dfs("-get", f"{base}/{{c.txt,keep/d.log}}", str(got)))
    assert _codes(fetched) == [0, 0], fetched
    assert fetched[0][1] == "a.logc.txt"
    assert sorted(p.name for p in got.iterdir()) == ["c.txt", "d.log"]


def test_a_uri_pattern_answers_uris(client: Client, dfs: Dfs, base: str,
                                    live_cluster: LiveCluster) -> None:
    client.write_file(f"{base}/u1", b"1")
    uri = live_cluster.url.rstrip("/")
    (listed,) = dfs.run(dfs("-stat", "%n", f"{uri}{base}/u?"))
    assert listed == (0, "u1\n", ""), listed
    (removed,) = dfs.run(dfs("-rm", "-skipTrash", f"{uri}{base}/u*"))
    assert removed[1] == f"Deleted {uri}{base}/u1\n", removed


async def _shrinking(path: Path) -> AsyncIterator[bytes]:
    """The local file's chunks, the file cut short after the first was read."""
    async for chunk in transfer.local_chunks(path):
        yield chunk
        with path.open("r+b") as local:
            local.truncate(100)


async def _touched(path: Path) -> AsyncIterator[bytes]:
    """The chunks, the file's modification time changed after the first (same size)."""
    async for chunk in transfer.local_chunks(path):
        yield chunk
        os.utime(path, ns=(1_000_000_000, 1_000_000_000))


@pytest.mark.parametrize("changed", [_shrinking, _touched])
def test_a_source_changed_while_uploaded_is_refused_and_leaves_nothing(
    client: Client, base: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, changed: object
) -> None:
    local = tmp_path / "source"
    local.write_bytes(os.urandom(3000))
    monkeypatch.setattr(transfer, "LOCAL_READ_BYTES", 1000)  # three reads
    upload = transfer.write_stream(client.async_client, f"{base}/up", changed(local))  # type: ignore[operator]
    with pytest.raises(transfer.SourceChanged, match="changed while it was read"):
        client.run(upload)
    assert client.list_dir(base) == []


def test_put_of_a_changing_source_is_one_line(client: Client, dfs: Dfs, base: str,
                                              tmp_path: Path) -> None:
    """The same check through the shell, in a child process whose reads of the source
    append to it (so the file grows while `-put` reads it, at a known moment)."""
    local = tmp_path / "growing"
    local.write_bytes(b"x" * 10)
    fake = tmp_path / "fake-xdfs-put.py"
    fake.write_text(
        "import sys, runpy\n"
        "from xdfs.client import transfer\n"
        "real = transfer.local_chunks\n"
        "async def grow(path):\n"
        "    grown = False\n"
        "    async for chunk in real(path):\n"
        "        yield chunk\n"
        "        if not grown:\n"
        "            grown = True\n"
        "            open(path, 'ab').write(b'more')\n"
        "transfer.local_chunks = grow\n"
        "sys.argv = ['xdfs', *sys.argv[1:]]\n"
        "runpy.run_module('xdfs', run_name='__main__')\n"
    )
    async def run() -> tuple[int, str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("XDFS_")} | ROOT_ENV
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(fake), *dfs("-put", str(local), f"{base}/grown"), env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await proc.communicate()
        return proc.returncode or 0, out.decode(), err.decode()

    code, _out, err = asyncio.run(run())
    assert code == 1, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"put: `{local}': {local} changed while it was read"), err
    assert client.list_dir(base) == []


def test_refused_put_f_leaves_no_copying_file(client: Client, dfs: Dfs, base: str,
                                              tmp_path: Path) -> None:
    """A sticky directory: another user's file cannot be replaced, and the upload's
    temporary file goes too."""
    owner, other = (f"u{uuid.uuid4().hex[:8]}" for _ in range(2))
    client.add_user(owner, "owner-pw", [])
    client.add_user(other, "other-pw", [])
    client.mkdirs(f"{base}/sticky")
    client.set_permission(f"{base}/sticky", 0o1777)
    client.write_file(f"{base}/sticky/theirs", b"theirs")
    client.set_owner(f"{base}/sticky/theirs", owner, "")
    local = tmp_path / "mine"
    local.write_bytes(b"mine")
    (put,) = dfs.run(dfs("-put", "-f", str(local), f"{base}/sticky/theirs"),
                     env={"XDFS_USER": other, "XDFS_PASSWORD": "other-pw"})
    assert put[0] == 1, put
    assert put[2].startswith(f"put: `{base}/sticky/theirs': "), put
    assert put[2].count("\n") == 1
    names = [e.path.rsplit("/", 1)[-1] for e in client.list_dir(f"{base}/sticky")]
    assert names == ["theirs"]
    assert client.read_file(f"{base}/sticky/theirs") == b"theirs"


def test_get_into_a_missing_local_directory_fails_as_hdfs(
    client: Client, dfs: Dfs, base: str, tmp_path: Path
) -> None:
    client.write_file(f"{base}/f", b"f")
    client.write_file(f"{base}/g", b"g")
    missing = tmp_path / "no" / "such"
    a_file = tmp_path / "a-file"
    a_file.write_bytes(b"")
    results = dfs.run(
        dfs("-get", f"{base}/f", str(missing / "f")),
        dfs("-get", f"{base}/f", f"{base}/g", str(missing)),
        dfs("-get", f"{base}/*", str(a_file)),
        dfs("-copyToLocal", f"{base}/f", str(missing / "f")),
        dfs("-get", f"{base}/f", str(tmp_path / "f")),
    )
    assert _codes(results) == [1, 1, 1, 1, 0], results
    assert results[0][2] == f"get: `{missing / 'f'}': No such file or directory\n"
    assert results[1][2] == f"get: `{missing}': No such file or directory\n"
    assert results[2][2] == f"get: `{a_file}': Is not a directory\n"
    assert not (tmp_path / "no").exists()
    assert (tmp_path / "f").read_bytes() == b"f"
    with pytest.raises(NotFound):
        client.stat(f"{base}/f._COPYING_")


def test_relative_patterns_answer_relative_paths(client: Client, dfs: Dfs, base: str) -> None:
    home = f"/user/root/g{uuid.uuid4().hex[:8]}"
    name = home.rsplit("/", 1)[-1]
    client.write_file(f"{home}/one", b"1")
    client.write_file(f"{home}/two", b"2")
    try:
        results = dfs.run(dfs("-ls", "-C", f"{name}/*"),
                          dfs("-mkdir", f"{base}/new*"),
                          dfs("-rm", "-skipTrash", f"{name}/t?o"))
        assert [code for code, _out, _err in results] == [0, 1, 0], results
        assert results[0][1].splitlines() == [f"{name}/one", f"{name}/two"]
        assert results[1][2] == f"mkdir: `{base}/new*': No such file or directory\n"
        assert client.list_dir(base) == []  # never a directory named "new*"
        assert results[2][1] == f"Deleted {name}/two\n"
    finally:
        client.delete(home, recursive=True, skip_trash=True)
