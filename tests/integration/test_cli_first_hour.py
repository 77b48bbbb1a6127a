"""The shell as a new user meets it (issue 17): -put into a missing directory fails as
``hdfs dfs -put`` does and leaves nothing (item 3), errors are one line and unknown flags
are usage errors (item 14), relative paths resolve against ``/user/<user>`` and full
``xdfs://`` URIs work in every command (item 15)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from xdfs.errors import InvalidArgument
from xdfs.namenode.server import NameNode
from xdfs.testing.minicluster import MiniCluster

from .conftest import ROOT, ROOT_PW, connect, run_xdfs, walk
from .test_nn_cli import ROOT_ENV, Result, Shell


@pytest.fixture
async def sh(nn: NameNode, tmp_path: Path) -> Shell:
    """A root shell that authenticates with a token (the user comes from the server)."""
    return await Shell.with_token(nn, tmp_path / "root.toml", ROOT, ROOT_PW)


def _one_line_error(result: Result, code: int, text: str) -> None:
    status, _out, err = result
    assert status == code, result
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert text in err, err


async def test_put_into_a_missing_directory_fails_and_leaves_nothing(
    nn: NameNode, sh: Shell, tmp_path: Path
) -> None:
    local = tmp_path / "f"
    local.write_bytes(b"")
    async with connect(nn, ROOT, ROOT_PW) as root:
        before = await walk(root)
        into_missing, into_missing_dir, no_local, ok = await sh.run(
            sh.d("-put", str(local), "/missing/f"),
            sh.d("-put", str(local), "/missing/"),
            sh.d("-put", str(tmp_path / "nope"), "/f"),
            sh.d("-put", str(local), "/tmp/"),
        )
        assert into_missing[2] == "put: `/missing/f': No such file or directory\n"
        assert into_missing[0] == 1 and into_missing_dir[0] == 1
        assert "`/missing/'" in into_missing_dir[2]
        _one_line_error(no_local, 1, f"put: `{tmp_path / 'nope'}': No such file or directory")
        after = await walk(root)
        assert ok[0] == 0, ok
        del after["/tmp/f"]
        assert after.keys() == before.keys()  # no /missing, no ._COPYING_


async def test_unknown_flags_are_usage_errors(nn: NameNode, sh: Shell, tmp_path: Path) -> None:
    async with connect(nn, ROOT, ROOT_PW) as root:
        before = await walk(root)
        results = await sh.run(
            sh.d("-ls", "-bogus", "/"),
            sh.d("-mkdir", "-x", "/made"),
            sh.d("-rm", "/tmp", "-rf"),
            sh.d("-put", "-q", str(tmp_path), "/"),
        )
        for result, option in zip(results, ("-bogus", "-x", "-rf", "-q"), strict=True):
            _one_line_error(result, 2, f"unknown option {option}")
            assert "Usage: xdfs dfs -" in result[2]
        assert await walk(root) == before


async def test_relative_paths_and_uris(nn: NameNode, sh: Shell, tmp_path: Path) -> None:
    uri = sh.uri
    local = tmp_path / "empty"
    local.write_bytes(b"")
    (no_home, mkdir, touch, put, ls_home, ls_rel, ls_d, stat, mv, ls_uri, stat_uri,
     touch_uri, ls_default_fs) = await sh.run(
        sh.d("-ls"),
        sh.d("-mkdir", "-p", "rel/sub"),
        sh.d("-touchz", "rel/f"),
        sh.d("-put", str(local), "rel/sub/"),
        sh.d("-ls"),
        sh.d("-ls", "rel"),
        sh.d("-ls", "-d"),
        sh.d("-stat", "%n %F", "/user/root/rel/f", "rel/sub/empty"),
        sh.d("-mv", "rel/f", "./rel/../rel/g"),
        sh.d("-ls", f"{uri}/user/root/rel"),
        ["dfs", "-stat", "%n", f"{uri}/user/root/rel/g"],  # no -fs: the URI names it
        sh.d("-touchz", f"{uri}/t"),
        sh.d("-ls", "xdfs:///user/root/rel/sub"),
    )
    assert no_home[:2] == (1, "") and "ls: `.': No such file or directory" in no_home[2]
    for result in (mkdir, touch, put, ls_home, ls_rel, ls_d, stat, mv, ls_uri, stat_uri,
                   touch_uri, ls_default_fs):
        assert result[0] == 0, result
    assert ls_home[1].splitlines()[0] == "Found 1 items"
    assert ls_home[1].splitlines()[1].endswith(" rel")  # shown relative, as hdfs does
    assert [line.rsplit(" ", 1)[1] for line in ls_rel[1].splitlines()[1:]] == [
        "rel/f", "rel/sub",
    ]
    assert ls_d[1].rstrip().endswith(" .")
    assert stat[1].splitlines() == ["f regular empty file", "empty regular empty file"]
    assert [line.rsplit(" ", 1)[1] for line in ls_uri[1].splitlines()[1:]] == [
        "/user/root/rel/g", "/user/root/rel/sub",
    ]
    assert stat_uri[1] == "g\n"
    assert ls_default_fs[1].splitlines()[1].endswith(" /user/root/rel/sub/empty")

    # another cluster's URI is that cluster (here: none listening); two clusters: refused
    elsewhere, mixed = await sh.run(
        sh.d("-ls", "xdfs://127.0.0.1:1/"),
        sh.d("-cp", "xdfs://127.0.0.1:1/a", f"{uri}/b"),
    )
    _one_line_error(elsewhere, 1, "127.0.0.1:1")
    _one_line_error(mixed, 2, "one command works on one cluster")
    async with connect(nn, ROOT, ROOT_PW) as root:
        assert (await root.stat("/t")).length == 0
        assert (await root.stat("rel/g")).path == "/user/root/rel/g"
        assert await root.home() == "/user/root"
        with pytest.raises(InvalidArgument, match="another cluster"):
            await root.stat("xdfs://127.0.0.1:1/t")


async def test_conf_help_ping_and_backup_status_read_well(
    nn: NameNode, sh: Shell, minicluster: MiniCluster
) -> None:
    """Item 21: secrets masked by `xdfs conf`, roles not built yet hidden from --help,
    `ping` and `admin -backupStatus` as readable lines (no reprs)."""
    backup = await minicluster.start_backupnode(namenode=nn.address)
    secret = {"XDFS_PASSWORD": "hunter2-secret"}
    conf, shown, help_, zkfc, ping, unreachable = await asyncio.gather(
        run_xdfs("conf", env=secret),
        run_xdfs("conf", "--show-secrets", env=secret),
        run_xdfs("--help"),
        run_xdfs("zkfc"),
        run_xdfs("ping", "-n", "2", nn.address, env=ROOT_ENV),
        run_xdfs("ping", "127.0.0.1:1"),
    )
    (status,) = await sh.run(sh.a("-backupStatus", "--backup", backup.address))
    assert conf[0] == 0 and "hunter2-secret" not in conf[1]
    assert 'password = "********"' in conf[1] and "--show-secrets" in conf[1]
    assert 'password = "hunter2-secret"' in shown[1]
    assert help_[0] == 0 and "  dfs " in help_[1] and "  journalnode " in help_[1]
    for role in ("zkfc", "logservice", "log"):
        assert f"  {role} " in help_[1]
    assert zkfc[0] == 2 and "give --id ID" in zkfc[2]

    assert ping[0] == 0, ping
    first, *replies, summary = ping[1].splitlines()
    assert re.fullmatch(
        rf"{nn.address}: xdfs namenode, version \S+ \(protocol \d+\), cluster CID-nn, "
        r"up \d+[dhms].*, \d+ connections?", first), first
    assert len(replies) == 2 and all(r.startswith(f"reply from {nn.address}: time=")
                                     for r in replies)
    assert summary.startswith("2 replies, round trip min/avg/max = ")
    _one_line_error(unreachable, 1, "ping: 127.0.0.1:1: ")

    assert status[0] == 0, status
    rows = {key: value.strip() for key, value in
            (line.split(":", 1) for line in status[1].splitlines())}
    assert rows["NameNode"] == nn.address  # a list joined, not its repr
    assert rows["State"] in ("following", "bootstrapping", "starting")
    assert re.fullmatch(r"\d+ \(NameNode at \d+, lag \d+ txns\)", rows["Replayed txid"])
    assert rows["Last fetch"] == "never" or rows["Last fetch"].endswith(" ago")
    assert "[" not in status[1] and "_ms" not in status[1]
