"""The garbage-collector policy of server processes (xdfs.common.collector): each check
runs in a fresh interpreter, since the collector's settings belong to the whole process."""

from __future__ import annotations

import subprocess
import sys

import pytest

from xdfs.config import XdfsConfig
from xdfs.config.loading import load_config
from xdfs.errors import ConfigError


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    return done.stdout.strip()


def test_tune_makes_young_collections_rarer_and_zero_keeps_pythons_default() -> None:
    out = _run(
        "import gc; from xdfs.common import collector\n"
        "before = gc.get_threshold(); collector.tune(0); same = gc.get_threshold()\n"
        "collector.tune(20000); print(before == same, gc.get_threshold())"
    )
    assert out == "True (20000, 10, 10)"


def test_settle_keeps_later_collections_off_what_is_alive() -> None:
    out = _run(
        "import gc; from xdfs.common import collector\n"
        "state = [{'k': [i]} for i in range(50000)]\n"
        "assert gc.get_freeze_count() == 0\n"
        "collector.settle()\n"
        "print(gc.get_freeze_count() > 50000, sum(len(g) for g in (gc.get_objects(0),"
        " gc.get_objects(1), gc.get_objects(2))) < 50000)"
    )
    assert out == "True True"


def test_a_server_command_settles_its_heap_once_serving() -> None:
    """The server commands' shared runner tunes before start and settles after it."""
    out = _run(
        "import asyncio, gc\n"
        "from xdfs.cli.serving import serve\n"
        "from xdfs.config import XdfsConfig\n"
        "class Node:\n"
        "    stopped = asyncio.Event(); fatal = None\n"
        "    async def start(self, host, port):\n"
        "        self.threshold = gc.get_threshold(); self.stopped.set(); return 'x:1'\n"
        "    async def stop(self): pass\n"
        "node = Node()\n"
        "rc = asyncio.run(serve('test', node, '127.0.0.1', 0, XdfsConfig().rpc))\n"
        "print(rc, node.threshold[0], gc.get_freeze_count() > 0)"
    )
    assert out.splitlines()[-1] == f"0 {XdfsConfig().rpc.gc_young_objects} True"


def test_a_negative_threshold_is_refused() -> None:
    with pytest.raises(ConfigError, match="gc_young_objects"):
        load_config(overrides=["rpc.gc_young_objects=-1"], env={})
