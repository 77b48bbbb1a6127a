"""The handle a test holds on a power-loss mount: mount, ``power_cut()``, unmount.

Each mount is one daemon process (``driver.py``) over a backing dir. A power cut asks the
daemon to stop dead between two operations, kills the processes under test, detaches the
dead mount and mounts a new daemon on the same backing dir: it shows exactly the durable
state, with fresh kernel caches, and the processes restart on it.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from xdfs.common.process import ServerProcess
from xdfs.testing.lazyfs.model import Pending

FUSERMOUNT = "fusermount3"
_counter = itertools.count()


def fuse_unavailable_reason() -> str | None:
    """Why a power-loss mount cannot work here, or None when it can."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse does not exist (the kernel's fuse module, or the container's device)"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "/dev/fuse is not readable and writable by this user"
    if shutil.which(FUSERMOUNT) is None:
        return (f"{FUSERMOUNT} is not installed (apt-get install fuse3; "
                "scripts/bootstrap.sh installs it when run as root)")
    try:
        import mfusepy  # noqa: F401 -- loads libfuse3 at import
    except (ImportError, OSError) as exc:
        return f"mfusepy cannot be loaded ({exc}); `pip install -e '.[dev]'` and fuse3 give it"
    return None


def _unescape(field: str) -> str:
    """/proc/mounts writes space, tab, newline and backslash as octal escapes."""
    for code in ("040", "011", "012", "134"):
        field = field.replace("\\" + code, chr(int(code, 8)))
    return field


class LazyFS:
    def __init__(self, backing: Path, mountpoint: Path, *, log_dir: Path | None = None,
                 deadline_s: float = 60.0) -> None:
        self.backing = backing
        self.path = mountpoint
        self.log_dir = log_dir or backing.parent
        self.deadline_s = deadline_s
        self.daemon: ServerProcess | None = None
        #: What each power cut dropped, in order.
        self.cuts: list[Pending] = []
        self._control = f"xdfs-lazyfs-{os.getpid()}-{next(_counter)}-{os.urandom(4).hex()}"

    def __enter__(self) -> LazyFS:
        self.mount()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.unmount()

    def mount(self) -> None:
        reason = fuse_unavailable_reason()
        if reason is not None:
            raise RuntimeError(f"cannot mount the power-loss layer: {reason}")
        self.backing.mkdir(parents=True, exist_ok=True)
        self.path.mkdir(parents=True, exist_ok=True)
        daemon = ServerProcess(
            [sys.executable, "-X", "faulthandler", "-m", "xdfs.testing.lazyfs",
             str(self.backing), str(self.path), "--control", self._control],
            log_path=self.log_dir / "lazyfs.log", ready_pattern="lazyfs mounted on",
        )
        self.daemon = daemon
        daemon.start(self.deadline_s)

    def _ask(self, command: str) -> dict[str, int]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(self.deadline_s)
            conn.connect("\0" + self._control)
            conn.sendall(command.encode() + b"\n")
            reply: dict[str, int] = json.loads(conn.makefile("r").readline())
        return reply

    def pending(self) -> Pending:
        """What a power cut now would drop."""
        return Pending(**self._ask("pending"))

    def power_cut(self, *processes: ServerProcess) -> Pending:
        """The machine loses power: every write and directory change not yet durable is
        dropped at this instant; ``processes`` (those using the mount) are SIGKILLed; the
        mount then shows only the durable state. Returns what was dropped."""
        daemon = self.daemon
        assert daemon is not None and daemon.alive(), "the power-loss layer is not mounted"
        dropped = Pending(**self._ask("cut"))
        assert daemon.proc is not None
        daemon.proc.wait(self.deadline_s)
        for proc in processes:
            proc.kill()
        self._detach()
        self.cuts.append(dropped)
        self.mount()
        return dropped

    def mounted(self) -> bool:
        """Is anything mounted on the mount point (a dead FUSE mount too, which ``stat``
        cannot see)?"""
        target = str(self.path.absolute())
        with open("/proc/self/mounts") as mounts:
            return any(_unescape(line.split()[1]) == target for line in mounts)

    def _detach(self) -> None:
        if self.mounted():
            subprocess.run([FUSERMOUNT, "-u", "-z", str(self.path)], check=True,
                           capture_output=True, timeout=self.deadline_s)

    def unmount(self) -> None:
        """Stop the daemon (a clean unmount: nothing is dropped, nothing more synced)."""
        if self.daemon is not None:
            if self.daemon.alive():
                self.daemon.terminate(self.deadline_s)
            self.daemon = None
        self._detach()


@dataclass(frozen=True)
class CrashSite:
    """Where a crash test keeps server storage and how a crash happens there: on a plain
    directory a crash is SIGKILL (the page cache survives it); on a power-loss mount it
    is a power cut (only what was synced survives). One test body runs both ways."""

    root: Path
    disk: LazyFS | None = None

    @property
    def power_loss(self) -> bool:
        return self.disk is not None

    def crash(self, *processes: ServerProcess) -> None:
        """SIGKILL ``processes``; on a power-loss mount, cut the power first."""
        if self.disk is not None:
            self.disk.power_cut(*processes)
        for proc in processes:
            proc.kill()
