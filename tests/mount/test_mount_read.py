"""``xdfs mount``, read side: what ``cat``, ``ls``, ``find``, ``grep -r`` and ``cp -r`` see
on the mount is what the cluster holds (``xdfs dfs -cat`` and the client)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.datapath.conftest import payload
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


def test_big_directory_is_listed_whole(client: Client, mount: Mount, base: str) -> None:
    names = {f"f{i:05d}" for i in range(2500)}  # more than two listing pages
    for name in names:
        client.create(f"{base}/{name}")
        client.complete(f"{base}/{name}", [])
    assert set(os.listdir(mount.path / base.lstrip("/"))) == names
