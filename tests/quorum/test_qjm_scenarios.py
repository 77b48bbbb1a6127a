"""Directed quorum-journal scenarios: the cases the recovery rule and the fences exist for,
played step by step on the simulator's nodes (real Journal storage, no random faults)."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from xdfs.errors import Fenced, XdfsError
from xdfs.quorum.writer import QuorumJournalWriter

from .sim import LAYOUT, FaultPlan, SimChannel, SimNode, record
from .test_qjm_faults import SETTINGS, read_log

RNG = random.Random(5)
WRITERS: list[QuorumJournalWriter] = []


@pytest.fixture(autouse=True)
async def close_writers() -> AsyncIterator[None]:
    yield
    for w in WRITERS:
        await w.close()
    WRITERS.clear()


def nodes_in(tmp_path: Path) -> list[SimNode]:
    return [SimNode(f"jn{i}", tmp_path / f"jn{i}") for i in range(3)]


def writer(nodes: list[SimNode], *, cut_off: tuple[str, ...] = ()) -> QuorumJournalWriter:
    """A writer that cannot reach the nodes named in ``cut_off`` (closed after the test)."""
    calm = FaultPlan(RNG, 0.0, enabled=False)
    channels = []
    for node in nodes:
        channel = SimChannel(node, calm)
        if node.name in cut_off:
            channel.isolated_calls = 10**9
        channels.append(channel)
    WRITERS.append(QuorumJournalWriter(channels, SETTINGS))
    return WRITERS[-1]


def batch(first: int, count: int) -> tuple[bytes, list[bytes]]:
    records = [record(t, RNG) for t in range(first, first + count)]
    return b"".join(records), records


async def test_a_segment_restarted_by_a_newer_writer_wins_over_a_longer_stale_copy(
    tmp_path: Path,
) -> None:
    """HDFS-3077's reason for ranking by epoch before length: writer 1 starts segment 1 and
    writes txids 1-4 to jn2 only (never acknowledged); writer 2, without jn2, finds segment 1
    empty, starts it again and has 1-2 acknowledged by jn0 and jn1; writer 3, without jn0,
    sees jn1's 1-2 (epoch 2) and jn2's longer 1-4 (epoch 1) and must keep the former."""
    nodes = nodes_in(tmp_path)
    await writer(nodes).format()
    first = writer(nodes)
    assert await first.become_writer() is None
    await first.start_segment(1, LAYOUT)
    for channel in first.channels.values():
        if channel.name != "jn2":
            channel.isolated_calls = 10**9  # type: ignore[attr-defined]
    data, _ = batch(1, 4)
    with pytest.raises(XdfsError):  # only jn2 stored it: no majority
        await first.write(data, 1, 4)
    second = writer(nodes, cut_off=("jn2",))
    assert await second.become_writer() == 0  # segment 1 holds nothing on jn0, jn1
    await second.start_segment(1, LAYOUT)
    data, acked = batch(1, 2)
    await second.write(data, 1, 2)
    third = writer(nodes, cut_off=("jn0",))
    assert await third.become_writer() == 2
    log = read_log(nodes[1], 2)
    assert [log[1], log[2]] == acked


async def test_a_paused_writer_is_fenced_at_its_next_call_and_acknowledges_nothing(
    tmp_path: Path,
) -> None:
    nodes = nodes_in(tmp_path)
    await writer(nodes).format()
    old = writer(nodes)
    await old.become_writer()
    await old.start_segment(1, LAYOUT)
    data, acked = batch(1, 3)
    await old.write(data, 1, 3)
    new = writer(nodes)  # the old one is paused meanwhile: it calls nothing
    assert await new.become_writer() == 3
    data, _ = batch(4, 2)
    with pytest.raises(Fenced):
        await old.write(data, 4, 5)
    assert old.failure is not None
    await new.start_segment(4, LAYOUT)
    data, more = batch(4, 1)
    await new.write(data, 4, 4)
    await new.finalize_segment(4, 4)
    log = read_log(nodes[0], 4)  # the new writer's, never the old one's 4-5
    assert [log[t] for t in (1, 2, 3, 4)] == [*acked, *more]


async def test_a_node_that_fell_behind_rejoins_at_the_next_segment(tmp_path: Path) -> None:
    nodes = nodes_in(tmp_path)
    await writer(nodes).format()
    w = writer(nodes)
    await w.become_writer()
    await w.start_segment(1, LAYOUT)
    await w.write(batch(1, 2)[0], 1, 2)
    lagging = w.channels["jn2"]
    lagging.isolated_calls = 1  # type: ignore[attr-defined]
    await w.write(batch(3, 2)[0], 3, 4)  # jn0, jn1 store it; jn2 is out of sync
    assert w.in_sync == {"jn0", "jn1"}
    await w.write(batch(5, 1)[0], 5, 5)
    await w.finalize_segment(1, 5)
    await w.start_segment(6, LAYOUT)  # jn2 rejoins: its prefix 1-2 is finalized as such
    assert w.in_sync == {"jn0", "jn1", "jn2"}
    await w.write(batch(6, 1)[0], 6, 6)
    assert nodes[2].journal is not None
    segments = nodes[2].journal.manifest(0, in_progress_ok=True).segments
    assert [(s.start_txid, s.end_txid, s.in_progress) for s in segments] == [
        (1, 2, False), (6, 6, True)
    ]
