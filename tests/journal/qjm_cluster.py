"""A quorum journal of three ``xdfs journalnode`` processes and NameNodes writing through
it, for the process tests of the journal and of HA."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from xdfs.client.client import AsyncClient
from xdfs.common.process import ProcessGroup, ServerProcess
from xdfs.common.secrets import new_secret_file
from xdfs.config import XdfsConfig
from xdfs.testing.net import free_port

USER, PASSWORD = "root", "pw"
ENV = {"XDFS_USER": USER, "XDFS_PASSWORD": PASSWORD}
JOURNAL_ID = "ns1"
WORKERS = 4


@dataclass
class QjmCluster:
    base: Path  # where the JournalNodes keep their journals (maybe on the power-loss layer)
    group: ProcessGroup
    secret: Path
    ports: list[int] = field(default_factory=lambda: [free_port() for _ in range(3)])
    journalnodes: dict[int, ServerProcess] = field(default_factory=dict)
    namenode: ServerProcess | None = None
    address: str = ""

    @property
    def uri(self) -> str:
        return f"qjournal://{';'.join(f'127.0.0.1:{p}' for p in self.ports)}/{JOURNAL_ID}"

    extra: list[str] = field(default_factory=list)

    def conf(self) -> list[str]:
        return ["-D", f"journalnode.secret_file={self.secret}",
                "-D", f"namenode.shared_edits={self.uri}",
                "-D", "namenode.journal_write_timeout_s=5",
                "-D", "namenode.journal_call_timeout_s=5", *self.extra]

    def start_journalnode(self, index: int) -> ServerProcess:
        proc = self.group.start_xdfs(
            f"jn{index}", *self.conf(), "journalnode",
            "--journal-dir", str(self.base / f"jn{index}"),
            "--rpc-address", f"127.0.0.1:{self.ports[index]}",
            ready_pattern=r"journalnode serving on (\S+)",
        )
        self.journalnodes[index] = proc
        return proc

    def xdfs(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "xdfs", *self.conf(), *args],
                              env={**os.environ, **ENV}, capture_output=True, text=True,
                              timeout=120)

    def format(self, name_dir: Path) -> None:
        for args in (("namenode", "--name-dir", str(name_dir), "-format"),
                     ("namenode", "--name-dir", str(name_dir), "-initializeSharedEdits")):
            result = self.xdfs(*args)
            assert result.returncode == 0, result.stderr

    def start_all(self, name_dir: Path) -> ServerProcess:
        """Three JournalNodes, ``name_dir`` formatted with the journal initialized from
        it, and a NameNode on it."""
        for index in range(3):
            self.start_journalnode(index)
        self.format(name_dir)
        return self.start_namenode(name_dir)

    def start_namenode(self, name_dir: Path, name: str = "nn") -> ServerProcess:
        proc = self.group.start_xdfs(
            name, *self.conf(), "namenode", "--name-dir", str(name_dir),
            "--rpc-address", "127.0.0.1:0", ready_pattern=r"namenode serving on (\S+)",
            env=ENV,
        )
        assert proc.match is not None
        self.namenode, self.address = proc, proc.match.group(1)
        return proc

    def client(self) -> AsyncClient:
        return AsyncClient(f"xdfs://{self.address}", user=USER, password=PASSWORD,
                           config=XdfsConfig())


def make_cluster(tmp_path: Path, journal_base: Path) -> QjmCluster:
    group = ProcessGroup(tmp_path / "logs")
    secret = tmp_path / "journal.secret"
    new_secret_file(secret)
    return QjmCluster(journal_base, group, secret)


@contextlib.contextmanager
def running(cluster: QjmCluster) -> Iterator[QjmCluster]:
    try:
        yield cluster
    finally:
        cluster.group.kill_all()


