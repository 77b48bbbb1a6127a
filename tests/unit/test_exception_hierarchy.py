"""Every exception class of ``src/xdfs`` is an ``XdfsError`` (docs/architecture.md,
"Layers"), except the few below that are control flow or test failures by design."""

from __future__ import annotations

import ast
import builtins
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import xdfs
from xdfs.common.process import ProcessError, ServerProcess
from xdfs.errors import XdfsError

SRC = Path(xdfs.__file__).parent
#: Not XdfsErrors on purpose (module:class -> why).
OUTSIDE = {
    # private signals of the failover loop; they never leave RpcClient.call
    "xdfs.rpc.client:_NotSent": "control flow",
    "xdfs.rpc.client:_MovedOn": "control flow",
    # misuse of run_inline by the calling code, a bug (as asyncio's own RuntimeErrors)
    "xdfs.rpc.sync:NotInline": "programming error",
    # must reach aiohttp to cut the connection: an XdfsError would be answered as a body
    "xdfs.http.webhdfs:StreamBroken": "control flow",
    # carries an XdfsError to report against another path; the shell unwraps it
    "xdfs.cli.dfs_base:PathFailure": "control flow",
    # "read this in a thread": never leaves the DataNode's read path
    "xdfs.datanode.replica:NotCached": "control flow",
    # a broken invariant of a simulation is a test failure, reported as pytest does
    "xdfs.testing.twophase_sim:Violation": "test failure",
    "xdfs.testing.move_sim:Violation": "test failure",
}
_BUILTIN_EXCEPTIONS = {name for name, value in vars(builtins).items()
                       if isinstance(value, type) and issubclass(value, BaseException)}


def _base_name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def _exception_classes() -> Iterator[tuple[str, str]]:
    """(module, class) of every top-level class whose bases look like exceptions: a builtin
    exception, a name ending in Error or Exception, or such a class of the same module
    (importing each candidate then decides)."""
    for path in sorted(SRC.rglob("*.py")):
        module = ".".join(path.relative_to(SRC.parent).with_suffix("").parts)
        found: set[str] = set()
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.ClassDef):
                continue
            names = {_base_name(base) for base in node.bases}
            if names & (_BUILTIN_EXCEPTIONS | found) or any(
                    n.endswith(("Error", "Exception")) for n in names):
                found.add(node.name)
                yield module.removesuffix(".__init__"), node.name


def test_every_exception_is_an_xdfs_error() -> None:
    outside = []
    for module, name in _exception_classes():
        cls = getattr(importlib.import_module(module), name)
        if issubclass(cls, BaseException) and not issubclass(cls, XdfsError):
            outside.append(f"{module}:{name}")
    assert sorted(outside) == sorted(OUTSIDE)


def test_a_server_that_exits_is_a_process_error(tmp_path: Path) -> None:
    child = ServerProcess([sys.executable, "-c",
                           "print('cannot bind'); raise SystemExit(3)"],
                          ready_pattern="serving", log_path=tmp_path / "child.log")
    with pytest.raises(XdfsError) as raised:
        child.start(deadline_s=30.0)
    assert isinstance(raised.value, ProcessError)
    assert not isinstance(raised.value, AssertionError)
    assert raised.value.last_line == "cannot bind"
