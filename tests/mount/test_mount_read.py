"""``xdfs mount``, read side: what ``cat``, ``ls``, ``find``, ``grep -r`` and ``cp -r`` see
on the mount is what the cluster holds (``xdfs dfs -cat`` and the client)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tests.datapath.conftest import LiveCluster, payload
from tests.mount.conftest import Mount
from xdfs.client.client import Client


def run(*command: str, cwd: Path | None = None) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_programs_see_what_the_cluster_holds(client: Client, mount: Mount, base: str,
                                             tmp_path: Path) -> None:
    files = {
        "a.txt": b"hello mount\n",
        "empty": b"",
        "sub/deep/b.bin": payload(3 * 256 * 1024 + 17, seed=1),  # several blocks
        "sub/c.txt": b"".join(b"line %d needle\n" % i for i in range(2000)),
    }
    for name, data in files.items():
        client.write_file(f"{base}/{name}", data)
    root = mount.path / base.lstrip("/")

    assert run("cat", str(root / "a.txt")) == "hello mount\n"
    for name, data in files.items():
        assert (root / name).read_bytes() == data
    listing = run("ls", "-l", str(root))
    assert "a.txt" in listing and "sub" in listing
    found = sorted(run("find", str(root)).split())
    assert found == sorted([str(root), *(str(root / n) for n in files),
                            str(root / "sub"), str(root / "sub/deep")])
    assert run("grep", "-rl", "needle", str(root)).split() == [str(root / "sub/c.txt")]
    run("cp", "-r", str(root), str(tmp_path / "copy"))
    for name, data in files.items():
        assert (tmp_path / "copy" / name).read_bytes() == data
    assert os.stat(root / "sub/deep/b.bin").st_size == len(files["sub/deep/b.bin"])
    assert os.statvfs(mount.path).f_blocks > 0  # the cluster's capacity
    assert int(run("du", "-sb", str(root)).split()[0]) == sum(map(len, files.values()))
    assert run("stat", "-c", "%s %a", str(root / "a.txt")) == "12 644\n"


def test_big_directory_is_listed_whole(client: Client, mount: Mount, base: str) -> None:
    names = {f"f{i:05d}" for i in range(2500)}  # more than two listing pages
    for name in names:
        client.create(f"{base}/{name}")
        client.complete(f"{base}/{name}", [])
    assert set(os.listdir(mount.path / base.lstrip("/"))) == names


def test_two_mounts_see_each_others_changes_after_close(
        client: Client, live_cluster: LiveCluster, mount: Mount, base: str,
        tmp_path: Path) -> None:
    other = Mount(live_cluster, tmp_path / "other", tmp_path / "other.log",
                  "attr_timeout=0.2,entry_timeout=0.2").start()
    try:
        mine, theirs = (m.path / base.lstrip("/") / "shared" for m in (mount, other))
        mine.write_bytes(b"first version")
        assert theirs.read_bytes() == b"first version"  # read once: in its page cache
        mine.write_bytes(b"other version")  # the same length, other bytes
        poll_until(lambda: theirs.read_bytes() == b"other version")
        with open(mine, "ab") as out:  # the same inode, grown
            out.write(b", appended")
        poll_until(lambda: theirs.read_bytes() == b"other version, appended")
        (theirs.parent / "new").write_bytes(b"from the other mount")
        poll_until(lambda: "new" in os.listdir(mine.parent))
        assert (mine.parent / "new").read_bytes() == b"from the other mount"
    finally:
        other.stop()


def poll_until(condition: Callable[[], bool], deadline_s: float = 30.0) -> None:
    """The attribute timeout passes, then the change is seen (no timing asserted)."""
    end = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < end, "the change was never seen"
        time.sleep(0.05)
