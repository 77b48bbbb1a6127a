"""A disk that fills up: a small tmpfs (needs root) and a filler that takes its last byte,
for the tests and benches of a server whose writes fail with ENOSPC."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (mount's notation: ``2m``) mounted at a new directory ``path``;
    raises ``OSError`` with mount's message when it cannot be mounted."""
    path.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                             capture_output=True, check=False)
    if mounted.returncode != 0:
        raise OSError(f"cannot mount a tmpfs: {mounted.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(path: Path) -> Path:
    """Write zeros into ``path/filler`` until its file system is full; the filler's path
    (delete it to free the space)."""
    filler = path / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        with contextlib.suppress(OSError):
            while os.write(fd, bytes(4096)):
                pass
    finally:
        os.close(fd)
    return filler
