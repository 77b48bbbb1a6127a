"""MooseFS 3 on loopback, started and stopped by a benchmark so both systems run in one run.

MooseFS (a C distributed file system, Debian packages ``moosefs-master moosefs-chunkserver
moosefs-client moosefs-metalogger moosefs-cli`` plus ``fuse3``) is the peer issue 14 compares
xdfs with: one master, one metalogger, N chunkservers and a FUSE mount, all under one root
directory and bound to 127.0.0.1. Facts this relies on (checked on Debian 12, MooseFS 3.0.117):

* the master refuses chunkservers at 127/8 addresses; its REMAP options rewrite 127.0.0.1 to
  0.0.0.0, which Linux delivers over lo, and chunkservers are pointed at 0.0.0.0 for the same
  reason;
* a chunkserver counts only once it has reported its disk space (``mfscli -SCS`` column 11),
  else a goal-2 write gets one copy;
* mounted with the attribute, entry and directory-entry caches off, metadata calls reach the
  master as an xdfs client's reach the NameNode (the kernel would otherwise answer repeated
  stats itself, over 100k/s);
* the master does not fsync its changelog (``CHANGELOG_SAVE_MODE = 0``, its default).

:func:`available` says why MooseFS cannot run here (a clear line for the benchmark to print)
or returns ``""``. The ports are fixed (9419-9421 and 9422 + 100 k): one peer at a time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench_env import pids_with_argument

_BINARIES = ("mfsmaster", "mfsmetalogger", "mfschunkserver", "mfsmount", "mfscli", "mfssetgoal")
_EMPTY_METADATA = Path("/var/lib/mfs/metadata.mfs.empty")
_PACKAGES = "moosefs-master moosefs-chunkserver moosefs-client moosefs-metalogger moosefs-cli"
UNCACHED = ("-o", "mfsattrcacheto=0", "-o", "mfsentrycacheto=0", "-o", "mfsdirentrycacheto=0")
MASTER_PORTS = (9419, 9420, 9421)  # metalogger, chunkservers, clients


def install() -> None:
    """Install the Debian packages when missing and this is root on Debian (else nothing)."""
    if all(shutil.which(name) for name in _BINARIES) or os.geteuid() != 0:
        return
    if shutil.which("apt-get") is None:
        return
    print("installing MooseFS from Debian's packages ...", file=sys.stderr, flush=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", *_PACKAGES.split(), "fuse3"],
                   capture_output=True, check=False)


def available() -> str:
    """``""`` when MooseFS can start here (installed by :func:`install` first), else one line
    saying what is missing."""
    install()
    missing = [name for name in _BINARIES if shutil.which(name) is None]
    if missing or not _EMPTY_METADATA.exists():
        return f"MooseFS not installed (apt-get install {_PACKAGES} fuse3)"
    if shutil.which("fusermount3") is None or not Path("/dev/fuse").exists():
        return "MooseFS needs FUSE (/dev/fuse and fusermount3)"
    return ""


class MooseFS:
    """One master, one metalogger, ``chunkservers`` chunkservers and a mount at ``mount``."""

    def __init__(self, root: Path, chunkservers: int = 3, goal: int = 2) -> None:
        self.root = root
        self.chunkservers = chunkservers
        self.goal = goal
        self.mount = root / "mnt"
        self._cfg = root / "cfg"

    # -- lifecycle ------------------------------------------------------------------------

    def start(self, *, uncached: bool = True, ready_timeout_s: float = 60.0) -> None:
        self._write_configs()
        _run("mfsmaster", "-c", str(self._cfg / "mfsmaster.cfg"), "start")
        _run("mfsmetalogger", "-c", str(self._cfg / "mfsmetalogger.cfg"), "start")
        for i in range(1, self.chunkservers + 1):
            _run("mfschunkserver", "-c", str(self._cfg / f"mfschunkserver{i}.cfg"), "start")
        self._wait_for_chunkservers(ready_timeout_s)
        options = ["-o", "mfscachemode=AUTO", *(UNCACHED if uncached else ())]
        _run("mfsmount", str(self.mount), "-H", "127.0.0.1", "-P", "9421", *options)
        _run("mfssetgoal", "-r", str(self.goal), str(self.mount))

    def stop(self) -> None:
        """Unmount and stop every daemon (each by its own lock file); never raises."""
        if self.mount.is_mount():
            subprocess.run(["fusermount3", "-u", str(self.mount)], check=False,
                           capture_output=True)
        for cfg in sorted(self._cfg.glob("mfschunkserver*.cfg")):
            _run_quietly("mfschunkserver", "-c", str(cfg), "stop")
        for daemon in ("mfsmetalogger", "mfsmaster"):
            cfg = self._cfg / f"{daemon}.cfg"
            if cfg.exists():
                _run_quietly(daemon, "-c", str(cfg), "stop")

    def pids(self) -> list[int]:
        """The running daemons and the mount's FUSE process."""
        arguments = [self._cfg / f"{daemon}.cfg" for daemon in ("mfsmaster", "mfsmetalogger")]
        arguments += sorted(self._cfg.glob("mfschunkserver*.cfg"))
        arguments.append(self.mount)
        return [pid for argument in arguments for pid in pids_with_argument(str(argument).encode())]

    def __enter__(self) -> MooseFS:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- configuration --------------------------------------------------------------------

    def _wait_for_chunkservers(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            listing = subprocess.run(
                ["mfscli", "-H", "127.0.0.1", "-P", "9421", "-SCS"],
                capture_output=True, text=True, check=False,
            ).stdout
            ready = [line for line in listing.splitlines()
                     if line.startswith("chunk servers") and _reported_space(line)]
            if len(ready) >= self.chunkservers:
                return
            time.sleep(0.5)
        raise RuntimeError(f"MooseFS: {self.chunkservers} chunkservers not ready in {timeout_s} s")

    def _write_configs(self) -> None:
        for sub in ("master", "ml", "mnt", "cfg"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        (self._cfg / "mfsexports.cfg").write_text(
            "127.0.0.1 / rw,alldirs,admin,maproot=0:0\n127.0.0.1 . rw\n")
        (self._cfg / "mfstopology.cfg").write_text("")
        self._write(self._cfg / "mfsmaster.cfg", {
            "DATA_PATH": self.root / "master",
            "EXPORTS_FILENAME": self._cfg / "mfsexports.cfg",
            "TOPOLOGY_FILENAME": self._cfg / "mfstopology.cfg",
            "MATOML_LISTEN_HOST": "127.0.0.1", "MATOCS_LISTEN_HOST": "127.0.0.1",
            "MATOCL_LISTEN_HOST": "127.0.0.1", "MATOML_LISTEN_PORT": MASTER_PORTS[0],
            "MATOCS_LISTEN_PORT": MASTER_PORTS[1], "MATOCL_LISTEN_PORT": MASTER_PORTS[2],
            "CHANGELOG_SAVE_MODE": 0, "REPLICATIONS_DELAY_INIT": 0,
            # see the module docstring: 127.0.0.1 is rewritten to 0.0.0.0
            "REMAP_BITS": 32, "REMAP_SOURCE_IP_CLASS": "127.0.0.1",
            "REMAP_DESTINATION_IP_CLASS": "0.0.0.0",
        })
        self._write(self._cfg / "mfsmetalogger.cfg", {
            "DATA_PATH": self.root / "ml", "MASTER_HOST": "127.0.0.1",
            "MASTER_PORT": MASTER_PORTS[0], "BIND_HOST": "127.0.0.1", "META_DOWNLOAD_FREQ": 1,
        })
        for i in range(1, self.chunkservers + 1):
            self._write_chunkserver(i)
        metadata = self.root / "master" / "metadata.mfs"
        if not metadata.exists() and not metadata.with_suffix(".mfs.back").exists():
            shutil.copyfile(_EMPTY_METADATA, metadata)

    def _write_chunkserver(self, i: int) -> None:
        data, hdd = self.root / f"cs{i}" / "data", self.root / f"cs{i}" / "hdd"
        data.mkdir(parents=True, exist_ok=True)
        hdd.mkdir(parents=True, exist_ok=True)
        (self._cfg / f"mfshdd{i}.cfg").write_text(f"{hdd}\n")
        self._write(self._cfg / f"mfschunkserver{i}.cfg", {
            "DATA_PATH": data, "HDD_CONF_FILENAME": self._cfg / f"mfshdd{i}.cfg",
            "BIND_HOST": "127.0.0.1", "MASTER_HOST": "0.0.0.0", "MASTER_PORT": MASTER_PORTS[1],
            "CSSERV_LISTEN_HOST": "127.0.0.1", "CSSERV_LISTEN_PORT": 9422 + 100 * (i - 1),
            "HDD_LEAVE_SPACE_DEFAULT": "1GiB",
        })

    @staticmethod
    def _write(path: Path, settings: dict[str, object]) -> None:
        head = {"WORKING_USER": "root", "WORKING_GROUP": "root", "SYSLOG_IDENT": "benchmfs"}
        lines = [f"{key} = {value}\n" for key, value in {**head, **settings}.items()]
        path.write_text("".join(lines))


@contextmanager
def bench_peer(base: Path) -> Iterator[MooseFS | None]:
    """A MooseFS under ``base/mfs``, mounted uncached, with a ``bench`` directory at the
    top of its mount; or, with the reason on stderr, None where MooseFS is missing or does
    not start (a benchmark then measures xdfs alone). Stopped at the end."""
    why_not = available()
    if why_not:
        print(f"MooseFS skipped: {why_not}", file=sys.stderr)
        yield None
        return
    peer = MooseFS(base / "mfs")
    try:
        try:
            peer.start(uncached=True)
        except RuntimeError as exc:  # e.g. another MooseFS holds its fixed ports
            lines = [line for line in str(exc).splitlines() if "can't" in line or
                     "failed" in line or "error" in line]
            print(f"MooseFS skipped: it did not start ({'; '.join(lines[-2:])})",
                  file=sys.stderr)
            yield None
            return
        (peer.mount / "bench").mkdir(exist_ok=True)
        yield peer
    finally:
        peer.stop()


def _reported_space(line: str) -> bool:
    columns = line.split("\t")
    try:
        return len(columns) > 10 and float(columns[10]) > 0
    except ValueError:
        return False


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {(done.stderr or done.stdout).strip()}")


def _run_quietly(*argv: str) -> None:
    subprocess.run(argv, capture_output=True, check=False)
