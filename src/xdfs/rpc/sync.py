"""A synchronous facade over the async RPC client: one event loop in a daemon thread."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from xdfs.rpc.loop import loop_factory

T = TypeVar("T")

class _Inline(threading.local):
    """Per thread: the LoopThread whose coroutine this thread runs inline (run_inline);
    None by default as a class attribute, so reading it where it was never set raises and
    swallows no AttributeError (``getattr(local, name, None)`` did: ~0.4 us per call)."""

    loop: LoopThread | None = None


#: RpcClient.call reads ``INLINE.loop`` directly: once per call.
INLINE = _Inline()


def inline_loop() -> LoopThread | None:
    """The :class:`LoopThread` on whose behalf this thread runs a coroutine itself
    (:meth:`LoopThread.run_inline`), or None (an event loop's thread, or plain code).
    :meth:`xdfs.rpc.client.RpcClient.call` then makes its call from this thread over a
    blocking connection instead of awaiting the loop."""
    return INLINE.loop


class NotInline(RuntimeError):
    """A coroutine run by :meth:`LoopThread.run_inline` tried to wait on an event loop."""


class LoopThread:
    """Runs coroutines on a private event loop from synchronous code (CLI, fsspec)."""

    def __init__(self, name: str = "xdfs-loop", use_uvloop: bool = True) -> None:
        self.loop = loop_factory(use_uvloop)()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        # Signals go to the main thread only: one delivered to this thread (or to the
        # threads it starts, which inherit the mask) would not wake a main thread blocked
        # in run(), so Ctrl-C would wait for the call to end.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for its result (exceptions propagate).

        Ctrl-C (KeyboardInterrupt) while waiting cancels ``coro`` and waits for it to finish
        its cleanup (an upload deletes its temporary file) before propagating; a second
        Ctrl-C stops waiting.

        The hop costs the loop thread one callback, one task and one lock release: every
        call of a synchronous client goes through here, from any number of threads, and
        the loop thread serves them all (``run_coroutine_threadsafe``'s future, with its
        condition variable and callbacks chained both ways, cost that thread more than a
        small call's own work)."""
        assert threading.current_thread() is not self._thread, "LoopThread.run from its own loop"
        done = threading.Lock()
        done.acquire()
        started: list[asyncio.Task[T]] = []

        def start() -> None:
            task = self.loop.create_task(coro)
            task.add_done_callback(lambda _task: done.release())
            started.append(task)

        try:
            self.loop.call_soon_threadsafe(start)
        except RuntimeError:  # the loop is closed
            coro.close()
            raise
        try:
            done.acquire()
        except KeyboardInterrupt:
            # started before this runs: the loop runs callbacks in the order they came
            self.loop.call_soon_threadsafe(lambda: started[0].cancel())  # noqa: PLW0108 (late)
            done.acquire()
            raise
        return started[0].result()

    def run_inline(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` in the calling thread, with no hop to the loop: for coroutines whose
        only waits are unary calls of an RpcClient (which then block this thread on a
        blocking connection, see :func:`inline_loop`) and awaits that complete at once. The
        calls' failover still runs on the loop when a call needs it (its retries, its
        probe of who is active), :meth:`run` from this thread.

        A coroutine that suspends on anything else is closed and :class:`NotInline`
        raised: only ask this of coroutines known not to (a programming error otherwise)."""
        assert threading.current_thread() is not self._thread, "run_inline from its own loop"
        outer = INLINE.loop
        INLINE.loop = self
        try:
            waited = coro.send(None)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        finally:
            INLINE.loop = outer
        coro.close()
        raise NotInline(f"{coro!r} waited on {waited!r}, not one of run_inline's calls")

    def submit(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Start ``coro`` on the loop without waiting for it (dropped if the loop is closed)."""
        try:
            asyncio.run_coroutine_threadsafe(coro, self.loop)
        except RuntimeError:  # the loop is closed
            coro.close()

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

