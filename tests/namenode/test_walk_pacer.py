"""The walk driver: a step generator runs to its result a slice at a time, and walks that
share a pacer take turns (the loop serves others between slices)."""

from __future__ import annotations

import asyncio

import pytest

from xdfs.errors import AccessDenied
from xdfs.namenode.namespace.steps import Steps, drain
from xdfs.namenode.walks import WalkPacer


def _count(n: int, name: str, seen: list[str]) -> Steps[int]:
    for _ in range(n):
        seen.append(name)
        yield
    return n


def _denied_after(n: int) -> Steps[None]:
    for _ in range(n):
        yield
    raise AccessDenied("no")


def test_drain_returns_the_result() -> None:
    seen: list[str] = []
    assert drain(_count(5, "a", seen)) == 5
    assert seen == ["a"] * 5


async def test_a_walk_yields_to_the_loop_between_slices() -> None:
    pacer = WalkPacer(slice_inodes=3)
    seen: list[str] = []

    async def other() -> None:
        seen.append("other")

    walk = asyncio.create_task(pacer.run(_count(7, "w", seen)))
    asyncio.get_running_loop().call_soon(lambda: asyncio.ensure_future(other()))
    assert await walk == 7
    assert pacer.slices == 2
    assert seen.index("other") < len(seen) - 1  # ran before the walk's last slice


async def test_walks_sharing_a_pacer_take_turns() -> None:
    pacer = WalkPacer(slice_inodes=2)
    seen: list[str] = []
    results = await asyncio.gather(pacer.run(_count(6, "a", seen)), pacer.run(_count(6, "b", seen)))
    assert list(results) == [6, 6]
    assert seen == ["a", "a", "b", "b"] * 3


async def test_a_rate_limited_walk_still_finishes_and_errors_propagate() -> None:
    pacer = WalkPacer(slice_inodes=10, rate_inodes_per_s=1_000_000.0)
    assert await pacer.run(_count(100, "a", [])) == 100
    with pytest.raises(AccessDenied):
        await pacer.run(_denied_after(25))
