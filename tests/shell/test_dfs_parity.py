"""``xdfs dfs`` commands users know from ``hdfs dfs`` (issue 15 item 5), run as a child
process against a real cluster (a NameNode and three DataNodes: ``live_cluster``)."""

from __future__ import annotations

import asyncio
import datetime as dt
import gzip
import hashlib
import os
import struct
from collections.abc import Iterator
from pathlib import Path

import crc32c
import pytest

from tests.datapath.conftest import LIVE_BLOCK_BYTES, LiveCluster, payload, scratch_dir
from tests.integration.conftest import ROOT, ROOT_PW, run_xdfs, run_xdfs_batch
from xdfs.client.client import Client

ROOT_ENV = {"XDFS_USER": ROOT, "XDFS_PASSWORD": ROOT_PW}
Result = tuple[int, str, str]


class Dfs:
    """``xdfs dfs -fs URI ...`` command lines, run in order in one child process."""

    def __init__(self, cluster: LiveCluster, base: str) -> None:
        self.uri = cluster.url
        self.base = base

    def __call__(self, *words: str) -> list[str]:
        return ["dfs", "-fs", self.uri, *words]

    def run(self, *commands: list[str], env: dict[str, str] | None = None) -> list[Result]:
        return asyncio.run(run_xdfs_batch(list(commands), env or ROOT_ENV))

    def each(self, *commands: list[str]) -> list[Result]:
        """Each in a process of its own, in order (what writes bytes to stdout)."""

        async def run_all() -> list[Result]:
            return [await run_xdfs(*command, env=ROOT_ENV) for command in commands]

        return asyncio.run(run_all())


@pytest.fixture
def client(live_cluster: LiveCluster) -> Iterator[Client]:
    with live_cluster.client() as made:
        yield made


@pytest.fixture
def base(client: Client) -> Iterator[str]:
    yield from scratch_dir(client, "/shell")


@pytest.fixture
def dfs(live_cluster: LiveCluster, base: str) -> Dfs:
    return Dfs(live_cluster, base)


def _hdfs_checksum(data: bytes, block_bytes: int) -> str:
    """MD5-of-MD5-of-CRC32C computed here from the bytes, as HDFS defines it."""
    block_md5s = b""
    for start in range(0, len(data), block_bytes):
        block = data[start : start + block_bytes]
        crcs = b"".join(
            struct.pack(">I", crc32c.crc32c(block[i : i + 512])) for i in range(0, len(block), 512)
        )
        block_md5s += hashlib.md5(crcs).digest()
    crc_per_block = block_bytes // 512 if len(data) > block_bytes else 0
    return (struct.pack(">iq", 512, crc_per_block) + hashlib.md5(block_md5s).digest()).hex()


def test_head_text_checksum_getmerge(client: Client, dfs: Dfs, base: str, tmp_path: Path
                                     ) -> None:
    text = b"".join(b"line %d\n" % i for i in range(400))
    big = payload(2 * LIVE_BLOCK_BYTES + 1000, seed=3)  # three blocks, the last short
    client.write_file(f"{base}/plain.txt", text)
    client.write_file(f"{base}/two.gz", gzip.compress(text[:100]) + gzip.compress(text[100:]))
    client.write_file(f"{base}/big", big)
    client.write_file(f"{base}/bad.gz", b"\x1f\x8b" + b"not deflate at all")
    client.write_file(f"{base}/m/1", b"one")
    client.write_file(f"{base}/m/2", b"")
    client.write_file(f"{base}/m/3", b"three")
    merged = tmp_path / "merged"
    results = dfs.each(
        dfs("-head", f"{base}/plain.txt"),
        dfs("-text", f"{base}/two.gz"),
        dfs("-text", f"{base}/plain.txt"),
        dfs("-checksum", f"{base}/big", f"{base}/plain.txt"),
        dfs("-getmerge", "-nl", "-skip-empty-file", f"{base}/m", str(merged)),
        dfs("-head", f"{base}/m"),
        dfs("-checksum", f"{base}/missing"),
        dfs("-text", f"{base}/bad.gz"),
        dfs("-getmerge", f"{base}/m", str(tmp_path / "no" / "such" / "dir")),
    )
    assert [code for code, _out, _err in results] == [0, 0, 0, 0, 0, 1, 1, 1, 1], results
    assert results[0][1].encode() == text[:1024]
    assert results[1][1].encode() == text
    assert results[2][1].encode() == text
    big_line, plain_line = results[3][1].splitlines()
    assert big_line.split("\t") == [
        f"{base}/big", "MD5-of-512MD5-of-512CRC32C", _hdfs_checksum(big, LIVE_BLOCK_BYTES)
    ]
    assert plain_line.split("\t") == [
        f"{base}/plain.txt", "MD5-of-0MD5-of-512CRC32C", _hdfs_checksum(text, LIVE_BLOCK_BYTES)
    ]
    assert merged.read_bytes() == b"one\nthree\n"
    assert results[5][2].strip() == f"head: `{base}/m': {base}/m is a directory"
    assert results[6][2].strip() == f"checksum: `{base}/missing': No such file or directory"
    for _code, _out, err in results[7:]:  # one line each, never a traceback
        assert err.count("\n") == 1 and "Traceback" not in err, err
    assert results[7][2].startswith(f"text: `{base}/bad.gz': corrupt gzip data")
    assert results[8][2].startswith("getmerge: `") and "No such file or directory" in results[8][2]


