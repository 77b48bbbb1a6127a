"""What an ``hdfs dfs`` user reaches for (issue 42 items 2 and 3): -help CMD, -usage, the
commands of features xdfs lacks, -stat's times, -du -v -x, -count -u, -ls -C -e -q, -cp -p,
-put -t, and the progress bar of -put/-get/-cp on a terminal (and only there). Run as child
processes, against a real cluster where a command needs one."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest

from tests.datapath.conftest import LiveCluster
from tests.integration.conftest import run_xdfs
from tests.shell.test_dfs_parity import ROOT_ENV, Dfs
from xdfs.client.client import Client

BIG = 3 << 20  # above the progress bar's threshold


def _xdfs(*words: str) -> tuple[int, str, str]:
    return asyncio.run(run_xdfs(*words))


def test_help_of_one_command_and_usage() -> None:
    code, out, err = _xdfs("dfs", "-help", "ls")
    assert (code, err) == (0, ""), err
    assert out.startswith("-ls [-C] [-d] [-h] [-q] [-R] [-t] [-S] [-r] [-u] [-e] [<path> ...] :\n")
    assert "-rm" not in out and len(out.splitlines()) > 1
    code, out, _err = _xdfs("dfs", "-help", "-rm", "cat")
    assert code == 0 and out.startswith("-rm ") and "\n-cat <src> ... :\n" in out
    assert _xdfs("dfs", "-usage", "cat") == (0, "Usage: xdfs dfs -cat <src> ...\n", "")
    code, out, _err = _xdfs("dfs", "-usage")
    assert code == 0 and len(out.splitlines()) > 30
    assert all(line.startswith("Usage: xdfs dfs -") for line in out.splitlines())
    assert _xdfs("dfs", "-help", "nope") == (1, "", "help: Unknown command: nope\n")


@pytest.mark.parametrize(("words", "line"), [
    (["-getfacl", "-R", "/x"], "getfacl: xdfs has no ACLs"),
    (["-setfacl", "-m", "user:a:rwx", "/x"], "setfacl: xdfs has no ACLs"),
    (["-getfattr", "-d", "/x"], "getfattr: xdfs has no extended attributes"),
    (["-setfattr", "-n", "user.a", "/x"], "setfattr: xdfs has no extended attributes"),
    (["-createSnapshot", "/x"], "createSnapshot: xdfs has no snapshots"),
    (["-deleteSnapshot", "/x", "s"], "deleteSnapshot: xdfs has no snapshots"),
    (["-renameSnapshot", "/x", "a", "b"], "renameSnapshot: xdfs has no snapshots"),
])
def test_missing_features_say_so_in_one_line(words: list[str], line: str) -> None:
    code, out, err = _xdfs("dfs", *words)
    assert (code, out) == (1, "")
    assert err.startswith(line) and err.count("\n") == 1, err


def test_stat_du_count_ls_flags(client: Client, dfs: Dfs, base: str) -> None:
    client.write_file(f"{base}/f", b"12345")
    client.write_file(f"{base}/zero\u200bwidth", b"")
    client.set_times(f"{base}/f", 1_600_000_000_123, 1_650_000_000_456)
    results = dfs.run(
        dfs("-stat", "%x|%X|%y|%Y|%z|%Z", f"{base}/f"),
        dfs("-du", "-v", "-x", base),
        dfs("-count", "-u", base),
        dfs("-count", "-v", "-u", base),
        dfs("-count", "-t", base),
        dfs("-ls", "-C", base),
        dfs("-ls", "-e", f"{base}/f"),
        dfs("-ls", "-q", "-C", base),
    )
    assert [code for code, _out, _err in results] == [0, 0, 0, 0, 1, 0, 0, 0], results

    def utc(ms: int) -> str:
        return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S")

    mtime, atime = 1_600_000_000_123, 1_650_000_000_456
    assert results[0][1] == f"{utc(atime)}|{atime}|{utc(mtime)}|{mtime}|{utc(mtime)}|{mtime}\n"
    head, *rows = results[1][1].splitlines()
    assert head.split() == ["SIZE", "DISK_SPACE_CONSUMED_WITH_ALL_REPLICAS", "FULL_PATH_NAME"]
    assert [row.split()[-1] for row in rows] == [f"{base}/f", f"{base}/zero\u200bwidth"]
    assert results[2][1].split() == ["none", "inf", "none", "inf", base]
    assert results[3][1].splitlines()[0].split() == [
        "QUOTA", "REM_QUOTA", "SPACE_QUOTA", "REM_SPACE_QUOTA", "PATHNAME"]
    assert "xdfs has no storage types" in results[4][2]
    assert results[5][1].splitlines() == [f"{base}/f", f"{base}/zero\u200bwidth"]  # no "Found"
    assert results[6][1].split()[-2:] == ["Replicated", f"{base}/f"]
    assert results[7][1].splitlines() == [f"{base}/f", f"{base}/zero?width"]


def test_cp_p_and_put_t(client: Client, dfs: Dfs, base: str, tmp_path: Path) -> None:
    client.write_file(f"{base}/src", b"copied")
    client.set_times(f"{base}/src", 1_500_000_000_000, 1_400_000_000_000)
    client.set_permission(f"{base}/src", 0o604)
    client.set_owner(f"{base}/src", "someone", "somegroup")
    locals_ = []
    for index in range(4):
        local = tmp_path / f"l{index}"
        local.write_bytes(b"%d" % index)
        locals_.append(str(local))
    client.mkdirs(f"{base}/up")
    results = dfs.run(
        dfs("-cp", "-p", f"{base}/src", f"{base}/kept"),
        dfs("-cp", f"{base}/src", f"{base}/plain"),
        dfs("-put", "-t", "3", *locals_, str(tmp_path / "missing"), f"{base}/up"),
        dfs("-put", "-t", "0", locals_[0], f"{base}/up"),
    )
    assert [code for code, _out, _err in results] == [0, 0, 1, 2], results
    kept, plain = client.stat(f"{base}/kept"), client.stat(f"{base}/plain")
    assert (kept.mtime_ms, kept.atime_ms, kept.mode, kept.owner, kept.group) == (
        1_500_000_000_000, 1_400_000_000_000, 0o604, "someone", "somegroup")
    assert plain.mtime_ms != 1_500_000_000_000 and plain.owner != "someone"
    assert sorted(e.path.rsplit("/", 1)[-1] for e in client.list_dir(f"{base}/up")) == [
        "l0", "l1", "l2", "l3"]
    assert results[2][2] == f"put: `{tmp_path / 'missing'}': No such file or directory\n"
    assert "thread count" in results[3][2]


def _on_a_terminal(words: list[str]) -> tuple[int, str]:
    """``python -m xdfs WORDS`` with standard error on a pseudo-terminal: (exit status,
    what the terminal got)."""
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDFS_")} | ROOT_ENV
    proc = subprocess.Popen([sys.executable, "-m", "xdfs", *words], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=slave, env=env)
    os.close(slave)
    seen = b""
    while True:
        ready, _w, _x = select.select([master], [], [], 60)
        if not ready:
            break
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed its end
            break
        if not data:
            break
        seen += data
    os.close(master)
    return proc.wait(timeout=60), seen.decode(errors="replace")


def test_progress_on_a_terminal_and_quiet_in_a_pipe(
    client: Client, dfs: Dfs, base: str, tmp_path: Path, live_cluster: LiveCluster
) -> None:
    big = tmp_path / "big"
    big.write_bytes(os.urandom(BIG))
    code, shown = _on_a_terminal(dfs("-put", str(big), f"{base}/big"))
    assert code == 0, shown
    assert "put:" in shown and "B/s" in shown and "3.00M" in shown, shown
    assert client.stat(f"{base}/big").length == BIG
    code, shown = _on_a_terminal(dfs("-get", f"{base}/big", str(tmp_path / "back")))
    assert code == 0 and "get:" in shown and "B/s" in shown, shown
    assert (tmp_path / "back").read_bytes() == big.read_bytes()
    code, shown = _on_a_terminal(dfs("-cp", f"{base}/big", f"{base}/copy"))
    assert code == 0 and "cp:" in shown and "B/s" in shown, shown
    piped = dfs.each(dfs("-put", str(big), f"{base}/again"),
                     dfs("-get", f"{base}/big", str(tmp_path / "again")),
                     dfs("-cp", f"{base}/big", f"{base}/copy2"))
    assert piped == [(0, "", "")] * 3, piped
