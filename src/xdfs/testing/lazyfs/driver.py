"""The FUSE daemon of the power-loss layer: every system call on the mount goes to a
:class:`~xdfs.testing.lazyfs.model.LazyModel` whose durable bytes live in the backing dir.

Run as its own process (``python -m xdfs.testing.lazyfs BACKING MOUNTPOINT --control NAME``,
started by :class:`~xdfs.testing.lazyfs.mount.LazyFS`). It listens on an abstract unix
socket ``NAME`` for one-line commands:

* ``pending``: what a cut now would drop (a JSON object);
* ``cut``: the power cut. Taken between two file system operations (under the model's
  lock), it answers what it drops and ends the process at once: nothing more becomes
  durable, and the next daemon on the backing dir mounts exactly the durable state.

The model is single-writer: libfuse runs single-threaded and the control thread takes
the same lock.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import json
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mfusepy

from xdfs.testing.lazyfs.model import LazyModel, fail
from xdfs.testing.lazyfs.store import HostStore

log = logging.getLogger("xdfs.testing.lazyfs")

READY_LINE = "lazyfs mounted on"
#: What libfuse's main returns after a SIGTERM/SIGINT stopped it (a clean unmount).
SIGNALLED = 8


class LazyOps(mfusepy.Operations):  # type: ignore[misc]
    """Path and handle calls of libfuse's high-level API mapped onto the model."""

    use_ns = True
    flag_nopath = True  # calls with a handle get no path: unlinked open files work
    flag_nullpath_ok = True

    def __init__(self, model: LazyModel) -> None:
        self.model = model
        self._mutex = threading.Lock()
        self.handles: dict[int, tuple[int, int]] = {}  # fh -> (inode, open flags)
        self.next_fh = 1

    def _ino(self, path: str | None, fh: int | None) -> int:
        if fh:
            try:
                return self.handles[fh][0]
            except KeyError:
                raise fail(errno.EBADF) from None
        if path is None:
            raise fail(errno.EBADF)
        return self.model.lookup(path)

    def _handle(self, ino: int, flags: int) -> int:
        self.model.open(ino)
        fh = self.next_fh
        self.next_fh += 1
        self.handles[fh] = (ino, flags)
        return fh

    # -- attributes and lookups --------------------------------------------------------

    def getattr(self, path: str | None, fh: int | None = None) -> dict[str, int]:
        with self._mutex:
            st = self.model.getattr(self._ino(path, fh))
        return {
            "st_ino": st.ino, "st_mode": st.mode, "st_nlink": st.nlink, "st_uid": st.uid,
            "st_gid": st.gid, "st_size": st.size, "st_blocks": (st.size + 511) // 512,
            "st_atime": st.atime_ns, "st_mtime": st.mtime_ns, "st_ctime": st.ctime_ns,
        }

    def readdir(self, path: str | None, fh: int) -> list[Any]:
        with self._mutex:
            entries = self.model.readdir(self._ino(path, fh))
        out: list[Any] = [".", ".."]
        out += [(name, {"st_ino": ino, "st_mode": kind}, 0) for name, ino, kind in entries]
        return out

    def readlink(self, path: str) -> str:
        with self._mutex:
            return self.model.readlink(self.model.lookup(path))

    def statfs(self, path: str) -> dict[str, int]:
        st = os.statvfs(self.model_backing)
        keys = ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files",
                "f_ffree", "f_favail", "f_namemax")
        return {key: getattr(st, key) for key in keys}

    model_backing = "/"

    def chmod(self, path: str | None, mode: int, fh: int | None = None) -> int:
        with self._mutex:
            self.model.chmod(self._ino(path, fh), mode)
        return 0

    def chown(self, path: str | None, uid: int, gid: int, fh: int | None = None) -> int:
        with self._mutex:
            self.model.chown(self._ino(path, fh), uid, gid)
        return 0

    def utimens(self, path: str | None, times: tuple[int, int] | None = None,
                fh: int | None = None) -> int:
        now = time.time_ns()
        atime, mtime = times if times is not None else (now, now)
        with self._mutex:
            self.model.utimens(self._ino(path, fh), int(atime), int(mtime))
        return 0

    # -- namespace ---------------------------------------------------------------------

    def _context(self) -> tuple[int, int]:
        uid, gid, _pid = mfusepy.fuse_get_context()
        return uid, gid

    def mkdir(self, path: str, mode: int) -> int:
        uid, gid = self._context()
        with self._mutex:
            self.model.mkdir(path, mode, uid, gid)
        return 0

    def create(self, path: str, mode: int, flags: int = 0) -> int:
        uid, gid = self._context()
        with self._mutex:
            ino = self.model.create(path, mode, uid, gid)
            return self._handle(ino, flags)

    def symlink(self, path: str, target: str) -> int:
        uid, gid = self._context()
        with self._mutex:
            self.model.symlink(path, target, uid, gid)
        return 0

    def link(self, path: str, existing: str) -> int:
        with self._mutex:
            self.model.link(existing, path)
        return 0

    def unlink(self, path: str) -> int:
        with self._mutex:
            self.model.unlink(path)
        return 0

    def rmdir(self, path: str) -> int:
        with self._mutex:
            self.model.rmdir(path)
        return 0

    def rename(self, old: str, new: str, flags: int = 0) -> int:
        with self._mutex:
            self.model.rename(old, new, flags)
        return 0

    # -- files ---------------------------------------------------------------------------

    def open(self, path: str, flags: int) -> int:
        with self._mutex:
            ino = self.model.lookup(path)
            if flags & os.O_TRUNC:
                self.model.truncate(ino, 0)
            return self._handle(ino, flags)

    def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
        with self._mutex:
            return self.model.read(self._ino(path, fh), offset, size)

    def write(self, path: str | None, data: bytes, offset: int, fh: int) -> int:
        with self._mutex:
            ino, flags = self.handles[fh]
            done = self.model.write(ino, offset, data, append=bool(flags & os.O_APPEND))
            if flags & (os.O_SYNC | os.O_DSYNC):
                self.model.fsync(ino, datasync=not flags & os.O_SYNC)
            return done

    def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
        with self._mutex:
            self.model.truncate(self._ino(path, fh), length)
        return 0

    def flush(self, path: str | None, fh: int) -> int:
        return 0  # close(2) makes nothing durable

    def release(self, path: str | None, fh: int) -> int:
        with self._mutex:
            ino, _flags = self.handles.pop(fh)
            self.model.release(ino)
        return 0

    def fsync(self, path: str | None, datasync: int, fh: int) -> int:
        with self._mutex:
            self.model.fsync(self._ino(path, fh), datasync=bool(datasync))
        return 0

    def opendir(self, path: str) -> int:
        with self._mutex:
            ino = self.model.lookup(path)
            if not self.model.node(ino).is_dir:
                raise fail(errno.ENOTDIR, path)
            return self._handle(ino, os.O_RDONLY)

    def releasedir(self, path: str | None, fh: int) -> int:
        return self.release(path, fh)

    def fsyncdir(self, path: str | None, datasync: int, fh: int) -> int:
        return self.fsync(path, datasync, fh)

    def init(self, path: str) -> None:
        print(f"{READY_LINE} {self.mountpoint}", flush=True)

    mountpoint = ""


