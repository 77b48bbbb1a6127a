"""The host side of the power-loss layer's "disk": durable file bytes as one host file per
inode (``BACKING/inodes/<ino>``) and the durable state as ``BACKING/state.json``.

The host itself never loses power in a test, so a write here is durable once it returns;
the state file is replaced atomically (temp file, rename) so that the daemon dying at any
instant leaves the state of the last completed sync.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import msgspec

from xdfs.testing.lazyfs.model import DurableState

STATE_FILE = "state.json"
INODES_DIR = "inodes"


class HostStore:
    def __init__(self, backing: Path) -> None:
        self.backing = backing
        self.inodes = backing / INODES_DIR
        self.inodes.mkdir(parents=True, exist_ok=True)
        self._fds: dict[int, int] = {}

    def _fd(self, ino: int, create: bool) -> int | None:
        fd = self._fds.get(ino)
        if fd is None:
            flags = os.O_RDWR | (os.O_CREAT if create else 0)
            try:
                fd = os.open(self.inodes / str(ino), flags, 0o600)
            except FileNotFoundError:
                return None
            self._fds[ino] = fd
        return fd

    def read(self, ino: int, offset: int, size: int) -> bytes:
        fd = self._fd(ino, False)
        return b"" if fd is None or size <= 0 else os.pread(fd, size, offset)

    def write(self, ino: int, offset: int, data: bytes) -> None:
        fd = self._fd(ino, True)
        assert fd is not None
        view = memoryview(data)
        while view:
            done = os.pwrite(fd, view, offset)
            view, offset = view[done:], offset + done

    def truncate(self, ino: int, size: int) -> None:
        fd = self._fd(ino, size > 0)
        if fd is not None:
            os.ftruncate(fd, size)

    def size(self, ino: int) -> int:
        fd = self._fd(ino, False)
        return 0 if fd is None else os.fstat(fd).st_size

    def delete(self, ino: int) -> None:
        fd = self._fds.pop(ino, None)
        if fd is not None:
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            (self.inodes / str(ino)).unlink()

    def inos(self) -> list[int]:
        return [int(name) for name in os.listdir(self.inodes) if name.isdigit()]

    def save(self, state: DurableState) -> None:
        tmp = self.backing / (STATE_FILE + ".tmp")
        tmp.write_bytes(msgspec.json.encode(state))
        os.replace(tmp, self.backing / STATE_FILE)

    def load(self) -> DurableState | None:
        try:
            data = (self.backing / STATE_FILE).read_bytes()
        except FileNotFoundError:
            return None
        return msgspec.json.decode(data, type=DurableState)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
