"""Compile the NameNode's hot pure modules with mypyc (xdfs.common.native.NATIVE_MODULES).

    .venv/bin/python scripts/build_native.py               # build now (make native)
    .venv/bin/python scripts/build_native.py --background  # start it, return (bootstrap)
    .venv/bin/python scripts/build_native.py --if-stale    # wait for / build (make test)
    .venv/bin/python scripts/build_native.py --clean       # remove the build: pure Python

The extensions go next to their sources in src/ (an editable install imports them from
there); the manifest of the compiled sources is written last, once the build is known to
import, so a failed, interrupted or still running build has none and the sources are used
(xdfs.common.native.install_guard). One build at a time: each holds build/native.lock
(``--background`` takes it before it returns and hands it to the build it starts, so a
``--if-stale`` right after waits for that build instead of starting another). Needs a C
compiler and the Python headers; mypyc comes with mypy (the dev extra).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
sys.path.insert(0, str(SRC))

from xdfs.common import native  # noqa: E402  (after the path: the checkout's own copy)

#: Name of the shared library the compiled modules link (one per build, in src/).
GROUP = "xdfs_native"
#: The lock one build holds, the background build's output, and how long the last took.
BUILD_DIR = ROOT / "build"
LOCK_PATH = BUILD_DIR / "native.lock"
LOG_PATH = BUILD_DIR / "native.log"
SECONDS_PATH = BUILD_DIR / "native.seconds"
#: CPU seconds of a whole build (41 modules at -O3), for the estimate before the first one.
CPU_SECONDS_GUESS = 720


def built_files() -> list[Path]:
    """Every extension in src/: the package has no other, so this is every module of any
    earlier build too (one dropped from NATIVE_MODULES must not outlive it) and the
    shared library."""
    return [*(SRC / "xdfs").rglob("*.so"), *SRC.glob(f"{GROUP}__mypyc.*.so")]


def clean() -> None:
    Path(native.manifest_path()).unlink(missing_ok=True)
    for path in built_files():
        path.unlink()


def build() -> None:
    from mypyc.build import mypycify
    from setuptools import Distribution

    clean()
    sources = [os.path.relpath(native.source_path(m), SRC) for m in native.NATIVE_MODULES]
    with tempfile.TemporaryDirectory(prefix="xdfs-mypyc-") as tmp:
        cwd = Path.cwd()
        os.chdir(SRC)  # mypyc names modules by their path from here
        os.environ["MYPY_CACHE_DIR"] = str(Path(tmp) / "mypy-cache")  # not in src/
        try:
            extensions = mypycify(sources, opt_level="3", group_name=GROUP,
                                  target_dir=str(Path(tmp) / "c"))
            dist = Distribution({"name": "xdfs-native", "ext_modules": extensions})
            command = dist.get_command_obj("build_ext")
            command.inplace = True
            command.build_temp = str(Path(tmp) / "temp")
            command.build_lib = str(Path(tmp) / "lib")
            dist.run_command("build_ext")
        finally:
            os.chdir(cwd)
    digests = native.source_digests()
    pending = Path(native.manifest_path() + ".new")
    pending.write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")
    problem = import_problem(pending)
    if problem:
        pending.unlink()
        clean()  # a build that cannot be imported must never be loaded
        raise SystemExit(f"build_native: the compiled modules do not import ({problem}); "
                         "removed, the pure-Python modules are used")
    pending.replace(native.manifest_path())  # last: from now on new processes load it
    print(f"build_native: compiled {len(digests)} modules with mypyc "
          f"({len(built_files())} extensions in src/)")


def import_problem(manifest: Path) -> str:
    """Why a fresh process cannot load the whole build ("" when it can), tried with the
    ``manifest`` not yet in place (no other process may load a build before it passes):
    mypyc accepts some code whose module then fails at import (a dataclass field typed
    ``object``)."""
    script = ("import sys; from xdfs.common import native; "
              f"native.manifest_path = lambda: {str(manifest)!r}; "
              "sys.meta_path[:] = [f for f in sys.meta_path "
              "if not isinstance(f, native._SourceFirst)]; native.install_guard(); "
              "n = len(native.compiled_modules()); "
              "sys.exit(0 if n == len(native.NATIVE_MODULES) else f'{n} compiled')")
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    env.pop(native.PURE_ENV, None)
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                            text=True, timeout=300, check=False)
    if result.returncode == 0:
        return ""
    lines = (result.stderr.strip() or f"exit status {result.returncode}").splitlines()
    return lines[-1]


def _open_lock() -> IO[str]:
    BUILD_DIR.mkdir(exist_ok=True)
    return open(LOCK_PATH, "a", encoding="utf-8")  # held past this frame


def _try_lock(lock: IO[str]) -> bool:
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _shown(path: Path) -> str:
    return os.path.relpath(path, ROOT)


def estimate_s() -> float:
    """How long a build will take: as long as the last one, else a guess from the cores."""
    try:
        return float(SECONDS_PATH.read_text())
    except (OSError, ValueError):
        return CPU_SECONDS_GUESS / max(1, os.cpu_count() or 1)


def start_background(command: list[str] | None = None) -> subprocess.Popen[bytes] | None:
    """Start the build in a process of its own (it outlives make) and return at once; the
    lock is taken here and handed to that process, which holds it until it ends. None when
    the build is up to date or another is running."""
    if native.build_current():
        return None
    lock = _open_lock()
    try:
        if not _try_lock(lock):
            print(f"build_native: a build is already running (log: {LOG_PATH})")
            return None
        if command is None:
            command = [sys.executable, str(Path(__file__).resolve()), "--if-stale",
                       "--lock-held"]
        with open(LOG_PATH, "wb") as log:
            child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT, cwd=ROOT,
                                     pass_fds=(lock.fileno(),), start_new_session=True)
    finally:
        lock.close()  # the child's copy of the descriptor keeps the lock
    minutes = max(1, round(estimate_s() / 60))
    print(f"build_native: xdfs runs its Python sources now; the mypyc build of the NameNode "
          f"modules runs in the background (about {minutes} min on {os.cpu_count()} cores, "
          f"log: {_shown(LOG_PATH)}) and processes started after it use it")
    return child


def build_if_stale(lock_held: bool = False) -> None:
    """Build unless the build is up to date; waits first for a build already running."""
    lock = None
    if not lock_held:
        lock = _open_lock()
        if not _try_lock(lock):
            print(f"build_native: waiting for the mypyc build already running (log: "
                  f"{_shown(LOG_PATH)}, about {round(estimate_s() / 60)} min in all)",
                  flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        if native.build_current():
            print("build_native: the compiled build is up to date")
            return
        started = time.monotonic()
        build()
        SECONDS_PATH.write_text(f"{time.monotonic() - started:.0f}\n")
    finally:
        if lock is not None:
            lock.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--clean", action="store_true", help="remove the compiled build")
    what.add_argument("--background", action="store_true",
                      help="start the build in the background and return")
    what.add_argument("--if-stale", action="store_true",
                      help="build unless up to date, after any build already running")
    parser.add_argument("--lock-held", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.clean:
        clean()
        print("build_native: removed; the pure-Python modules are used")
        return 0
    if shutil.which(os.environ.get("CC", "cc")) is None:
        print("build_native: no C compiler; the pure-Python modules are used", file=sys.stderr)
        return 1
    if args.background:
        start_background()
    elif args.if_stale:
        build_if_stale(args.lock_held)
    else:
        with _open_lock() as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            build()
    return 0


if __name__ == "__main__":
    sys.exit(main())
