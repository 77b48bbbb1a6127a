"""The one way tests and benchmarks wait for a condition: :func:`eventually`."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")

#: Bounds a hang only: a condition that holds is seen within one interval.
TIMEOUT_S = 30.0
INTERVAL_S = 0.05


@overload
async def eventually(
    check: Callable[[], Awaitable[T | None]], *, timeout_s: float = ..., what: str = ...,
    interval_s: float = ...,
) -> T: ...


@overload
async def eventually(
    check: Callable[[], T | None], *, timeout_s: float = ..., what: str = ...,
    interval_s: float = ...
) -> T: ...


async def eventually(
    check: Callable[[], Any],
    *,
    timeout_s: float = TIMEOUT_S,
    what: str = "condition",
    interval_s: float = INTERVAL_S,
) -> Any:
    """Call ``check`` (plain or async) every ``interval_s`` until it returns something
    truthy, and return that. After ``timeout_s`` an AssertionError names ``what`` and the
    last value: the timeout only bounds a hang, no timing is ever asserted."""
    deadline = time.monotonic() + timeout_s
    while True:
        last = check()
        if inspect.isawaitable(last):
            last = await last
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} not reached within {timeout_s} s (last: {last!r})")
        await asyncio.sleep(interval_s)