def test_find_touch_and_ls_orders(client: Client, dfs: Dfs, base: str) -> None:
    client.write_file(f"{base}/Alpha.txt", b"a" * 30)
    client.write_file(f"{base}/d/beta.TXT", b"b" * 10)
    client.write_file(f"{base}/d/gamma.log", b"c" * 20)
    client.set_times(f"{base}/Alpha.txt", 3_000_000_000_000, 1_000_000_000_000)
    client.set_times(f"{base}/d", 2_000_000_000_000, 3_000_000_000_000)
    results = dfs.run(
        dfs("-find", base, "-name", "*.txt", "-print"),
        dfs("-find", base, "-iname", "*.txt"),
        dfs("-find", f"{base}/d"),
        dfs("-touch", "-m", "-t", "20200102:030405", f"{base}/d/gamma.log"),
        dfs("-touch", "-c", f"{base}/never"),
        dfs("-touch", f"{base}/new"),
        dfs("-touch", "-t", "yesterday", f"{base}/new"),
        dfs("-ls", "-S", base),
        dfs("-ls", "-t", "-r", base),
        dfs("-ls", "-t", "-u", base),
        dfs("-ls", "-x", base),
    )
    assert [code for code, _out, _err in results] == [0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 2], results
    assert results[0][1].splitlines() == [f"{base}/Alpha.txt"]
    assert results[1][1].splitlines() == [f"{base}/Alpha.txt", f"{base}/d/beta.TXT"]
    assert results[2][1].splitlines() == [f"{base}/d", f"{base}/d/beta.TXT", f"{base}/d/gamma.log"]
    gamma = client.stat(f"{base}/d/gamma.log")
    assert gamma.mtime_ms == int(dt.datetime(2020, 1, 2, 3, 4, 5).timestamp() * 1000)
    assert gamma.atime_ms != gamma.mtime_ms  # -m leaves the access time
    assert not client.exists(f"{base}/never")
    assert client.stat(f"{base}/new").length == 0
    assert "Unable to parse the specified timestamp yesterday" in results[6][2]

    def names(out: str) -> list[str]:
        return [line.rsplit("/", 1)[-1] for line in out.splitlines()[1:]]

    # sizes 30, 0, 0 (ties keep name order); mtimes 2065, 2033, now; atimes 2001, 2065, now
    assert names(results[7][1]) == ["Alpha.txt", "d", "new"]
    assert names(results[8][1]) == ["new", "d", "Alpha.txt"]  # -t -r: oldest first
    assert names(results[9][1]) == ["d", "new", "Alpha.txt"]  # -t -u: newest access first
    assert "2065-" in results[9][1].splitlines()[1]  # -u shows the access time
    assert results[10][2].strip().startswith("-ls: unknown option -x")


def test_chmod_symbolic_and_test_access(client: Client, dfs: Dfs, base: str) -> None:
    client.write_file(f"{base}/f", b"x")
    client.set_permission(f"{base}/f", 0o644)
    client.mkdirs(f"{base}/dir")
    client.set_permission(f"{base}/dir", 0o700)
    client.set_permission(base, 0o755)
    client.add_user("shelluser", "shellpw", [])
    user_env = {"XDFS_USER": "shelluser", "XDFS_PASSWORD": "shellpw"}
    results = dfs.run(
        dfs("-chmod", "u+x,go-r", f"{base}/f"),
        dfs("-chmod", "a=rX,+t", f"{base}/dir"),
        dfs("-chmod", "u+q", f"{base}/f"),
    )
    assert [code for code, _out, _err in results] == [0, 0, 2], results
    assert client.stat(f"{base}/f").mode == 0o700
    assert client.stat(f"{base}/dir").mode == 0o1555
    as_user = dfs.run(
        dfs("-test", "-r", f"{base}/f"),
        dfs("-test", "-w", f"{base}/f"),
        dfs("-test", "-r", f"{base}/dir"),
        dfs("-test", "-w", f"{base}/dir"),
        dfs("-test", "-r", f"{base}/missing"),
        env=user_env,
    )
    assert [code for code, _out, _err in as_user] == [1, 1, 0, 1, 1], as_user
    as_root = dfs.run(dfs("-test", "-w", f"{base}/f"), dfs("-test", "-r", f"{base}/dir"))
    assert [code for code, _out, _err in as_root] == [0, 0]


