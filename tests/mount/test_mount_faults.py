"""Faults under ``xdfs mount``: kill -9 of the mount mid-copy leaves no file a reader
could take for complete and a mount point ``fusermount3 -u`` recovers; a cluster that
stops answering gives EIO after ``call_timeout``, never a call hung forever."""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.datapath.conftest import LiveCluster
from tests.mount.conftest import Mount
from xdfs.client.client import Client
from xdfs.mount.inodes import is_temp_name
from xdfs.mount.run import FUSERMOUNT, is_mounted

WRITER = """
import sys, time
with open(sys.argv[1], "wb") as out:
    for _ in range(8):
        out.write(b"x" * (1 << 20))
    out.flush()
    print("written", flush=True)
    time.sleep(600)
"""


def test_kill_9_mid_copy_leaves_no_half_file(client: Client, live_cluster: LiveCluster,
                                             mount: Mount, base: str, tmp_path: Path) -> None:
    root = mount.path / base.lstrip("/")
    (root / "old").write_bytes(b"old content")
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(root / name)],
                                stdout=subprocess.PIPE, text=True)
               for name in ("new", "old")]  # a new file, and a rewrite (O_TRUNC)
    try:
        for writer in writers:
            assert writer.stdout is not None and writer.stdout.readline() == "written\n"
        mount.process.kill()  # SIGKILL: nothing closes the files
    finally:
        for writer in writers:
            writer.kill()
            writer.wait()
    subprocess.run([FUSERMOUNT, "-u", str(mount.path)], check=True, timeout=30)
    assert not is_mounted(mount.path)
    names = [entry.path.rsplit("/", 1)[1] for entry in client.list_dir(base)]
    assert "new" not in names  # the half-written file has its hidden name only
    assert client.read_file(f"{base}/old") == b"old content"  # the rewrite never landed
    assert len([name for name in names if is_temp_name(name)]) == 2
    again = Mount(live_cluster, mount.path, tmp_path / "again.log").start()
    try:
        assert sorted(os.listdir(root)) == ["old"]  # what is being written stays hidden
    finally:
        again.stop()


class FreezableProxy:
    """A TCP proxy to the NameNode that can stop passing bytes (a hung server)."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.running = threading.Event()
        self.running.set()
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.listener.accept()
                upstream = socket.create_connection(self.target)
                self.sockets += [conn, upstream]
                for a, b in ((conn, upstream), (upstream, conn)):
                    threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                self.running.wait()
                sink.sendall(data)

    def close(self) -> None:
        self.running.set()
        for sock in [self.listener, *self.sockets]:
            sock.close()


@pytest.fixture
def proxy(live_cluster: LiveCluster) -> Iterator[FreezableProxy]:
    made = FreezableProxy(live_cluster.address)
    try:
        yield made
    finally:
        made.close()


def test_hung_cluster_gives_eio_after_call_timeout(client: Client, proxy: FreezableProxy,
                                                   base: str, tmp_path: Path) -> None:
    client.write_file(f"{base}/f", b"data")
    mount = Mount(LiveCluster(proxy.address), tmp_path / "mnt", tmp_path / "mount.log",
                  "attr_timeout=0,entry_timeout=0,call_timeout=2")
    mount.start()
    try:
        path = mount.path / base.lstrip("/") / "f"
        assert path.read_bytes() == b"data"
        proxy.running.clear()  # the NameNode stops answering
        probe = subprocess.run([sys.executable, "-c", f"import os; os.stat({str(path)!r})"],
                               capture_output=True, text=True, timeout=60)
        assert probe.returncode == 1
        assert f"[Errno {errno.EIO}]" in probe.stderr
        assert "no answer from the cluster in 2 s" in mount.process.log_text()
        proxy.running.set()  # back: the same mount works again
        assert path.read_bytes() == b"data"
    finally:
        mount.stop()


def test_sigterm_closes_the_files_still_open(client: Client, mount: Mount, base: str) -> None:
    root = mount.path / base.lstrip("/")
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(root / "open")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "written\n"
        assert mount.process.terminate(60) == 0  # stopped with the file still open
    finally:
        writer.kill()
        writer.wait()
    assert client.read_file(f"{base}/open") == b"x" * (8 << 20)  # closed, under its name
    subprocess.run([FUSERMOUNT, "-u", "-z", str(mount.path)], timeout=30)
