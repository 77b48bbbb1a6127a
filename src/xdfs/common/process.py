"""Run an xdfs server as a real child process (xdfs dev supervises them; tests SIGKILL them).

Output goes to a log file (never a pipe that could fill and block the child); readiness is
a regular expression matched against that log within a mandatory deadline. Every child
runs in its own session, so killing it takes its own children too, and
:class:`ProcessGroup` kills whatever a test left running, by pid.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path


class ProcessError(AssertionError):
    """A child did not become ready, or exited when it should not have."""


class ServerProcess:
    def __init__(
        self,
        args: Sequence[str],
        *,
        log_path: Path,
        ready_pattern: str,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.args = list(args)
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
                env=self.env, cwd=self.cwd, start_new_session=True,
            )
        self.match = self.wait_for(self.ready_pattern, deadline_s, offset)
        return self.match

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
                    f"{self.args} exited with {self.proc.returncode} before ready:\n{text[-3000:]}"
                )
            if time.monotonic() > end:
                self.kill()
                raise ProcessError(f"{self.args} not ready within {deadline_s} s:\n{text[-3000:]}")
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
