"""Clients of a paused (SIGSTOPped) active, with real processes: a client looping on
mkdirs and create + complete rides through the failover without waiting for its call
timeout (the failover probe asks the NameNodes who is active once a call stalls and
repeats the call on the new active with the same call key), nothing is applied twice,
nothing acknowledged is lost, and the old active, resumed, acknowledges nothing. The same
through the synchronous client, whose mkdirs goes over the calling thread's own blocking
connection (the probe then runs from that thread)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import time

import pytest

from xdfs.client.client import AsyncClient, Client
from xdfs.config import XdfsConfig
from xdfs.errors import XdfsError

from ..journal.qjm_cluster import PASSWORD, USER
from .cluster import WAIT_S, HaCluster

pytestmark = pytest.mark.slow

#: The clients' per-try deadline: without the probe, a call in flight to the paused
#: NameNode would wait all of it before moving on.
CALL_TIMEOUT_S = 60.0


def _config() -> XdfsConfig:
    base = XdfsConfig()
    return dataclasses.replace(
        base, rpc=dataclasses.replace(base.rpc, call_timeout_s=CALL_TIMEOUT_S))


def _uri(ha: HaCluster, *ids: str) -> str:
    return "xdfs://" + ",".join(ha.addresses[i] for i in (ids or ha.addresses))


def _client(ha: HaCluster, *ids: str) -> AsyncClient:
    return AsyncClient(_uri(ha, *ids), user=USER, password=PASSWORD, config=_config())


class Threaded:
    """The calls of :class:`Loop` through a synchronous :class:`Client`, each from a worker
    thread (not the client's loop thread): its mkdirs is made inline, over that thread's
    own connection."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def mkdirs(self, path: str) -> object:
        return await asyncio.to_thread(self.client.mkdirs, path)

    async def create(self, path: str) -> object:
        return await asyncio.to_thread(self.client.create, path)

    async def complete(self, path: str, blocks: list[object]) -> object:
        return await asyncio.to_thread(self.client.complete, path, blocks)


class Loop:
    """One client making /loop/dN (mkdirs) and /loop/fN (create + complete), in turn,
    each acknowledged before the next; any error ends the loop (and fails the test).
    ``files=False``: mkdirs only (so the call that meets the pause is a mkdirs)."""

    def __init__(self, client: AsyncClient | Threaded, files: bool = True) -> None:
        self.client = client
        self.files = files
        self.acked: list[tuple[str, float]] = []  # (path, monotonic time of the ack)
        self.stop = asyncio.Event()
        self.progress = asyncio.Event()

    async def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            path = f"/loop/{'d' if i % 2 == 0 or not self.files else 'f'}{i}"
            if i % 2 == 0 or not self.files:
                await self.client.mkdirs(path)
            else:
                await self.client.create(path)
                await self.client.complete(path, [])
            self.acked.append((path, time.monotonic()))
            self.progress.set()
            i += 1

    async def acks_after(self, count: int) -> None:
        """Wait until ``count`` more operations are acknowledged."""
        target = len(self.acked) + count
        while len(self.acked) < target:
            self.progress.clear()
            await self.progress.wait()


async def _ride_through(ha: HaCluster, old_pid: int, api: str) -> tuple[float, list[str]]:
    """Loop, SIGSTOP the active mid-loop, keep looping until the new active acknowledged
    a few; (seconds from the pause to the first ack after it, acknowledged paths).
    ``api``: "async" (AsyncClient) or "sync" (Client, from worker threads)."""
    async with _client(ha) as client:
        await client.mkdirs("/loop")
    if api == "sync":
        sync = await asyncio.to_thread(
            Client, _uri(ha), user=USER, password=PASSWORD, config=_config())
        try:
            return await _loop_through(Threaded(sync), old_pid)
        finally:
            await asyncio.to_thread(sync.close)
    async with _client(ha) as client:
        return await _loop_through(client, old_pid)


async def _loop_through(client: AsyncClient | Threaded, old_pid: int) -> tuple[float, list[str]]:
    # Through the synchronous client: mkdirs only, every call over the worker thread's
    # own connection, so the one that meets the pause runs the probe from that thread.
    loop = Loop(client, files=isinstance(client, AsyncClient))
    task = asyncio.create_task(loop.run())
    try:
        async with asyncio.timeout(4 * WAIT_S):
            await loop.acks_after(20)
            os.kill(old_pid, signal.SIGSTOP)
            paused_at = time.monotonic()
            await loop.acks_after(1)  # a call in flight at the pause, or the next
            await loop.acks_after(10)
        loop.stop.set()
        await task
    finally:
        task.cancel()
    first_after = min(at for _path, at in loop.acked if at > paused_at)
    return first_after - paused_at, [path for path, _at in loop.acked]


@pytest.mark.parametrize("api", ["async", "sync"])
def test_a_paused_active_does_not_hold_its_clients_for_the_call_timeout(
    auto_ha: HaCluster, api: str,
) -> None:
    ha = auto_ha
    first = ha.active()
    assert first is not None
    other = "nn2" if first == "nn1" else "nn1"
    old = ha.namenodes[first]
    try:
        took_s, acked = asyncio.run(_ride_through(ha, old.pid, api))
        assert ha.state(other) == "active"
    finally:
        os.kill(old.pid, signal.SIGCONT)
    # Without the probe, the call in flight at the pause waits CALL_TIMEOUT_S.
    assert took_s < CALL_TIMEOUT_S / 2, f"{took_s:.1f} s to the first ack after the pause"

    async def listed() -> set[str]:
        async with _client(ha, other) as client:
            return {status.path for status in await client.list_dir("/loop")}

    # Every acknowledged operation is there, and nothing else (each was acknowledged
    # once: a repeat applied twice would have failed the loop with AlreadyExists).
    assert listed_paths(asyncio.run(listed())) == set(acked)

    async def write_to_old() -> str:
        async with AsyncClient("xdfs://" + ha.addresses[first], user=USER, password=PASSWORD,
                               config=XdfsConfig()) as client:
            try:
                await client.mkdirs("/from-the-old-active")
            except XdfsError as exc:
                return type(exc).__name__
            return "acknowledged"

    # The resumed old active is fenced: it steps down (or stops) and acknowledges nothing.
    ha.wait(lambda: ha.state(first) != "active", f"{first} steps down after SIGCONT")
    assert asyncio.run(write_to_old()) != "acknowledged"
    assert ha.active() == other
    assert listed_paths(asyncio.run(listed())) == set(acked)


def listed_paths(paths: set[str]) -> set[str]:
    """Listing entries as absolute paths (a listing may give names or full paths)."""
    return {p if p.startswith("/") else f"/loop/{p}" for p in paths}
