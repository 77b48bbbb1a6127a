"""The NameNode's common calls leave no reference cycles behind: garbage only the cyclic
collector frees makes it run (each young collection walks every young object), and its
cost grew with the calls that made it (a cycle per ``complete`` in the compiled build took
~10% of a busy NameNode's CPU). Counted in-process on the calls a client makes, through a
real connection, in whichever build the suite runs (compiled when ``make setup`` built it)."""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator

import pytest

from xdfs.client.client import AsyncClient
from xdfs.namenode.server import NameNode
from xdfs.testing.minicluster import MiniCluster

CALLS = 60


@pytest.fixture
def saved_garbage() -> Iterator[list[object]]:
    """gc.garbage, keeping whatever the collector finds (nothing is freed meanwhile)."""
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    gc.garbage.clear()
    try:
        yield gc.garbage
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.collect()


async def cyclic_garbage_of(
    run: Callable[[int], Awaitable[object]], garbage: list[object]
) -> Counter[str]:
    """The types of what ``CALLS`` runs of ``run`` left for the cyclic collector, by the
    module that defines them (only the NameNode's side counts: the client may keep its own
    caches)."""
    await run(-1)  # first calls warm caches (a directory's first child, a lease ...)
    gc.collect()
    garbage.clear()
    for i in range(CALLS):
        await run(i)
    gc.collect()
    return Counter(
        f"{type(obj).__module__}.{type(obj).__qualname__}" for obj in garbage
        if type(obj).__module__.startswith(("xdfs.namenode", "xdfs.rpc.server"))
    )


async def test_the_common_mutations_and_reads_make_no_cycles(
    minicluster: MiniCluster, saved_garbage: list[object]
) -> None:
    nn: NameNode = await minicluster.start_namenode()
    async with AsyncClient(f"xdfs://{nn.address}", user="root", password="rootpw") as client:
        await client.mkdirs("/g")

        async def create_and_complete(i: int) -> None:
            await client.create(f"/g/f{i}", create_parents=False)
            await client.complete(f"/g/f{i}", [])

        async def mkdirs(i: int) -> None:
            await client.mkdirs(f"/g/d{i}")

        async def rename_and_stat(i: int) -> None:
            await client.rename(f"/g/f{i}", f"/g/r{i}")
            await client.stat(f"/g/r{i}")

        async def delete(i: int) -> None:
            await client.delete(f"/g/r{i}", skip_trash=True)

        for run in (create_and_complete, mkdirs, rename_and_stat, delete):
            left = await cyclic_garbage_of(run, saved_garbage)
            assert not left, f"{run.__name__}: {sorted(left.items())}"
