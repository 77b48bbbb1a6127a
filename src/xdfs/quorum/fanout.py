"""Fan a call out to several nodes and wait for a quorum of answers (the asyncio driver
around :class:`~xdfs.quorum.calls.QuorumCall`).

:func:`quorum_call` starts one call per node at once, returns as soon as the call has
``needed`` successes, and raises :class:`QuorumFailed` as soon as too many failed or the
deadline passed. Calls still running then are left to finish on their own (their answers
are recorded in the returned accounting), never cancelled: a journal call cut off half
way would leave its node in an unknown state, while a late success is still a success.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from xdfs.errors import StorageError
from xdfs.quorum.calls import QuorumCall

T = TypeVar("T")


class QuorumFailed(StorageError):
    """Too few nodes answered ok (they failed, or the deadline passed)."""

    def __init__(self, message: str, call: QuorumCall[Any]) -> None:
        super().__init__(message)
        self.call = call


async def quorum_call(
    what: str,
    nodes: Iterable[str],
    needed: int,
    start: Callable[[str], Awaitable[T]],
    timeout_s: float,
    *,
    on_failure: Callable[[str, BaseException], None] | None = None,
) -> QuorumCall[T]:
    """Run ``start(node)`` for every node; return once ``needed`` succeeded.
    ``on_failure(node, error)`` is told of every failure, also of those after the return."""
    call: QuorumCall[T] = QuorumCall.of(nodes, needed)
    settled = asyncio.Event()

    def done(node: str, task: asyncio.Task[T]) -> None:
        error = asyncio.CancelledError() if task.cancelled() else task.exception()
        if error is None:
            call.succeed(node, task.result())
        else:
            call.fail(node, error)
            if on_failure is not None:
                on_failure(node, error)
        if call.succeeded or call.hopeless:
            settled.set()

    loop = asyncio.get_running_loop()
    for node in call.nodes:
        task = loop.create_task(_as_task(start(node)), name=f"{what} {node}")
        task.add_done_callback(functools.partial(done, node))
    if call.succeeded or call.hopeless:  # needed == 0
        settled.set()
    expired = False
    try:
        async with asyncio.timeout(timeout_s):
            await settled.wait()
    except TimeoutError:
        expired = True
    if call.succeeded:
        return call
    pending = call.pending
    detail = call.describe_failures()
    if pending:
        waited = f"no answer within {timeout_s:g} s" if expired else "not answered yet"
        detail += f"; {waited} from {', '.join(pending)}"
    raise QuorumFailed(
        f"{what}: {len(call.successes)} of {len(call.nodes)} node(s) answered ok, "
        f"{needed} needed ({detail})",
        call,
    )


async def _as_task(awaitable: Awaitable[T]) -> T:
    return await awaitable

