"""Python function calls per NameNode operation, in-process, driven as bench/namenode.py
drives them (64 writers for mutations, inline reads).

    .venv/bin/python bench/namenode_calls.py

cProfile's call count is deterministic: unlike CPU time on a shared machine it does not
move with the load, so two versions of the NameNode compare exactly (run this script in
each checkout). It counts calls, not their cost: a C call and a Python one weigh the same.
"""

from __future__ import annotations

import asyncio
import cProfile
import pstats
import shutil
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

from namenode import PASSWORD, SUPER_PASSWORD, SUPERUSER, USER, drive, drive_sync, tree_path
from xdfs.config import XdfsConfig
from xdfs.namenode.image.format import format_namenode
from xdfs.namenode.server import NameNode

OPS = 5000
FANOUT = 1000


async def count_calls() -> dict[str, float]:
    base = Path(tempfile.mkdtemp(prefix="xdfs-calls-"))
    config = XdfsConfig()
    format_namenode([base / "nn"], config.namenode, superuser=SUPERUSER,
                    password=SUPER_PASSWORD)
    node = NameNode(config, [base / "nn"])
    await node.start("127.0.0.1", 0)
    out: dict[str, float] = {}
    try:
        fs, auth = node.fs, node.auth
        assert fs is not None and auth is not None
        await auth.add_user(SUPERUSER, USER, PASSWORD, [])
        await fs.mkdirs(SUPERUSER, "/bench", 0o755, True)
        await fs.set_owner(SUPERUSER, "/bench", USER, "")
        for top in ("/bench/mkdirs", "/bench/files", "/bench/renamed"):
            for p in range(OPS // FANOUT):
                await fs.mkdirs(USER, f"{top}/p{p:04d}", 0o755, True)

        async def create(i: int) -> None:
            path = tree_path("/bench/files", i, "f")
            await fs.create(USER, "calls", path, mode=0o644, replication=0, block_size=0,
                            overwrite=False, create_parents=False)
            await fs.complete(USER, "calls", path, [])

        async def measure(name: str, op: Callable[[int], Awaitable[object]]) -> None:
            profile = cProfile.Profile()
            profile.enable()
            await drive(op, OPS, 64)
            profile.disable()
            out[name] = pstats.Stats(profile).total_calls / OPS  # type: ignore[attr-defined]

        def measure_sync(name: str, op: Callable[[int], object]) -> None:
            profile = cProfile.Profile()
            profile.enable()
            drive_sync(op, OPS)
            profile.disable()
            out[name] = pstats.Stats(profile).total_calls / OPS  # type: ignore[attr-defined]

        await measure("mkdirs", lambda i: fs.mkdirs(USER, tree_path("/bench/mkdirs", i, "d"),
                                                    0o755, False))
        await measure("create + complete", create)
        measure_sync("stat", lambda i: fs.stat(USER, tree_path("/bench/files", i, "f")))
        measure_sync("open (block_locations)", lambda i: fs.block_locations(
            USER, tree_path("/bench/files", i, "f"), 0, -1))
        await measure("rename", lambda i: fs.rename(
            USER, tree_path("/bench/files", i, "f"), tree_path("/bench/renamed", i, "f")))
        await measure("delete (skip trash)", lambda i: fs.delete(
            USER, tree_path("/bench/renamed", i, "f"), recursive=False, skip_trash=True))
    finally:
        await node.stop()
        shutil.rmtree(base, ignore_errors=True)
    return out


def main() -> int:
    results = asyncio.run(count_calls())
    print("| operation | Python calls per op |\n|---|---:|")
    for name, calls in results.items():
        print(f"| {name} | {calls:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
