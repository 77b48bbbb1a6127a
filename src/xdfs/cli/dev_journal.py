"""``xdfs dev --journal N``: the dev cluster's NameNode writes through N JournalNodes.

The JournalNodes keep ``DIR/journalnode<i>``, serve on ports chosen once and kept in
``DIR/journal.json`` (the NameNode's ``qjournal://`` URI names them, so they must come back
on the same addresses), and admit callers with ``DIR/journal.secret`` (made once, mode
0600). A new cluster's journal is formatted from the NameNode's dir with
``-initializeSharedEdits``; a cluster that ran without a journal before gets it the same way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from xdfs.common.files import atomic_write
from xdfs.common.process import ServerProcess
from xdfs.common.secrets import new_secret_file

JOURNAL_ID = "dev"
LAYOUT_FILE = "journal.json"
SECRET_FILE = "journal.secret"


@dataclass(frozen=True)
class DevJournal:
    base: Path
    ports: tuple[int, ...]

    @property
    def uri(self) -> str:
        return f"qjournal://{';'.join(f'127.0.0.1:{p}' for p in self.ports)}/{JOURNAL_ID}"

    @property
    def secret(self) -> Path:
        return self.base / SECRET_FILE

    def conf(self) -> list[str]:
        """The -D options every process that talks to the journal needs."""
        return ["-D", f"journalnode.secret_file={self.secret}",
                "-D", f"namenode.shared_edits={self.uri}"]

    def directory(self, index: int) -> Path:
        return self.base / f"journalnode{index}"

    @property
    def initialized(self) -> bool:
        return any((self.directory(i) / JOURNAL_ID).is_dir() for i in range(len(self.ports)))


def dev_journal(base: Path, count: int) -> DevJournal:
    """The journal layout of this base dir: made on first use, then always the same."""
    from xdfs.testing.net import free_port

    layout = base / LAYOUT_FILE
    if layout.exists():
        ports = tuple(json.loads(layout.read_text())["ports"])
        if len(ports) != count:
            raise click.UsageError(f"{base} has a journal of {len(ports)} JournalNodes "
                                   f"({layout}); run it with --journal {len(ports)}")
    else:
        ports = tuple(free_port() for _ in range(count))
        atomic_write(layout, json.dumps({"ports": list(ports)}).encode())
    journal = DevJournal(base, ports)
    if not journal.secret.exists():
        new_secret_file(journal.secret)
    return journal


def journalnode_processes(journal: DevJournal, conf: list[str]) -> list[ServerProcess]:
    return [
        ServerProcess.xdfs(
            *conf, *journal.conf(), "-D", "journalnode.http_address=127.0.0.1:0",
            "journalnode", "--journal-dir", str(journal.directory(i)),
            "--rpc-address", f"127.0.0.1:{port}",
            log_path=journal.base / "logs" / f"journalnode{i}.log",
            ready_pattern=r"journalnode serving on (\S+)", die_with_parent=True,
        )
        for i, port in enumerate(journal.ports)
    ]


def initialize_if_new(journal: DevJournal, name_dir: Path, conf: list[str],
                      env: dict[str, str]) -> None:
    """Format the journal from the NameNode's dir the first time (its edits copied in)."""
    if journal.initialized:
        return
    result = subprocess.run(
        [sys.executable, "-m", "xdfs", *conf, *journal.conf(), "namenode", "--name-dir",
         str(name_dir), "-initializeSharedEdits"],
        env={**os.environ, **env}, capture_output=True, text=True, timeout=120,
    )
    if result.returncode != 0:
        lines = (result.stderr or result.stdout).strip().splitlines()
        raise click.ClickException(f"initializing the journal failed: "
                                   f"{lines[-1] if lines else 'no output'}")
