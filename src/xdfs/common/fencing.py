"""Fencing an old active NameNode before another takes over (HDFS's ``dfs.ha.fencing.methods``):
used by a BackupNode's takeover (``backupnode.fencing_methods``) and by the failover
controller (``ha.fencing_methods``, after the old active did not step down when asked).

A NameNode that stopped answering may only be paused (SIGSTOP, a long GC, a frozen VM):
once it runs again it would acknowledge writes while the promoted backup does too. So a
takeover first *fences* it: ``backupnode.fencing_methods`` are tried in order until one
succeeds; none configured, or none succeeding, refuses the takeover (TakeoverRefused).
``key`` arguments name the configuration key in messages. Methods:

* ``shell(COMMAND)``: run ``COMMAND`` with ``sh -c`` (within the fencing timeout;
  killed, with its process group, after that); exit status 0 means fenced. As in HDFS the
  target is in the environment: ``target_address`` (host:port), ``target_host``,
  ``target_port`` and, when known, ``target_pid`` (the NameNode's pid as of the backup's
  last fetch). Its output goes to the backup's log.
* ``kill(NAME_DIR)``: the NameNode holding ``NAME_DIR/in_use.lock`` (which records
  ``pid@host``) on this host is SIGKILLed, then the lock must be free within the timeout.
  A lock nobody holds means the NameNode there is already gone: fenced. Refused for a
  holder on another host, for this very process, and for a missing lock file (a typo in
  the path must not "fence" nothing). ``xdfs dev --backup`` configures it.

:func:`parse_methods` and :func:`target_env` are pure; :func:`fence` runs the methods.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from xdfs.common.addresses import parse_address
from xdfs.common.files import LockHolder, probe_lock
from xdfs.errors import ConfigError, StorageError, TakeoverRefused, XdfsError

log = logging.getLogger(__name__)

METHODS = ("shell", "kill")
_METHOD_RE = re.compile(r"^\s*([a-z]+)\s*\((.*)\)\s*$", re.DOTALL)
LOCK_FILE = "in_use.lock"
#: How often kill() looks whether the lock was released.
_POLL_S = 0.05
#: Output of a shell method kept for the log and the refusal message.
_OUTPUT_MAX_BYTES = 4096


class FenceMethod(NamedTuple):
    kind: str  # one of METHODS
    argument: str

    def __str__(self) -> str:
        return f"{self.kind}({self.argument})"


class Target(NamedTuple):
    """The NameNode to fence."""

    address: str  # host:port
    pid: int = 0  # 0: unknown


class FenceFailed(XdfsError):
    """One method did not fence; the next one is tried. Never sent over the wire (no code
    of its own): :func:`fence` turns the failures of all methods into TakeoverRefused."""


def parse_methods(
    specs: Sequence[str], key: str = "backupnode.fencing_methods"
) -> list[FenceMethod]:
    """``["shell(cmd)", "kill(/dir)"]`` -> methods; ConfigError naming the bad entry."""
    methods = []
    for spec in specs:
        match = _METHOD_RE.match(spec)
        if match is None or match.group(1) not in METHODS:
            raise ConfigError(
                f"{key}: {spec!r} is not shell(COMMAND) or kill(NAME_DIR)"
            )
        kind, argument = match.group(1), match.group(2).strip()
        if not argument:
            raise ConfigError(f"{key}: {spec!r} needs an argument")
        methods.append(FenceMethod(kind, argument))
    return methods


def target_env(target: Target) -> dict[str, str]:
    """The variables a shell method sees (HDFS's names)."""
    host, port = parse_address(target.address)
    env = {"target_address": target.address, "target_host": host, "target_port": str(port)}
    if target.pid:
        env["target_pid"] = str(target.pid)
    return env


async def fence(
    methods: Sequence[FenceMethod], target: Target, timeout_s: float,
    key: str = "backupnode.fencing_methods",
) -> str:
    """Try each method in order; the first that succeeds is returned (as text).
    TakeoverRefused naming every failure when none does (or none is configured)."""
    if not methods:
        raise TakeoverRefused(
            f"no fencing method configured ({key}): the NameNode at "
            f"{target.address} may only be paused, and would come back as a second active "
            "NameNode; configure shell(COMMAND) or kill(NAME_DIR) (see docs/operations.md)"
        )
    failures = []
    for method in methods:
        try:
            outcome = await _run(method, target, timeout_s)
        except FenceFailed as exc:
            log.warning("fencing %s with %s failed: %s", target.address, method, exc)
            failures.append(f"{method}: {exc}")
            continue
        log.warning("fenced the NameNode at %s with %s: %s", target.address, method, outcome)
        return str(method)
    raise TakeoverRefused(
        f"could not fence the NameNode at {target.address}: {'; '.join(failures)}"
    )


async def _run(method: FenceMethod, target: Target, timeout_s: float) -> str:
    if method.kind == "shell":
        return await _shell(method.argument, target, timeout_s)
    return await asyncio.to_thread(kill_lock_holder, Path(method.argument), timeout_s)


async def _shell(command: str, target: Target, timeout_s: float) -> str:
    proc = await asyncio.create_subprocess_exec(
        "/bin/sh", "-c", command, env={**os.environ, **target_env(target)},
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT, start_new_session=True,
    )
    try:
        async with asyncio.timeout(timeout_s):
            output, _ = await proc.communicate()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        raise FenceFailed(f"still running after {timeout_s} s (killed)") from None
    text = output[-_OUTPUT_MAX_BYTES:].decode(errors="replace").strip()
    for line in text.splitlines():
        log.info("fencing command: %s", line)
    if proc.returncode != 0:
        last = text.splitlines()[-1] if text else "no output"
        raise FenceFailed(f"exit status {proc.returncode} ({last})")
    return "exit status 0"


def kill_lock_holder(name_dir: Path, timeout_s: float) -> str:
    """The ``kill(NAME_DIR)`` method (blocking: run it in a thread)."""
    path = name_dir / LOCK_FILE
    if not path.is_file():
        raise FenceFailed(f"{path} does not exist: is {name_dir} the NameNode's name dir?")
    holder = _holder(path)
    if holder is None:
        return f"no process holds {path}: the NameNode there is gone"
    here = socket.gethostname()
    if holder.host and holder.host != here:
        raise FenceFailed(f"{path} is held by {holder}, not on this host ({here})")
    if holder.pid is None or holder.pid == os.getpid():
        raise FenceFailed(f"{path} is held by {holder}: not a process this method may kill")
    try:
        os.kill(holder.pid, signal.SIGKILL)  # a stopped process dies too
    except ProcessLookupError:
        pass  # died meanwhile: the lock below tells
    except PermissionError as exc:
        raise FenceFailed(f"cannot kill {holder}: {exc}") from None
    deadline = time.monotonic() + timeout_s
    while (still := _holder(path)) is not None:
        if time.monotonic() > deadline:
            raise FenceFailed(f"{path} still held by {still} {timeout_s} s after SIGKILL")
        time.sleep(_POLL_S)
    return f"killed {holder}; {path} is free"


def _holder(path: Path) -> LockHolder | None:
    try:
        return probe_lock(path)
    except StorageError as exc:
        raise FenceFailed(exc.message) from None
