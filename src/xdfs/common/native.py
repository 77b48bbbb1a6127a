"""The NameNode's hot pure modules compiled with mypyc, and the guard that falls back to
their Python source.

``scripts/build_native.py`` (run by ``make setup``) compiles :data:`NATIVE_MODULES` into C
extensions next to their sources (``tree.cpython-311-x86_64-linux-gnu.so`` beside
``tree.py``) and writes :data:`MANIFEST_NAME`, the length and CRC-32 of each source it compiled.
Python prefers an extension to a source of the same name, so :func:`install_guard` (run
when ``xdfs`` is imported, before any of these modules) makes the source win instead when:

* ``XDFS_PURE`` is set to anything but ``""`` or ``0`` (benchmarks compare both builds);
* there is no manifest (nothing was built, or the build failed);
* any source differs from the one compiled (an edit since ``make setup``: a stale
  extension must never run in place of the code being tested).

The choice is all or nothing: compiled modules call each other natively, so a mix of
compiled and source modules of one build is never loaded.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import sys
import zlib
from collections.abc import Sequence
from types import ModuleType

#: Compiled by scripts/build_native.py: the namespace (the tree, path resolution and
#: permission checks), the modules every NameNode operation spends most of its CPU in, and
#: the block manager with what it calls on a small file's path (placement, the block map,
#: the DataNode table, the replication check, leases), and the Namesystem with the retry
#: cache (every mutation's plan, apply, log and at-most-once bookkeeping: one chain of
#: native base classes, no method decorators). msgspec.Struct classes (inodes, ops,
#: records) cannot be mypyc native classes: their modules stay interpreted and are used
#: from the compiled ones as ordinary objects. The edits log's write path too (the double
#: buffer, the record framing, the edit codec and EditLog: every mutation's append and
#: sync, ~35 interpreted calls per create + complete before). Not compiled: the block
#: walks off the loop (fsck, the block-map export, balancing), which are not on a call's
#: path, and the edits segments' file I/O. The RPC layer's per-call path (framing, a
#: connection's dispatch and replies, the server's side of a call, handling) is compiled
#: too, with the client's connection: every process runs it (tests subclass RpcProtocol in
#: Python); its pool of large buffers is not (reference counts: xdfs.rpc.buffer_pool).
#: So are the NameNode's client and admin handlers, the first code each call runs, the
#: per-call RPC figures and the fault points (a check on every keyed mutation).
NATIVE_MODULES = (
    "xdfs.common.paths",
    "xdfs.namenode.namespace.children",
    "xdfs.namenode.namespace.permissions",
    "xdfs.namenode.namespace.resolved",
    "xdfs.namenode.namespace.quota",
    "xdfs.namenode.namespace.tree_base",
    "xdfs.namenode.namespace.tree_quota",
    "xdfs.namenode.namespace.tree_files",
    "xdfs.namenode.namespace.tree_users",
    "xdfs.namenode.namespace.tree",
    "xdfs.namenode.blocks.topology",
    "xdfs.namenode.blocks.admin_states",
    "xdfs.namenode.blocks.datanodes",
    "xdfs.namenode.blocks.blockmap",
    "xdfs.namenode.blocks.placement",
    "xdfs.namenode.blocks.replication_queues",
    "xdfs.namenode.blocks.safemode",
    "xdfs.namenode.blocks.block_state",
    "xdfs.namenode.blocks.decommission",
    "xdfs.namenode.blocks.recovery",
    "xdfs.namenode.blocks.replication",
    "xdfs.namenode.blocks.manager",
    "xdfs.namenode.namespace.leases",
    "xdfs.namenode.retry_cache",
    "xdfs.namenode.fs_core",
    "xdfs.namenode.fs_leases",
    "xdfs.namenode.fs_write",
    "xdfs.namenode.fs_append",
    "xdfs.namenode.namesystem",
    "xdfs.editlog.buffer",
    "xdfs.editlog.framing",
    "xdfs.namenode.editlog.codec",
    "xdfs.namenode.editlog.editlog",
    "xdfs.rpc.framing",
    "xdfs.rpc.connection",
    "xdfs.rpc.server_connection",
    "xdfs.rpc.handling",
    "xdfs.rpc.client_connection",
    "xdfs.namenode.handlers.client",
    "xdfs.metrics.rpc_calls",
    "xdfs.common.faults",
)
#: In the ``xdfs`` package: {module: length and CRC-32 of the source compiled}.
MANIFEST_NAME = "_native_manifest.json"
PURE_ENV = "XDFS_PURE"

# (os.path, not pathlib, and no importlib.abc: this runs at every `import xdfs`, and those
# imports alone took ~25 ms.)
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../xdfs


def source_path(module: str) -> str:
    """The .py file of one of the package's modules."""
    return os.path.join(_PACKAGE_DIR, *module.split(".")[1:]) + ".py"


def source_digests(modules: Sequence[str] = NATIVE_MODULES) -> dict[str, str]:
    digests = {}
    for module in modules:
        with open(source_path(module), "rb") as source:
            data = source.read()
        # length and CRC-32: it tells an edited source from the one compiled (this is no
        # defence against tampering), without loading hashlib's OpenSSL at every start
        digests[module] = f"{len(data)}:{zlib.crc32(data):08x}"
    return digests


def manifest_path() -> str:
    return os.path.join(_PACKAGE_DIR, MANIFEST_NAME)


def pure_requested() -> bool:
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def compiled_usable() -> bool:
    """Whether the compiled build may be loaded: asked for, built, and built from the
    sources as they are now."""
    return not pure_requested() and build_current()


def build_current() -> bool:
    """Whether a complete build of the sources as they are now is in place (its manifest,
    written last, says so; a build still running or interrupted has none)."""
    try:
        with open(manifest_path(), encoding="utf-8") as manifest:
            built = json.load(manifest)
        return isinstance(built, dict) and built == source_digests()
    except (OSError, ValueError):
        return False


class _SourceFirst:
    """Finds :data:`NATIVE_MODULES` as their .py source even where an extension exists (a
    meta path finder: sys.meta_path asks each entry's find_spec)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in NATIVE_MODULES:
            return None  # (the build script removes every extension it ever made)
        import importlib.util

        source = source_path(fullname)
        loader = importlib.machinery.SourceFileLoader(fullname, source)
        return importlib.util.spec_from_file_location(fullname, source, loader=loader)


def install_guard() -> None:
    """Load the Python sources of :data:`NATIVE_MODULES` unless the compiled build may be
    used (see the module docstring). Idempotent."""
    if any(isinstance(finder, _SourceFirst) for finder in sys.meta_path):
        return
    if not compiled_usable():
        sys.meta_path.insert(0, _SourceFirst())


def compiled_modules() -> list[str]:
    """Those of :data:`NATIVE_MODULES` loaded from a compiled extension (imports them)."""
    import importlib

    return [
        name for name in NATIVE_MODULES
        if not str(importlib.import_module(name).__file__).endswith(".py")
    ]


def describe() -> str:
    """One line for benchmark reports: which build of the native modules runs."""
    compiled = compiled_modules()
    what = "NameNode modules (namespace, blocks, namesystem)"
    if len(compiled) == len(NATIVE_MODULES):
        return f"{what}: compiled (mypyc)"
    if not compiled:
        why = f"{PURE_ENV} set" if pure_requested() else "no up-to-date compiled build"
        return f"{what}: pure Python ({why})"
    return f"{what}: MIXED, compiled: {', '.join(compiled)}"
