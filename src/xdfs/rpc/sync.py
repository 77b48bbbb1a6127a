"""A synchronous facade over the async RPC client: one event loop in a daemon thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from xdfs.rpc.loop import loop_factory

T = TypeVar("T")


class LoopThread:
    """Runs coroutines on a private event loop from synchronous code (CLI, fsspec)."""

    def __init__(self, name: str = "xdfs-loop", use_uvloop: bool = True) -> None:
        self.loop = loop_factory(use_uvloop)()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for its result (exceptions propagate)."""
        assert threading.current_thread() is not self._thread, "LoopThread.run from its own loop"
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()

    def __enter__(self) -> LoopThread:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
