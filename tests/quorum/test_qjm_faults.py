"""Seeded fault runs of the quorum journal: writers and three JournalNodes with failures at
every point of the protocol, then a new writer recovers (see sim.py for the faults).

Per seed: a writer writes batches (rolling segments now and then) while the plan injects
faults; one to three more writers, also under faults, take over one after the other while
the earlier ones go on trying (their delayed calls arriving late); then all nodes are
healed and a fault-free writer recovers. Invariants, checked on every seed:

1. every txid any writer acknowledged is in the recovered log, with the same bytes;
2. no two writers acknowledged different bytes for one txid;
3. the recovered end is at or after the last acknowledged txid, and every txid up to it
   is readable;
4. no two nodes hold different finalized content for one txid.

``XDFS_QJM_SEEDS=N`` runs N seeds (default 1000), ``XDFS_QJM_SEED=S`` just seed S.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from xdfs.editlog.framing import record_bounds
from xdfs.errors import XdfsError
from xdfs.protocol import journal as j
from xdfs.quorum.writer import QuorumJournalWriter, WriterSettings

from .sim import JOURNAL_ID, LAYOUT, NAMESPACE, FaultPlan, SimChannel, SimNode, record, shm_or

SEEDS = int(os.environ.get("XDFS_QJM_SEEDS", "1000"))
ONE_SEED = os.environ.get("XDFS_QJM_SEED")
CHUNKS = 10

SETTINGS = WriterSettings(
    JOURNAL_ID, NAMESPACE, write_timeout_s=30.0, call_timeout_s=30.0,
    commit_notify_s=0.0, heartbeat_interval_s=3600.0,
)


@dataclass
class History:
    acked: dict[int, bytes] = field(default_factory=dict)
    writers: int = 0

    def ack(self, first_txid: int, records: list[bytes]) -> None:
        for offset, data in enumerate(records):
            txid = first_txid + offset
            known = self.acked.setdefault(txid, data)
            assert known == data, f"two writers acknowledged different bytes for txid {txid}"


async def write_for_a_while(
    nodes: list[SimNode], plan: FaultPlan, history: History, rng: random.Random, batches: int
) -> None:
    channels = [SimChannel(node, plan) for node in nodes]
    writer = QuorumJournalWriter(channels, SETTINGS)
    # half the writers lose one node for good: from the start, or after some batch
    blind = rng.choice(channels) if rng.random() < 0.5 else None
    blind_at = rng.randrange(-1, batches)
    if blind is not None and blind_at < 0:
        blind.isolated_calls = 10**9
    try:
        end = await writer.become_writer()
        history.writers += 1
        next_txid = (end or 0) + 1
        segment = next_txid
        await writer.start_segment(segment, LAYOUT)
        for index in range(batches):
            if blind is not None and index == blind_at:
                blind.isolated_calls = 10**9
            records = [record(t, rng) for t in range(next_txid, next_txid + rng.randrange(1, 5))]
            last = next_txid + len(records) - 1
            await writer.write(b"".join(records), next_txid, last)
            history.ack(next_txid, records)
            next_txid = last + 1
            if rng.random() < 0.3:
                await writer.finalize_segment(segment, last)
                segment = next_txid
                await writer.start_segment(segment, LAYOUT)
            await asyncio.sleep(0)
    except XdfsError:
        pass  # this writer is done: fenced, or it lost its majority
    finally:
        await writer.close()
        for channel in channels:
            await channel.close()


def split(answer: j.ReadEditsResponse) -> dict[int, bytes]:
    """txid -> framed record of a read's answer."""
    bounds = record_bounds(answer.records)
    return {answer.first_txid + i: answer.records[bounds[i]:bounds[i + 1]]
            for i in range(answer.count)}


