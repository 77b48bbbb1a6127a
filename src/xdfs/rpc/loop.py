"""Event-loop selection: uvloop when installed and enabled, the stdlib loop otherwise."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_factory(use_uvloop: bool = True) -> Callable[[], asyncio.AbstractEventLoop]:
    if use_uvloop:
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.new_event_loop
    return asyncio.new_event_loop


def run(main: Coroutine[Any, Any, T], *, use_uvloop: bool = True) -> T:
    """``asyncio.run`` on the preferred loop."""
    with asyncio.Runner(loop_factory=loop_factory(use_uvloop)) as runner:
        return runner.run(main)