class _Fuse(mfusepy.FUSE):  # type: ignore[misc]
    """mfusepy drops the handle of some libfuse 3 calls and rename's flags: passed on."""

    def _fh(self, fip: Any) -> int | None:
        return int(fip.contents.fh) if fip else None

    def _path(self, path: bytes | None) -> str | None:
        return None if path is None else path.decode(self.encoding, self.errors)

    def truncate_fuse_3(self, path: bytes | None, length: int, fip: Any) -> int:
        return int(self.operations.truncate(self._path(path), length, self._fh(fip)))

    def chmod_fuse_3(self, path: bytes | None, mode: int, fip: Any) -> int:
        return int(self.operations.chmod(self._path(path), mode, self._fh(fip)))

    def chown_fuse_3(self, path: bytes | None, uid: int, gid: int, fip: Any) -> int:
        uid = -1 if uid == 2**32 - 1 else uid
        gid = -1 if gid == 2**32 - 1 else gid
        return int(self.operations.chown(self._path(path), uid, gid, self._fh(fip)))

    def rename_fuse_3(self, old: bytes, new: bytes, flags: int) -> int:
        return int(self.operations.rename(self._path(old), self._path(new), flags))


def _serve_control(name: str, ops: LazyOps, ready: threading.Event) -> None:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\0" + name)
    server.listen(4)
    ready.set()
    while True:
        conn, _ = server.accept()
        with conn:
            command = conn.makefile("r").readline().strip()
            _answer(conn, command, ops)


def _answer(conn: socket.socket, command: str, ops: LazyOps) -> None:
    if command == "pending":
        with ops._mutex:
            reply = dataclasses.asdict(ops.model.pending())
        conn.sendall(json.dumps(reply).encode() + b"\n")
    elif command == "cut":
        ops._mutex.acquire()  # never released: the cut falls between two operations
        reply = dataclasses.asdict(ops.model.pending())
        conn.sendall(json.dumps(reply).encode() + b"\n")
        os._exit(0)  # power gone: no atexit, no unmount, no flush
    else:
        conn.sendall(json.dumps({"error": f"unknown command {command!r}"}).encode() + b"\n")


def serve(backing: Path, mountpoint: Path, control: str,
          clock: Callable[[], int] = time.time_ns) -> None:
    store = HostStore(backing)
    model = LazyModel.recover(store, store.load(), clock)
    ops = LazyOps(model)
    ops.mountpoint = str(mountpoint)
    ops.model_backing = str(backing)
    ready = threading.Event()
    threading.Thread(target=_serve_control, args=(control, ops, ready), daemon=True,
                     name="lazyfs control").start()
    ready.wait()
    try:
        _Fuse(ops, str(mountpoint), foreground=True, nothreads=True, fsname="lazyfs",
              default_permissions=True, use_ino=True, hard_remove=True)
    except RuntimeError as exc:
        if exc.args != (SIGNALLED,):
            raise
    finally:
        store.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m xdfs.testing.lazyfs",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("backing", type=Path)
    parser.add_argument("mountpoint", type=Path)
    parser.add_argument("--control", required=True, help="abstract unix socket name")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    serve(args.backing, args.mountpoint, args.control)
