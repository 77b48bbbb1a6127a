"""Run an xdfs server as a real child process (xdfs dev supervises them; tests SIGKILL them).

Output goes to a log file (never a pipe that could fill and block the child); readiness is
a regular expression matched against that log within a mandatory deadline. Every child
runs in its own session, so killing it takes its own children too, and
:class:`ProcessGroup` kills whatever a test left running, by pid. A child started with
``die_with_parent`` (``xdfs dev``'s) gets SIGTERM from the kernel when the process that
started it dies, even by SIGKILL (Linux ``prctl(PR_SET_PDEATHSIG)``, which the child's
``xdfs`` command arms first thing, see :func:`arm_parent_death_signal`; elsewhere it is
left running).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from xdfs.errors import XdfsError

#: prctl option: the signal the kernel sends a child when its parent thread exits.
_PR_SET_PDEATHSIG = 1
#: Set (to the parent's pid) in the environment of a child started with die_with_parent.
DIE_WITH_PARENT_ENV = "XDFS_DIE_WITH_PARENT"


class ProcessError(XdfsError):
    """A child did not become ready, or exited when it should not have. ``output`` is
    what it logged since it was started. Raised where the child is started (``xdfs dev``,
    tests), never sent over the wire: no code of its own."""

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.output = output

    @property
    def last_line(self) -> str:
        """The child's last line of output (usually why it stopped), or ''."""
        lines = [line for line in self.output.splitlines() if line.strip()]
        return lines[-1].strip() if lines else ""


class ServerProcess:
    def __init__(
        self,
        args: Sequence[str],
        *,
        log_path: Path,
        ready_pattern: str,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        die_with_parent: bool = False,
    ) -> None:
        self.args = list(args)
        self.die_with_parent = die_with_parent
        self.log_path = log_path
        self.ready_pattern = re.compile(ready_pattern)
        self.env = {**os.environ, **(env or {})}
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self.match: re.Match[str] | None = None

    @classmethod
    def xdfs(cls, *args: str, **kwargs: object) -> ServerProcess:
        """``python -m xdfs ARGS`` with this interpreter."""
        return cls([sys.executable, "-m", "xdfs", *args], **kwargs)  # type: ignore[arg-type]

    @property
    def pid(self) -> int:
        assert self.proc is not None, "process not started"
        return self.proc.pid

    def start(self, deadline_s: float) -> re.Match[str]:
        """Start and wait until the log matches ``ready_pattern``; raise after the deadline."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=self._child_env(), cwd=self.cwd, start_new_session=True,
            )
        self.match = self.wait_for(self.ready_pattern, deadline_s, offset)
        return self.match

    def _child_env(self) -> dict[str, str]:
        if not self.die_with_parent:
            return self.env
        return {**self.env, DIE_WITH_PARENT_ENV: str(os.getpid())}

    def wait_for(
        self, pattern: re.Pattern[str], deadline_s: float, offset: int = 0
    ) -> re.Match[str]:
        end = time.monotonic() + deadline_s
        while True:
            text = self.log_path.read_bytes()[offset:].decode(errors="replace")
            found = pattern.search(text)
            if found:
                return found
            if self.proc is not None and self.proc.poll() is not None:
                raise ProcessError(
                    f"{self.args} exited with {self.proc.returncode} before ready:\n{text[-3000:]}",
                    text,
                )
            if time.monotonic() > end:
                self.kill()
                raise ProcessError(
                    f"{self.args} not ready within {deadline_s} s:\n{text[-3000:]}", text
                )
            time.sleep(0.02)

    def log_text(self) -> str:
        return self.log_path.read_bytes().decode(errors="replace")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the process and its session (no chance to clean up), then reap it."""
        self._signal_group(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()

    def terminate(self, timeout_s: float = 15.0) -> int:
        """SIGTERM (graceful stop), SIGKILL if it has not exited within ``timeout_s``."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        self._signal_group(signal.SIGKILL)  # stragglers of its session
        return self.proc.returncode

    def _signal_group(self, sig: signal.Signals) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)


def arm_parent_death_signal() -> None:
    """In a child started with ``die_with_parent``: ask the kernel for SIGTERM when the
    parent dies, and exit at once if it already has. Done by the child itself after exec
    (a ``preexec_fn`` is unsafe in a parent that has threads); a no-op otherwise."""
    parent = os.environ.pop(DIE_WITH_PARENT_ENV, "")  # not inherited by its own children
    if not parent or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != int(parent):
        sys.exit(f"parent process {parent} has exited; not starting")


class ProcessGroup:
    """Tracks every process a test starts and kills the survivors at teardown."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        self.processes: list[ServerProcess] = []

    def start_xdfs(self, name: str, *args: str, ready_pattern: str, deadline_s: float = 60.0,
                   env: Mapping[str, str] | None = None) -> ServerProcess:
        proc = ServerProcess.xdfs(
            *args, log_path=self.base_dir / f"{name}.log", ready_pattern=ready_pattern, env=env
        )
        return self.start(proc, deadline_s)

    def start(self, proc: ServerProcess, deadline_s: float) -> ServerProcess:
        self.processes.append(proc)
        proc.start(deadline_s)
        return proc

    def kill_all(self) -> None:
        for proc in self.processes:
            proc.kill()

    def __enter__(self) -> ProcessGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill_all()