def test_put_get_preserve_and_moves(client: Client, dfs: Dfs, base: str, tmp_path: Path
                                    ) -> None:
    local = tmp_path / "local.bin"
    local.write_bytes(b"kept times")
    os.chmod(local, 0o640)
    os.utime(local, ns=(1_500_000_000_000_000_000, 1_400_000_000_000_000_000))
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "leaf").write_bytes(b"leaf")
    os.utime(tree / "sub" / "leaf", ns=(1_300_000_000_000_000_000,) * 2)
    moving = tmp_path / "moving"
    moving.write_bytes(b"moving")
    back = tmp_path / "back"
    client.write_file(f"{base}/remote", b"remote bytes")
    client.set_permission(f"{base}/remote", 0o604)
    client.set_times(f"{base}/remote", 1_600_000_000_000, 1_650_000_000_000)
    client.write_file(f"{base}/to-move", b"to move")
    results = dfs.run(
        dfs("-put", "-p", str(local), f"{base}/kept"),
        dfs("-put", "-p", str(tree), base),
        dfs("-get", "-p", f"{base}/remote", str(back)),
        dfs("-moveFromLocal", str(moving), f"{base}/moved"),
        dfs("-moveToLocal", f"{base}/to-move", str(tmp_path / "arrived")),
        dfs("-put", "-q", str(local), base),
    )
    assert [code for code, _out, _err in results] == [0, 0, 0, 0, 0, 2], results
    kept = client.stat(f"{base}/kept")
    assert (kept.mtime_ms, kept.atime_ms, kept.mode) == (1_400_000_000_000, 1_500_000_000_000,
                                                          0o640)
    assert client.stat(f"{base}/tree/sub/leaf").mtime_ms == 1_300_000_000_000
    got = back.stat()  # before reading it, which changes its access time
    assert (got.st_mtime_ns // 1_000_000, got.st_atime_ns // 1_000_000) == (
        1_600_000_000_000, 1_650_000_000_000)
    assert got.st_mode & 0o7777 == 0o604
    assert back.read_bytes() == b"remote bytes"
    assert not moving.exists() and client.read_file(f"{base}/moved") == b"moving"
    assert (tmp_path / "arrived").read_bytes() == b"to move"
    assert not client.exists(f"{base}/to-move")


def test_put_onto_an_existing_file_names_that_file(client: Client, dfs: Dfs, base: str,
                                                    tmp_path: Path) -> None:
    """As hdfs: `put: `/dir/name': File exists`, the file, not the directory given."""
    local = tmp_path / "twice.bin"
    local.write_bytes(b"first")
    client.mkdirs(f"{base}/into")
    results = dfs.run(dfs("-put", str(local), f"{base}/into/"),
                      dfs("-put", str(local), f"{base}/into/"),
                      dfs("-put", str(local), f"{base}/into"),
                      dfs("-put", str(local), f"{base}/into/twice.bin"))
    assert [code for code, _out, _err in results] == [0, 1, 1, 1], results
    for _code, _out, err in results[1:]:
        assert err.strip() == f"put: `{base}/into/twice.bin': File exists", err
    assert client.read_file(f"{base}/into/twice.bin") == b"first"


def test_df(dfs: Dfs, live_cluster: LiveCluster) -> None:
    plain, human = dfs.run(dfs("-df"), dfs("-df", "-h", "/"))
    assert plain[0] == human[0] == 0, (plain, human)
    head, row = plain[1].splitlines()
    assert head.split() == ["Filesystem", "Size", "Used", "Available", "Use%"]
    uri, size, used, available, share = row.split()
    assert uri == live_cluster.url
    assert int(size) >= int(used) + int(available) > 0
    assert share.endswith("%")
    assert human[1].splitlines()[1].split()[0] == live_cluster.url


def test_put_over_a_space_quota_is_one_line_and_leaves_nothing(
    client: Client, dfs: Dfs, base: str, tmp_path: Path
) -> None:
    """Real DataNodes: the upload is refused at its second block (each charged at the full
    block size times replication), the error is one line, and no file is left behind."""
    local = tmp_path / "big"
    local.write_bytes(payload(LIVE_BLOCK_BYTES + 10, seed=9))
    client.mkdirs(f"{base}/q")
    client.set_quota(f"{base}/q", None, 3 * LIVE_BLOCK_BYTES)  # one block x 3 replicas
    (put,) = dfs.run(dfs("-put", str(local), f"{base}/q/big"))
    assert put[0] == 1, put
    assert put[2].count("\n") == 1 and "Traceback" not in put[2]
    assert put[2].startswith(f"put: `{base}/q/big': The DiskSpace quota of {base}/q is exceeded")
    assert client.list_dir(f"{base}/q") == []
    summary = client.content_summary(f"{base}/q")
    assert (summary.file_count, summary.ds_quota) == (0, 3 * LIVE_BLOCK_BYTES)
