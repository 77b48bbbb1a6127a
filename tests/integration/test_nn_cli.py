"""The ``xdfs`` command line (dfs, admin, debug, oev, oiv, namenode) as child processes
against a running NameNode (DESIGN.md section 12)."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from xdfs.client.client import Client
from xdfs.common.process import ProcessGroup
from xdfs.config import XdfsConfig
from xdfs.errors import AuthenticationFailed
from xdfs.namenode.server import NameNode
from xdfs.testing.minicluster import MiniCluster

from .conftest import ROOT, ROOT_PW, USERS, connect, run_xdfs, run_xdfs_batch, write_file

LS_LINE = re.compile(
    r"^(?P<perm>[d-][rwxsStT-]{9}) +(?P<rep>-|\d+) (?P<owner>\S+) +(?P<group>\S+) +"
    r"(?P<size>\d+) (?P<date>\d{4}-\d\d-\d\d) (?P<time>\d\d:\d\d) (?P<path>/\S*)$"
)
ROOT_ENV = {"XDFS_USER": ROOT, "XDFS_PASSWORD": ROOT_PW}
Result = tuple[int, str, str]


class Shell:
    """``xdfs dfs -fs URI ...`` and ``xdfs admin -fs URI ...`` as one user (credentials in
    the environment, or a client.toml holding a token: no scrypt check per command).

    :meth:`dfs` and :meth:`admin` start ``python -m xdfs`` for one command; :meth:`run`
    runs a list of commands through the same ``main()`` in one child process, in order."""

    def __init__(self, nn: NameNode, env: dict[str, str] | None = None) -> None:
        self.uri = f"xdfs://{nn.address}"
        self.env = env or ROOT_ENV

    @classmethod
    async def with_token(cls, nn: NameNode, conf: Path, user: str, password: str) -> Shell:
        async with connect(nn) as anonymous:
            token = (await anonymous.login(user, password)).token
        _write(conf, f'[client]\ntoken = "{token}"\n')
        return cls(nn, {"XDFS_CONF": str(conf)})

    def d(self, *args: str) -> list[str]:
        return ["dfs", "-fs", self.uri, *args]

    def a(self, *args: str) -> list[str]:
        return ["admin", "-fs", self.uri, *args]

    async def dfs(self, *args: str) -> Result:
        return await run_xdfs(*self.d(*args), env=self.env)

    async def admin(self, *args: str, env: dict[str, str] | None = None) -> Result:
        return await run_xdfs(*self.a(*args), env={**self.env, **(env or {})})

    async def run(self, *commands: list[str], env: dict[str, str] | None = None) -> list[Result]:
        return await run_xdfs_batch(list(commands), {**self.env, **(env or {})})

    async def ok(self, *commands: list[str]) -> list[str]:
        results = await self.run(*commands)
        for command, (code, out, err) in zip(commands, results, strict=True):
            assert code == 0, (command, code, out, err)
        return [out for _code, out, _err in results]


@pytest.fixture
async def sh(nn: NameNode, tmp_path: Path) -> Shell:
    """A root shell that authenticates with a token."""
    return await Shell.with_token(nn, tmp_path / "root.toml", ROOT, ROOT_PW)


def _write(path: Path, text: str) -> None:
    path.write_text(text)


def _ls_rows(out: str) -> list[dict[str, str]]:
    rows = []
    for line in out.splitlines():
        if line.startswith("Found "):
            continue
        found = LS_LINE.match(line)
        assert found, f"not an -ls line: {line!r}"
        rows.append(found.groupdict())
    return rows


async def test_dfs_ls_mkdir_touchz_stat(nn: NameNode, sh: Shell) -> None:
    await sh.ok(sh.d("-mkdir", "-p", "/cli/a/b", "/cli/c"), sh.d("-touchz", "/cli/a/f"))
    async with connect(nn, ROOT, ROOT_PW) as root:
        await write_file(root, "/cli/a/data", [1000, 234], replication=3)
        await root.set_times("/cli/a/data", mtime_ms=1_700_000_000_000)

    # one real `python -m xdfs` process, with the password in the environment
    code, ls_a, err = await Shell(nn).dfs("-ls", "/cli/a")
    assert code == 0, err
    assert ls_a.splitlines()[0] == "Found 3 items"
    rows = {r["path"]: r for r in _ls_rows(ls_a)}
    assert list(rows) == ["/cli/a/b", "/cli/a/data", "/cli/a/f"]
    assert rows["/cli/a/b"] | {"date": "", "time": ""} == {
        "perm": "drwxr-xr-x", "rep": "-", "owner": ROOT, "group": "supergroup", "size": "0",
        "date": "", "time": "", "path": "/cli/a/b",
    }
    assert (rows["/cli/a/f"]["perm"], rows["/cli/a/f"]["rep"], rows["/cli/a/f"]["size"]) == (
        "-rw-r--r--", "2", "0",
    )
    assert (rows["/cli/a/data"]["rep"], rows["/cli/a/data"]["size"]) == ("3", "1234")
    assert rows["/cli/a/data"]["date"].startswith("2023-11-1")  # local time of 1.7e12 ms

    results = await sh.run(
        sh.d("-ls", "/cli/a/f"),
        sh.d("-ls", "-d", "/cli/a"),
        sh.d("-ls", "-R", "/cli"),
        sh.d("-ls", "-h", "/cli/a/data"),
        sh.d("-ls", "/"),
        sh.d("-stat", "%n %u %g %a %r %b %F", "/cli/a/f"),
        sh.d("-stat", "%n|%F|%o", "/cli/a/data", "/cli/a/b"),
        sh.d("-stat", "/cli/a/data"),
        sh.d("-mkdir", "/cli/x/y"),
        sh.d("-mkdir", "/cli/a"),
        sh.d("-touchz", "/cli/a/data"),
    )
    for result in results[:8]:
        assert result[0] == 0, result
    ls_f, ls_d, ls_r, ls_h, ls_root, stat1, stat2, stat3 = (r[1] for r in results[:8])
    # a file lists itself without a header; -d lists a directory itself
    assert "Found" not in ls_f and [r["path"] for r in _ls_rows(ls_f)] == ["/cli/a/f"]
    assert [r["path"] for r in _ls_rows(ls_d)] == ["/cli/a"]
    assert [r["path"] for r in _ls_rows(ls_r)] == [  # depth first, as hdfs prints it
        "/cli/a", "/cli/a/b", "/cli/a/data", "/cli/a/f", "/cli/c",
    ]
    assert "1.2 K" in ls_h
    assert ls_root.splitlines()[0] == "Found 3 items"
    assert {r["path"] for r in _ls_rows(ls_root)} == {"/cli", "/tmp", "/user"}
    assert "drwxrwxrwt" in ls_root  # /tmp is sticky

    assert stat1 == "f root supergroup 644 2 0 regular empty file\n"
    assert stat2.splitlines() == [f"data|regular file|{64 * 1024 * 1024}", "b|directory|0"]
    assert re.match(r"^2023-11-1\d \d\d:\d\d:\d\d$", stat3.strip())  # %y by default

    # mkdir without -p under a missing parent, or of an existing path; touchz of data
    code, _out, err = results[8]
    assert code == 1 and "No such file or directory" in err and "/cli/x/y" in err
    code, _out, err = results[9]
    assert code == 1 and "File exists" in err
    assert results[10][0] == 1


async def test_dfs_mv_rm_restore_and_errors(sh: Shell) -> None:
    trash = "/user/root/.Trash/Current/m/dir/f2"
    (
        _mkdir, _touch, _mv1, _mv2, ls_dir, mv_missing, rm_skip, rm_nonempty, rm_missing,
        rm_force, mv_usage, no_command, stat_missing,
    ) = await sh.run(
        sh.d("-mkdir", "-p", "/m/dir", "/m/full/sub"),
        sh.d("-touchz", "/m/f", "/m/g"),
        sh.d("-mv", "/m/f", "/m/f2"),
        sh.d("-mv", "/m/f2", "/m/g", "/m/dir"),  # several sources into a directory
        sh.d("-ls", "/m/dir"),
        sh.d("-mv", "/m/nothing", "/m/dir"),
        sh.d("-rm", "-skipTrash", "/m/dir/g"),
        sh.d("-rm", "/m/full"),
        sh.d("-rm", "/m/never"),
        sh.d("-rm", "-f", "/m/never"),
        sh.d("-mv", "/only-one"),
        sh.d(),
        sh.d("-stat", "%n", "/nope"),
    )
    assert [r[0] for r in (_mkdir, _touch, _mv1, _mv2, ls_dir)] == [0] * 5
    assert [r["path"] for r in _ls_rows(ls_dir[1])] == ["/m/dir/f2", "/m/dir/g"]
    assert mv_missing[0] == 1 and "No such file or directory" in mv_missing[2]
    assert rm_skip[:2] == (0, "Deleted /m/dir/g\n")
    assert rm_nonempty[0] == 1 and "Directory is not empty" in rm_nonempty[2]
    assert rm_missing[0] == 1 and "No such file or directory" in rm_missing[2]
    assert rm_force[0] == 0
    assert mv_usage[0] == 2 and no_command[0] == 2
    assert stat_missing[0] == 1 and "No such file or directory" in stat_missing[2]

    # real processes for the trash message and the exit statuses 1 and 2
    rm_trash, ls_missing, bogus = await asyncio.gather(
        sh.dfs("-rm", "/m/dir/f2"), sh.dfs("-ls", "/nope"), sh.dfs("-bogus", "/")
    )
    assert rm_trash[:2] == (0, f"Moved: '/m/dir/f2' to trash at: {trash}\n")
    assert ls_missing[0] == 1 and "No such file or directory" in ls_missing[2]
    assert "/nope" in ls_missing[2]
    assert bogus[0] == 2 and "Unknown command" in bogus[2]

    rm_dir, restore, is_file, restore_again, _expunge, ls_trash, _immediate, ls_empty = (
        await sh.run(
            sh.d("-rm", "-r", "/m/full"),
            sh.d("-restore", trash),
            sh.d("-test", "-f", "/m/dir/f2"),
            sh.d("-restore", "/m/dir/f2"),
            sh.d("-expunge"),
            sh.d("-ls", "/user/root/.Trash"),
            sh.d("-expunge", "-immediate"),
            sh.d("-ls", "/user/root/.Trash"),
        )
    )
    assert rm_dir[:2] == (0, "Moved: '/m/full' to trash at: /user/root/.Trash/Current/m/full\n")
    assert restore[:2] == (0, f"Restored {trash} to /m/dir/f2\n")
    assert is_file[0] == 0 and restore_again[0] == 1
    rows = _ls_rows(ls_trash[1])
    assert len(rows) == 1 and re.search(r"/\d{12}$", rows[0]["path"])
    assert ls_empty[1].strip() == "Found 0 items"


async def test_dfs_count_du_test_chmod_chown_setrep(nn: NameNode, sh: Shell) -> None:
    async with connect(nn, ROOT, ROOT_PW) as root:
        await root.mkdirs("/q/a/b")
        await write_file(root, "/q/a/f1", [100])
        await write_file(root, "/q/a/b/f2", [4096, 4], replication=3)
        await root.touchz("/q/empty")
        await root.add_user("alice", USERS["alice"][0], ["staff"])

    checks = [
        (("-e", "/q"), 0), (("-e", "/q/nope"), 1),
        (("-d", "/q"), 0), (("-d", "/q/empty"), 1), (("-d", "/q/nope"), 1),
        (("-f", "/q/empty"), 0), (("-f", "/q"), 1),
        (("-z", "/q/empty"), 0), (("-z", "/q/a/f1"), 1),
        (("-s", "/q/a/f1"), 0), (("-s", "/q/empty"), 1),
    ]
    count, du_s, du, *tests = await sh.run(
        sh.d("-count", "/q", "/q/a/b"),
        sh.d("-du", "-s", "/q"),
        sh.d("-du", "/q"),
        *(sh.d("-test", *args) for args, _ in checks),
    )
    assert [line.split() for line in count[1].splitlines()] == [
        ["3", "3", "4200", "/q"], ["1", "1", "4100", "/q/a/b"],
    ]
    assert du_s[1].split() == ["4200", str(100 * 2 + 4100 * 3), "/q"]
    assert [line.split() for line in du[1].splitlines()] == [
        ["4200", "12500", "/q/a"], ["0", "0", "/q/empty"],
    ]
    assert [t[0] for t in tests] == [expected for _, expected in checks]

    outs = await sh.ok(
        sh.d("-chmod", "700", "/q/a"),
        sh.d("-chmod", "-R", "750", "/q/a/b"),
        sh.d("-chown", "alice:staff", "/q/empty"),
        sh.d("-chgrp", "staff", "/q/a/f1"),
        sh.d("-setrep", "1", "/q/a/b"),  # a directory: every file beneath
        sh.d("-setrep", "4", "/q/a/f1"),
        sh.d("-chown", "-R", "alice", "/q/a/b"),
        sh.d("-stat", "%n %u %g %a %r", "/q/a", "/q/a/b", "/q/a/b/f2", "/q/empty", "/q/a/f1"),
    )
    assert outs[4].strip() == "Replication 1 set: /q/a/b/f2"
    assert outs[5].strip() == "Replication 4 set: /q/a/f1"
    assert outs[7].splitlines() == [
        "a root supergroup 700 0",
        "b alice supergroup 750 0",
        "f2 alice supergroup 750 1",
        "empty alice staff 644 2",
        "f1 root staff 644 4",
    ]

    alice = Shell(nn, {"XDFS_USER": "alice", "XDFS_PASSWORD": USERS["alice"][0]})
    wrong = Shell(nn, {"XDFS_USER": "alice", "XDFS_PASSWORD": "nope"})
    (bad_mode, bad_rep, big_rep), alice_results, (wrong_pw,) = await asyncio.gather(
        sh.run(
            sh.d("-chmod", "u+q", "/q/a"),  # not a mode (u+x is one: symbolic modes)
            sh.d("-setrep", "x", "/q/a"),
            sh.d("-setrep", "99", "/q/a/f1"),
        ),
        # as alice: no chown to someone else, no chmod of root's directory, no listing
        alice.run(
            alice.d("-chown", "root", "/q/empty"),
            alice.d("-chmod", "777", "/q"),
            alice.d("-ls", "/q/a"),
        ),
        wrong.run(wrong.d("-ls", "/")),
    )
    assert (bad_mode[0], bad_rep[0], big_rep[0]) == (2, 2, 1)
    for result in alice_results:
        assert result[0] == 1 and "Permission denied" in result[2], result
    assert wrong_pw[0] == 1 and "password" in wrong_pw[2]


async def test_admin_commands(nn: NameNode, sh: Shell, minicluster: MiniCluster) -> None:
    get, enter, mkdir_in_safe_mode, get_on, leave, mkdir_after, save, roll = await sh.run(
        sh.a("-safemode", "get"),
        sh.a("-safemode", "enter"),
        sh.d("-mkdir", "/during"),
        sh.a("-safemode", "get"),
        sh.a("-safemode", "leave"),
        sh.d("-mkdir", "/after"),
        sh.a("-saveNamespace"),
        sh.a("-rollEdits"),
    )
    assert get[:2] == (0, "Safe mode is OFF\n"), get
    assert enter[0] == 0 and enter[1].startswith("Safe mode is ON")
    assert mkdir_in_safe_mode[0] == 1 and "safe mode" in mkdir_in_safe_mode[2]
    assert get_on[1].startswith("Safe mode is ON")
    assert leave[:2] == (0, "Safe mode is OFF\n")
    assert mkdir_after[0] == 0
    found = re.fullmatch(r"Save namespace successful \(fsimage at txid (\d+)\)\n", save[1])
    assert save[0] == 0 and found, save
    txid = int(found.group(1))
    assert (minicluster.base_dir / "nn-dir0" / "current" / f"fsimage_{txid:019d}").exists()
    found = re.fullmatch(
        r"Successfully rolled edit logs. New segment starts at txid (\d+)\n", roll[1]
    )
    assert roll[0] == 0 and found, roll
    assert int(found.group(1)) == txid + 1

    # a real process for -report and -addUser
    (code, out, err), (add_code, add_out, add_err) = await asyncio.gather(
        sh.admin("-report"),
        sh.admin("-addUser", "erin", "-groups", "g1,g2", env={"XDFS_NEW_PASSWORD": "erin-pw"}),
    )
    assert code == 0, err
    # "key: value" lines (the NameNode part comes first: later per-DataNode keys repeat)
    lines = [line.split(":", 1) for line in out.splitlines() if ":" in line]
    report: dict[str, str] = {}
    for key, value in lines:
        report.setdefault(key.strip(), value.strip())
    assert report["Cluster ID"] == "CID-nn"
    assert "Live datanodes (3)" in out  # the fixture's fake DataNodes
    assert report["Safe mode"] == "OFF"
    assert report["Inodes"] == "4"
    assert report["Newest fsimage txid"] == str(txid)
    assert report["Edits segment starts at"] == str(txid + 1)
    assert report["Name dirs"] == str(minicluster.base_dir / "nn-dir0")
    assert (add_code, add_out.strip()) == (0, "Added user erin"), add_err

    async with connect(nn, ROOT, ROOT_PW) as root:
        await root.mkdirs("/g2dir", mode=0o770)
        await root.set_owner("/g2dir", group="g2")
    erin = Shell(nn, {"XDFS_USER": "erin", "XDFS_PASSWORD": "erin-pw"})
    typo, missing, extra = await sh.run(
        sh.a("-addUser", "frank", "-group", "g1"),
        sh.a("-addUser", "frank", "-groups"),
        sh.a("-addUser", "frank", "g1"),
        env={"XDFS_NEW_PASSWORD": "frank-pw"},
    )
    assert (typo[0], missing[0], extra[0]) == (2, 2, 2)
    async with connect(nn, "frank", "frank-pw") as frank:
        with pytest.raises(AuthenticationFailed):
            await frank.stat("/")
    touch, stat, enter, add, get = await erin.run(
        erin.d("-touchz", "/g2dir/erins"),  # group write through g2
        erin.d("-stat", "%u %g", "/g2dir/erins"),
        erin.a("-safemode", "enter"),  # erin is no superuser
        erin.a("-addUser", "frank"),
        erin.a("-safemode", "get"),
        env={"XDFS_NEW_PASSWORD": "x"},
    )
    assert touch[0] == 0 and stat[1].strip() == "erin g2"
    assert enter[0] == 1 and "AccessDenied" in enter[2]
    assert add[0] == 1 and "AccessDenied" in add[2]
    assert get[1].strip() == "Safe mode is OFF"

    passwd, bogus, no_command = await sh.run(
        sh.a("-passwd", "erin"), sh.a("-bogus"), sh.a(), env={"XDFS_NEW_PASSWORD": "erin-2"}
    )
    assert passwd[:2] == (0, "Changed the password of erin\n")
    assert (bogus[0], no_command[0]) == (2, 2)
    (old_pw,) = await erin.run(erin.d("-ls", "/"))
    assert old_pw[0] == 1
    (deluser,) = await sh.run(sh.a("-delUser", "erin"))
    assert deluser[:2] == (0, "Removed user erin\n")


async def test_oev_and_oiv(sh: Shell, minicluster: MiniCluster) -> None:
    *_, out = await sh.ok(
        sh.d("-mkdir", "-p", "/offline/dir-one", "/offline/dir-two"),
        sh.d("-touchz", "/offline/dir-one/file-a"),
        sh.d("-mv", "/offline/dir-two", "/offline/renamed"),
        sh.a("-saveNamespace"),
    )
    txid = int(re.findall(r"\d+", out)[-1])
    current = minicluster.base_dir / "nn-dir0" / "current"

    code, out, err = await run_xdfs("oev", "-i", str(current), "--stats")
    assert code == 0, err
    stats = dict(line.split() for line in out.splitlines())
    assert stats["mkdir"] == "3" and stats["add_file"] == "1" and stats["rename"] == "1"
    assert stats["close_file"] == "1"
    assert int(stats["total"]) == txid

    code, out, err = await run_xdfs("oev", "-i", str(current))
    assert code == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["txid"] for r in records] == list(range(1, txid + 1))
    text = json.dumps(records)
    for path in ("/offline/dir-one", "/offline/dir-one/file-a", "/offline/renamed"):
        assert f'"{path}"' in text

    code, out, err = await run_xdfs("oiv", "-i", str(current / f"fsimage_{txid:019d}"))
    assert code == 0, err
    inodes = {row["path"]: row for row in map(json.loads, out.splitlines())}
    assert {
        "/", "/tmp", "/user", "/offline", "/offline/dir-one", "/offline/dir-one/file-a",
        "/offline/renamed",
    } == set(inodes)
    assert inodes["/offline/dir-one/file-a"]["type"] == "file"
    assert inodes["/offline/dir-one/file-a"]["permission"] == "-rw-r--r--"
    assert inodes["/tmp"]["permission"] == "drwxrwxrwt"
    code, out, err = await run_xdfs("oiv", "-i", str(current / "no-such-image"))
    assert code != 0


async def test_client_toml_and_token(nn: NameNode, tmp_path: Path) -> None:
    conf = tmp_path / "client.toml"
    conf.write_text(
        f'[client]\nfs = "xdfs://{nn.address}"\nuser = "{ROOT}"\npassword = "{ROOT_PW}"\n'
    )
    code, out, err = await run_xdfs("dfs", "-mkdir", "/via-conf", env={"XDFS_CONF": str(conf)})
    assert code == 0, err
    async with connect(nn, ROOT, ROOT_PW) as root:
        token = (await root.login(ROOT, ROOT_PW)).token
    conf.write_text(f'[client]\nfs = "xdfs://{nn.address}"\ntoken = "{token}"\n')
    code, out, err = await run_xdfs("dfs", "-ls", "/", env={"XDFS_CONF": str(conf)})
    assert code == 0 and "/via-conf" in out, err
    code, out, err = await run_xdfs("admin", "-report", env={"XDFS_CONF": str(conf)})
    assert code == 0 and "CID-nn" in out, err


def test_real_namenode_process(processes: ProcessGroup, tmp_path: Path) -> None:
    """The whole life of a NameNode process: format, serve, shell, SIGTERM, restart."""
    name_dir = tmp_path / "name"
    env = {"XDFS_USER": "admin", "XDFS_PASSWORD": "admin-pw"}

    def xdfs(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "xdfs", *args], capture_output=True, text=True, timeout=60,
            env={**_clean_env(), **env},
        )
        if check:
            assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done

    out = xdfs("namenode", "--name-dir", str(name_dir), "-format").stdout
    assert "superuser admin" in out
    refused = xdfs("namenode", "--name-dir", str(name_dir), "-format", check=False)
    assert refused.returncode != 0  # formatting twice needs -force

    def start() -> str:
        proc = processes.start_xdfs(
            "nn", "namenode", "--name-dir", str(name_dir), "--rpc-address", "127.0.0.1:0",
            ready_pattern=r"namenode serving on (\S+)", env=env,
        )
        assert proc.match is not None
        return proc.match.group(1)

    address = start()
    uri = f"xdfs://{address}"
    xdfs("dfs", "-fs", uri, "-mkdir", "-p", "/proc/a")
    xdfs("dfs", "-fs", uri, "-touchz", "/proc/a/f")
    with Client(uri, user="admin", password="admin-pw", config=XdfsConfig()) as client:
        assert client.stat("/proc/a/f").owner == "admin"
        assert [s.path for s in client.list_dir("/proc/a")] == ["/proc/a/f"]
    nn_proc = processes.processes[-1]
    assert nn_proc.terminate() == 0
    assert "namenode stopped" in nn_proc.log_text()

    address = start()
    out = xdfs("dfs", "-fs", f"xdfs://{address}", "-ls", "-R", "/proc").stdout
    assert [r["path"] for r in _ls_rows(out)] == ["/proc/a", "/proc/a/f"]
    assert processes.processes[-1].terminate() == 0


def _clean_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("XDFS_")}


@pytest.fixture(autouse=True)
def _no_ambient_xdfs_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("XDFS_CONF", "XDFS_FS", "XDFS_USER", "XDFS_PASSWORD"):
        monkeypatch.delenv(name, raising=False)


async def test_debug_recover_lease(nn: NameNode, sh: Shell) -> None:
    async with connect(nn, ROOT, ROOT_PW) as writer:
        await writer.create("/left-open")  # its writer goes away before any block
        assert (await writer.stat("/left-open")).under_construction
        done, again, missing, no_path, bad_retries, unknown = await sh.run(
            ["debug", "-fs", sh.uri, "-recoverLease", "/left-open"],
            ["debug", "-fs", sh.uri, "-recoverLease", "/left-open", "-retries", "2"],
            ["debug", "-fs", sh.uri, "-recoverLease", "/nowhere"],
            ["debug", "-fs", sh.uri, "-recoverLease"],
            ["debug", "-fs", sh.uri, "-recoverLease", "/left-open", "-retries", "0"],
            ["debug", "-fs", sh.uri, "-bogus", "/left-open"],
        )
        assert done == (0, "recoverLease SUCCEEDED on /left-open\n", "")
        assert again[:2] == (0, "recoverLease SUCCEEDED on /left-open\n")  # closed already
        assert not (await writer.stat("/left-open")).under_construction
    assert missing[0] == 1 and missing[2].count("\n") == 1 and "NotFound" in missing[2]
    for code, out, err in (no_path, bad_retries, unknown):
        assert code == 2 and "Usage: xdfs debug" in err and not out, (code, out, err)
