"""The guard of the mypyc build (xdfs.common.native): compiled modules run only when built
from the sources as they are, and not when XDFS_PURE asks for the Python sources."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from xdfs.common import native


@pytest.fixture
def manifest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / native.MANIFEST_NAME
    monkeypatch.setattr(native, "manifest_path", lambda: str(path))
    monkeypatch.delenv(native.PURE_ENV, raising=False)
    return path


def test_a_build_of_the_current_sources_is_used(manifest: Path) -> None:
    manifest.write_text(json.dumps(native.source_digests()))
    assert native.compiled_usable()


def test_no_build_or_an_unreadable_manifest_means_the_sources(manifest: Path) -> None:
    assert not native.compiled_usable()  # no manifest at all
    manifest.write_text("{not json")
    assert not native.compiled_usable()


def test_a_source_edited_since_the_build_means_the_sources(manifest: Path) -> None:
    digests = native.source_digests()
    edited = native.NATIVE_MODULES[-1]
    digests[edited] = "0:00000000"
    manifest.write_text(json.dumps(digests))
    assert not native.compiled_usable()


def test_xdfs_pure_means_the_sources_even_with_a_good_build(
    manifest: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest.write_text(json.dumps(native.source_digests()))
    monkeypatch.setenv(native.PURE_ENV, "1")
    assert not native.compiled_usable()
    monkeypatch.setenv(native.PURE_ENV, "0")  # "0" and "" do not ask for the sources
    assert native.compiled_usable()


def test_the_guard_finds_each_compiled_module_as_its_source() -> None:
    finder = native._SourceFirst()
    for module in native.NATIVE_MODULES:
        spec = finder.find_spec(module, None)
        assert spec is not None and spec.origin == native.source_path(module)
        assert isinstance(spec.loader, importlib.machinery.SourceFileLoader)
    assert finder.find_spec("xdfs.namenode.server", None) is None  # not its business


def test_a_process_with_xdfs_pure_runs_every_namespace_module_from_source() -> None:
    script = (
        "from xdfs.common import native; import sys; "
        "sys.exit(1 if native.compiled_modules() else 0)"
    )
    env = {**os.environ, native.PURE_ENV: "1"}
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_the_block_managers_path_is_in_the_build() -> None:
    # the modules a small file's block path runs through (create_with_block, the
    # DataNodes' reports, complete): compiled with the namespace, or not at all
    for module in ("xdfs.namenode.blocks.manager", "xdfs.namenode.blocks.placement",
                   "xdfs.namenode.blocks.blockmap", "xdfs.namenode.blocks.datanodes",
                   "xdfs.namenode.blocks.replication", "xdfs.namenode.namespace.leases"):
        assert module in native.NATIVE_MODULES
        assert os.path.isfile(native.source_path(module))


def test_the_namesystem_is_in_the_build() -> None:
    # every mutation's own path (plan, apply, log, the retry cache's wrapper): one base
    # chain of native classes, Namesystem <- AppendOps <- WriteOps <- LeaseOps <- core
    for module in ("xdfs.namenode.fs_core", "xdfs.namenode.fs_leases",
                   "xdfs.namenode.fs_write", "xdfs.namenode.fs_append",
                   "xdfs.namenode.namesystem"):
        assert module in native.NATIVE_MODULES


def test_a_process_loads_all_of_the_build_or_none_of_it() -> None:
    # the compiled modules call each other natively: one of them run from source while
    # the others run compiled must never happen, whether or not this checkout is built
    script = (
        "from xdfs.common import native; import sys; "
        "n = len(native.compiled_modules()); "
        "sys.exit(0 if n in (0, len(native.NATIVE_MODULES)) else 1)"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr


def test_a_manifest_not_yet_in_place_is_not_a_build(manifest: Path) -> None:
    # the build writes its manifest beside the real one and renames it only once a fresh
    # process imported the whole build: until then the sources run
    Path(str(manifest) + ".new").write_text(json.dumps(native.source_digests()))
    assert not native.compiled_usable() and not native.build_current()


ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def build_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """scripts/build_native.py as a module, its lock and log in tmp_path."""
    spec = importlib.util.spec_from_file_location("build_native", ROOT / "scripts/build_native.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name, file in (("LOCK_PATH", "native.lock"), ("LOG_PATH", "native.log"),
                       ("SECONDS_PATH", "native.seconds")):
        monkeypatch.setattr(module, name, tmp_path / file)
    monkeypatch.setattr(module, "BUILD_DIR", tmp_path)
    return module


def test_the_background_build_returns_at_once_and_later_builds_wait_for_it(
    build_script: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    built = {"done": False}
    monkeypatch.setattr(native, "build_current", lambda: built["done"])
    started, release = tmp_path / "started", tmp_path / "release"
    # a stand-in for the minutes-long compile: runs until the test releases it
    fake_build = [sys.executable, "-c",
                  "import pathlib, sys, time; pathlib.Path(sys.argv[1]).touch()\n"
                  "while not pathlib.Path(sys.argv[2]).exists(): time.sleep(0.05)",
                  str(started), str(release)]
    child = build_script.start_background(fake_build)
    try:
        assert child is not None and child.poll() is None  # returned; the build goes on
        line = capsys.readouterr().out
        assert "in the background" in line and "min on" in line and "log:" in line
        assert line.count("\n") == 1  # one line
        assert build_script.start_background(fake_build) is None  # never two at once
        assert "already running" in capsys.readouterr().out

        waiter = threading.Thread(target=build_script.build_if_stale)
        waiter.start()
        waiter.join(timeout=1)
        assert waiter.is_alive()  # make test waits for the build that runs
        built["done"] = True
        release.touch()
        waiter.join(timeout=60)
        assert not waiter.is_alive()
        out = capsys.readouterr().out
        assert "waiting for the mypyc build" in out and "up to date" in out
    finally:
        release.touch()
        child.wait(timeout=60) if child is not None else None


def test_bootstrap_does_not_wait_for_the_compile_and_make_test_does() -> None:
    bootstrap = (ROOT / "scripts/bootstrap.sh").read_text()
    runs = [line.split("build_native.py", 1)[1].split(";")[0].strip()
            for line in bootstrap.splitlines()
            if "build_native.py" in line and not line.lstrip().startswith("#")]
    assert runs == ["--background"]  # make run serves on the sources meanwhile
    makefile = (ROOT / "Makefile").read_text()
    assert "pytest: $(STAMP) native-ready" in makefile
    assert "bench: $(STAMP) native-ready" in makefile
    assert "build_native.py --if-stale" in makefile
