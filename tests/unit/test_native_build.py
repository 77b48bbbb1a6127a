"""The guard of the mypyc build (xdfs.common.native): compiled modules run only when built
from the sources as they are, and not when XDFS_PURE asks for the Python sources."""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
from pathlib import Path

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
