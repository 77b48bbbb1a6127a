"""Automatic failover with real processes: a 3-server ZooKeeper, three JournalNodes, two
NameNodes, a failover controller (``xdfs zkfc``) next to each, and a DataNode.

The controllers elect one NameNode active. When it is SIGKILLed, or paused past the
ZooKeeper session (SIGSTOP), the other controller makes its NameNode active (the journal
epoch fences the old one); every acknowledged write is there, files written before read
back (the DataNode moves to the new active and reports its blocks), and a paused old
active that is resumed acknowledges nothing.
"""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from xdfs.errors import XdfsError

from .cluster import WAIT_S, HaCluster

pytestmark = pytest.mark.slow


@pytest.fixture
def ha(auto_ha: HaCluster) -> HaCluster:
    return auto_ha


async def _write(ha: HaCluster, prefix: str, count: int) -> dict[str, bytes]:
    async with ha.client() as client:
        written = {}
        for i in range(count):
            path, data = f"/{prefix}/f{i}", f"{prefix} {i}".encode() * 100
            await client.write_file(path, data, replication=1)
            written[path] = data
        return written


async def _read_all(ha: HaCluster, files: dict[str, bytes]) -> list[str]:
    """The paths whose contents do not read back."""
    async with ha.client() as client:
        return [path for path, data in files.items()
                if await client.read_file(path) != data]


def _retry(ha: HaCluster, work: object) -> object:
    """Run ``work()`` (a coroutine function) until the cluster takes it (a failover may
    be under way: the client fails with one error per attempt)."""
    last: BaseException | None = None
    for _ in range(int(WAIT_S)):
        try:
            return asyncio.run(work())  # type: ignore[operator]
        except XdfsError as exc:
            last = exc
    raise AssertionError(f"the cluster did not take it: {last}\n{ha.logs()}")


def test_killed_active_is_replaced_and_nothing_acknowledged_is_lost(ha: HaCluster) -> None:
    first = ha.active()
    assert first is not None
    files = _retry(ha, lambda: _write(ha, "before", 10))
    assert isinstance(files, dict)
    ha.namenodes[first].kill()
    other = "nn2" if first == "nn1" else "nn1"
    ha.wait(lambda: ha.state(other) == "active", f"{other} becomes active")
    ha.wait(ha.writable, f"{other} takes writes (the DataNode reported to it)")
    more = _retry(ha, lambda: _write(ha, "after", 5))
    assert isinstance(more, dict)
    assert _retry(ha, lambda: _read_all(ha, {**files, **more})) == []


def test_paused_active_loses_the_election_and_is_fenced(ha: HaCluster) -> None:
    first = ha.active()
    assert first is not None
    files = _retry(ha, lambda: _write(ha, "before", 5))
    assert isinstance(files, dict)
    old = ha.namenodes[first]
    other = "nn2" if first == "nn1" else "nn1"
    os.kill(old.pid, signal.SIGSTOP)
    try:
        ha.wait(lambda: ha.state(other) == "active", f"{other} becomes active")
        ha.wait(ha.writable, f"{other} takes writes (the DataNode reported to it)")
        more = _retry(ha, lambda: _write(ha, "during", 5))
        assert isinstance(more, dict)
    finally:
        os.kill(old.pid, signal.SIGCONT)

    async def write_to_old() -> str:
        async with ha.client(first) as client:
            try:
                await client.mkdirs("/from-the-old-active")
            except XdfsError as exc:
                return type(exc).__name__
            return "acknowledged"

    assert asyncio.run(write_to_old()) != "acknowledged"
    assert _retry(ha, lambda: _read_all(ha, {**files, **more})) == []
    ha.wait(lambda: ha.active() == other, "exactly one active after the old one woke up")


def test_back_and_forth_every_file_reads_back(ha: HaCluster) -> None:
    """Graceful failovers both ways (xdfs admin -failover through the controllers): a
    NameNode active for the second time has fresh replica locations (the DataNode
    registered and reported again), so files written during the other's reign read."""
    files: dict[str, bytes] = {}
    for round_ in range(3):
        active = ha.active()
        assert active is not None
        ha.wait(ha.writable, f"{active} takes writes")
        written = _retry(ha, lambda round_=round_: _write(ha, f"round{round_}", 3))
        assert isinstance(written, dict)
        files.update(written)
        other = "nn2" if active == "nn1" else "nn1"
        result = ha.admin("-failover", active, other)
        assert result.returncode == 0, result.stderr
        assert ha.active() == other
    ha.wait(ha.writable, "the last active takes writes")
    assert _retry(ha, lambda: _read_all(ha, files)) == []