def read_log(node: SimNode, end: int) -> dict[int, bytes]:
    """What a tailing reader gets from ``node`` (committed records only)."""
    assert node.journal is not None
    out: dict[int, bytes] = {}
    txid = 1
    while txid <= end:
        answer = node.journal.read(txid, end - txid + 1, 1 << 20, 0)
        out.update(split(answer))
        txid += answer.count or 1  # a txid this node misses (it rejoined later)
    return out


def finalized_content(node: SimNode) -> dict[int, bytes]:
    assert node.journal is not None
    out: dict[int, bytes] = {}
    for segment in node.journal.manifest(0, in_progress_ok=False).segments:
        answer = node.journal.read(segment.start_txid, segment.txn_count, 1 << 30, 0)
        assert answer.count == segment.txn_count, (node.name, segment)
        out.update(split(answer))
    return out


async def run_seed(seed: int, root: Path) -> None:
    rng = random.Random(seed)
    nodes = [SimNode(f"jn{i}", root / f"jn{i}") for i in range(3)]
    calm = FaultPlan(rng, 0.0, enabled=False)
    setup = QuorumJournalWriter([SimChannel(n, calm) for n in nodes], SETTINGS)
    await setup.format()
    history = History()
    plan = FaultPlan(rng, rate=rng.choice([0.02, 0.05, 0.1, 0.2]))
    writers = []
    for _ in range(rng.randrange(2, 5)):  # each takes over from the last, which goes on
        writers.append(asyncio.ensure_future(
            write_for_a_while(nodes, plan, history, rng, rng.randrange(5, 40))))
        for _ in range(rng.randrange(0, 300)):
            await asyncio.sleep(0)
    await asyncio.gather(*writers)
    for node in nodes:  # heal
        if not node.up:
            node.restart()
    final = QuorumJournalWriter([SimChannel(n, calm) for n in nodes], SETTINGS)
    end = await final.become_writer() or 0
    check_invariants(seed, nodes, history, final.epoch, end)
    # liveness: on healed nodes, with no fault, the new writer writes on every node
    await final.start_segment(end + 1, LAYOUT)
    await final.write(record(end + 1, rng), end + 1, end + 1)
    assert final.in_sync == {n.name for n in nodes}, f"seed {seed}: {final.in_sync}"
    await final.close()
    for node in nodes:
        node.crash()


def check_invariants(
    seed: int, nodes: list[SimNode], history: History, epoch: int, end: int
) -> None:
    where = f"seed {seed}"
    last_acked = max(history.acked, default=0)
    assert end >= last_acked, f"{where}: recovered end {end} < acknowledged txid {last_acked}"
    log: dict[int, bytes] = {}
    for node in nodes:
        for txid, data in read_log(node, end).items():
            known = log.setdefault(txid, data)
            assert known == data, f"{where}: nodes disagree on txid {txid} after recovery"
    missing = [t for t in range(1, end + 1) if t not in log]
    assert not missing, f"{where}: txids {missing[:5]} are on no node"
    for txid, data in history.acked.items():
        assert log[txid] == data, f"{where}: acknowledged txid {txid} changed"
    finalized: dict[int, bytes] = {}
    for node in nodes:
        for txid, data in finalized_content(node).items():
            known = finalized.setdefault(txid, data)
            assert known == data, f"{where}: finalized copies of txid {txid} differ"


def seeds_of_chunk(chunk: int) -> range | list[int]:
    if ONE_SEED is not None:
        return [int(ONE_SEED)] if chunk == 0 else []
    per = -(-SEEDS // CHUNKS)
    return range(chunk * per, min(SEEDS, (chunk + 1) * per))


@pytest.mark.parametrize("chunk", range(CHUNKS))
async def test_quorum_journal_under_faults(chunk: int, tmp_path: Path) -> None:
    base = Path(tempfile.mkdtemp(prefix="qjm-sim-", dir=shm_or(tmp_path)))
    try:
        for seed in seeds_of_chunk(chunk):
            root = base / str(seed)
            await run_seed(seed, root)
            shutil.rmtree(root)
    finally:
        shutil.rmtree(base, ignore_errors=True)
