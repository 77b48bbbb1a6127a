"""Named fault hooks at every persist point, for crash tests (shared by every server).

:func:`fault_point` is called at each persist point with a dotted name listed in
:data:`FAULT_POINTS` (roles add theirs with :meth:`FaultRegistry.register`). It costs one
truthiness test in production. Tests arm a point with :meth:`FaultRegistry.arm` (raise an
exception, call a function, ``exit``, ``kill`` or ``stop`` the process); real processes can
be armed through ``XDFS_FAULTS="name=kill,name2=exit"`` read by :func:`arm_faults_from_env`.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Literal

log = logging.getLogger("xdfs.faults")

#: Every named persist point, with what has (and has not) happened when it fires.
FAULT_POINTS: dict[str, str] = {
    "editlog.before_write": "a flush batch is about to be written to a segment",
    "editlog.before_fsync": "a batch is written but not yet fsynced (an RWF_DSYNC write: synced)",
    "editlog.after_fsync": "a batch is durable but no waiter has been told",
    "editlog.segment_created": "a new in-progress segment exists with its header",
    "editlog.before_finalize": "a segment is complete and about to be renamed",
    "editlog.after_finalize": "a segment was renamed to edits_<start>-<end>",
    "storage.before_rename": "a temp file (VERSION, seen_txid, md5) is fsynced, not renamed",
    "image.before_rename": "fsimage.ckpt_<txid> and its md5 are durable, not yet renamed",
    "image.after_rename": "fsimage_<txid> is in place",
    "image.ckpt_started": "fsimage.ckpt_<txid> has its header, no inode yet (in the forked "
                          "writer when the NameNode checkpoints)",
    "recovery.before_truncate": "recovery found a torn tail and is about to truncate it",
    "purge.before_delete": "purge decided what to delete and is about to delete it",
    "namenode.keyed_call_durable": "an at-most-once call's ops are durable, no answer sent",
}

FAULTS_ENV = "XDFS_FAULTS"
FaultAction = BaseException | Callable[[str], None] | Literal["exit", "kill", "stop"]


class FaultRegistry:
    """Armed fault points. Thread-safe: points fire in I/O worker threads."""

    def __init__(self) -> None:
        self._armed: dict[str, tuple[FaultAction, int, int | None]] = {}
        self._lock = threading.Lock()
        # a forked child (the image writer) must not inherit the lock held by another thread
        os.register_at_fork(after_in_child=self._new_lock)

    def _new_lock(self) -> None:
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self._armed)

    def register(self, name: str, doc: str) -> None:
        """Declare a fault point defined elsewhere (server, journal) so it can be armed."""
        FAULT_POINTS.setdefault(name, doc)

    def arm(
        self, name: str, action: FaultAction, *, skip: int = 0, times: int | None = None
    ) -> None:
        """Fire ``action`` at ``name`` after ``skip`` passes, ``times`` times (None: always).

        ``action``: an exception instance (raised), a callable (called with the name; it may
        raise), ``"exit"`` (``os._exit(86)``), ``"kill"`` (SIGKILL ourselves) or ``"stop"``
        (SIGSTOP ourselves: paused until SIGCONT)."""
        if name not in FAULT_POINTS:
            raise KeyError(f"unknown fault point {name!r}; known: {sorted(FAULT_POINTS)}")
        with self._lock:
            self._armed[name] = (action, skip, times)

    def disarm(self, name: str | None = None) -> None:
        with self._lock:
            if name is None:
                self._armed.clear()
            else:
                self._armed.pop(name, None)

    @contextlib.contextmanager
    def armed(
        self, name: str, action: FaultAction, *, skip: int = 0, times: int | None = None
    ) -> Iterator[None]:
        self.arm(name, action, skip=skip, times=times)
        try:
            yield
        finally:
            self.disarm(name)

    def hit(self, name: str) -> None:
        with self._lock:
            entry = self._armed.get(name)
            if entry is None:
                return
            action, skip, times = entry
            if skip > 0:
                self._armed[name] = (action, skip - 1, times)
                return
            if times is not None:
                if times <= 1:
                    del self._armed[name]
                else:
                    self._armed[name] = (action, 0, times - 1)
        if action == "exit":
            log.critical("fault point %s: exiting", name)
            os._exit(86)
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if action == "stop":  # frozen until SIGCONT (or killed)
            os.kill(os.getpid(), signal.SIGSTOP)
        if isinstance(action, BaseException):
            raise action
        if callable(action):
            action(name)


FAULTS = FaultRegistry()


def fault_point(name: str) -> None:
    """A named persist point; a no-op unless a test armed it."""
    if FAULTS:
        FAULTS.hit(name)


_ENV_ACTIONS: dict[str, FaultAction] = {
    "exit": "exit", "kill": "kill", "stop": "stop",
    # a disk that is full, or failing: the OSError the write would raise
    "enospc": OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)),
    "eio": OSError(errno.EIO, os.strerror(errno.EIO)),
    # a disk that takes its time (near full, or failing): 50 ms more at the point
    "slow": lambda _name: time.sleep(0.05),
}


def arm_faults_from_env(env: Mapping[str, str] | None = None) -> list[str]:
    """Arm ``XDFS_FAULTS="point=exit,point2=kill[@skip],point3=stop,point4=enospc"``
    (``enospc``/``eio``: the point raises that OSError, every time); returns the armed
    names."""
    spec = (os.environ if env is None else env).get(FAULTS_ENV, "").strip()
    armed: list[str] = []
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, rest = item.partition("=")
        action, _, skip = rest.partition("@")
        if action not in _ENV_ACTIONS:
            raise ValueError(f"{FAULTS_ENV}: action of {name!r} must be exit, kill or stop, "
                             "or enospc, eio or slow")
        FAULTS.arm(name, _ENV_ACTIONS[action], skip=int(skip or 0))
        armed.append(name)
    return armed
