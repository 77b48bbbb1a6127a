"""Compile the NameNode's hot pure modules with mypyc (xdfs.common.native.NATIVE_MODULES).

    .venv/bin/python scripts/build_native.py          # build (run by make setup)
    .venv/bin/python scripts/build_native.py --clean  # remove the build: pure Python

The extensions go next to their sources in src/ (an editable install imports them from
there); the manifest of the compiled sources is written last, so a failed or interrupted
build leaves none and the sources are used (xdfs.common.native.install_guard). Needs a C
compiler and the Python headers; mypyc comes with mypy (the dev extra).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
sys.path.insert(0, str(SRC))

from xdfs.common import native  # noqa: E402  (after the path: the checkout's own copy)

#: Name of the shared library the compiled modules link (one per build, in src/).
GROUP = "xdfs_native"


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
    Path(native.manifest_path()).write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")
    problem = import_problem()
    if problem:
        clean()  # a build that cannot be imported must never be loaded
        raise SystemExit(f"build_native: the compiled modules do not import ({problem}); "
                         "removed, the pure-Python modules are used")
    print(f"build_native: compiled {len(digests)} modules with mypyc "
          f"({len(built_files())} extensions in src/)")


def import_problem() -> str:
    """Why a fresh process cannot load the whole build ("" when it can): mypyc accepts
    some code whose module then fails at import (a dataclass field typed ``object``)."""
    script = ("from xdfs.common import native; import sys; n = len(native.compiled_modules()); "
              "sys.exit(0 if n == len(native.NATIVE_MODULES) else f'{n} compiled')")
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    env.pop(native.PURE_ENV, None)
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                            text=True, timeout=300, check=False)
    if result.returncode == 0:
        return ""
    lines = (result.stderr.strip() or f"exit status {result.returncode}").splitlines()
    return lines[-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clean", action="store_true", help="remove the compiled build")
    args = parser.parse_args()
    if args.clean:
        clean()
        print("build_native: removed; the pure-Python modules are used")
        return 0
    if shutil.which(os.environ.get("CC", "cc")) is None:
        print("build_native: no C compiler; the pure-Python modules are used", file=sys.stderr)
        return 1
    build()
    return 0


if __name__ == "__main__":
    sys.exit(main())
