"""Ledger recovery under a seeded simulator: the real recovery driver
(:func:`xdfs.log.writer.recover_ledger`) on real :class:`~xdfs.ledger.storage.LedgerStore`
files, four storage nodes (E = W = 3, A = 2), through an in-memory node pool that
shuffles the order of answers and has one node down.

Each seed writes a ledger as the writer does: entries pipelined to the write set, a node
that misses an entry leaves it for good (an ensemble change, to a spare or not), an entry
acknowledged once an ack quorum of its fragment holds it and every entry before it is
acknowledged, each add carrying the writer's last-add-confirmed; the writer stops at a
random point with the last entries on any subset of nodes. Then one node (any, or none)
is down and the ledger is recovered. The recovery rule must hold for every seed:

* it succeeds (seed 002: with one storage node down, open works);
* its end is at or past every acknowledged entry;
* every entry up to the end is on an ack quorum of the nodes the (recovered) metadata
  names for it, identical to what the writer wrote.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import msgspec
import pytest

from xdfs.config import XdfsConfig
from xdfs.errors import ConnectionLost
from xdfs.ledger.storage import LedgerStore
from xdfs.log import meta as m
from xdfs.log.nodes import NodePool, frame_entries
from xdfs.log.writer import recover_ledger
from xdfs.protocol import ledger as lp
from xdfs.protocol.log import LogSettings
from xdfs.rpc.messages import PROTOCOL_VERSION, Hello
from xdfs.rpc.service import Method

NODES = ("n0:1", "n1:1", "n2:1", "n3:1")
SETTINGS = LogSettings()  # E = W = 3, A = 2
LEDGER = 1
SEEDS = 300


def payload(entry: int) -> bytes:
    return f"entry {entry}".encode()


class SimNode:
    """A storage node: its store on disk, answering in an order the seed chooses."""

    def __init__(self, name: str, store: LedgerStore, rng: random.Random) -> None:
        self.name = name
        self.store = store
        self.rng = rng
        self.down = False

    async def call(self, method: Method[Any, Any], request: Any) -> Any:
        for _ in range(self.rng.randrange(4)):
            await asyncio.sleep(0)  # answers arrive in any order
        if self.down:
            raise ConnectionLost(f"{self.name} is down")
        if method is lp.FENCE_LEDGER:
            return self.store.fence(request.ledger_id)
        if method is lp.READ_ENTRIES:
            return self.store.read(request)
        if method is lp.ADD_ENTRIES:
            return lp.AddEntriesResponse(self.store.add(request))
        raise AssertionError(f"unexpected call {method.name}")


class SimPool(NodePool):
    """The real pool (its quorum driver) over :class:`SimNode`s."""

    def __init__(self, nodes: dict[str, SimNode]) -> None:
        super().__init__(XdfsConfig().rpc, Hello(PROTOCOL_VERSION, user="journal"), 1.0,
                         allowed=NODES)
        self.sim = nodes

    def node(self, address: str) -> Any:
        self.check(address)
        return self.sim[address]


def add(store: LedgerStore, entry: int, lac: int) -> None:
    frames, count = frame_entries(entry, [payload(entry)])
    store.add(lp.AddEntriesRequest(LEDGER, entry, count, frames, lac))


def write(rng: random.Random, stores: dict[str, LedgerStore]) -> tuple[m.LedgerInfo, int]:
    """A writer's history on ``stores``; the ledger's metadata and its last acknowledged
    entry (-1: none)."""
    fragments = [m.Fragment(0, tuple(rng.sample(NODES, 3)))]
    left: set[str] = set()  # nodes that missed an entry: they take no more adds
    held = dict.fromkeys(NODES, -1)
    lac = -1
    pending: list[int] = []  # entries sent, not yet acknowledged
    for entry in range(rng.randrange(40)):
        write_set = fragments[-1].nodes
        if any(n in left for n in write_set):  # ensemble change, to a spare or not
            spares = [n for n in NODES if n not in write_set and n not in left]
            kept = tuple(n for n in write_set if n not in left)
            nodes = kept + tuple(spares[:1] if rng.random() < 0.7 else ())
            if len(nodes) < SETTINGS.ack_quorum:
                break  # the writer fails: no ack quorum left
            fragments.append(m.Fragment(entry, nodes))
            write_set = nodes
        for node in write_set:
            if rng.random() < 0.9:
                add(stores[node], entry, lac)
                held[node] = entry
            else:
                left.add(node)
        pending.append(entry)
        # acknowledgements come back in order, some of them later (pipelining)
        while pending and rng.random() < 0.8:
            first = pending[0]
            nodes = fragments[-1].nodes if first >= fragments[-1].first_entry else next(
                f.nodes for f in reversed(fragments) if f.first_entry <= first)
            if sum(held[n] >= first for n in nodes) < SETTINGS.ack_quorum:
                break
            lac = pending.pop(0)
        if pending and len(pending) > 3:
            break  # an entry without its quorum: the writer breaks
        if rng.random() < 0.05:
            break  # the writer dies
    info = m.LedgerInfo(LEDGER, tuple(fragments))
    return info, lac


def recovered(info: m.LedgerInfo, moved: m.Fragment | None) -> m.LedgerInfo:
    if moved is None:
        return info
    meta = m.LogMeta("sim", SETTINGS, (info,), writer_epoch=1)
    meta = m.change_ensemble(meta, 1, LEDGER, moved.first_entry, moved.nodes,
                              recovery=True)
    return meta.ledgers[0]


def holds(store: LedgerStore, entry: int) -> bool:
    answer = store.read(lp.ReadEntriesRequest(LEDGER, entry, 1, 1 << 20))
    if answer.count == 0:
        return False
    assert payload(entry) in answer.entries, "a copy differs from what was written"
    return True


async def simulate(seed: int, base: Path) -> None:
    rng = random.Random(seed)
    stores = {}
    for index, name in enumerate(NODES):
        stores[name] = LedgerStore(base / f"{seed}" / f"n{index}")
        stores[name].load()
    info, acked = write(rng, stores)
    nodes = {n: SimNode(n, stores[n], rng) for n in NODES}
    down = rng.choice([None, *NODES])
    if down is not None:
        nodes[down].down = True
    end, moved = await recover_ledger(SimPool(nodes), info, SETTINGS, NODES)
    assert end >= acked, f"seed {seed}: acknowledged entry {acked} lost (end {end})"
    final = recovered(info, moved)
    for entry in range(end + 1):
        copies = [n for n in final.nodes_of(entry) if holds(stores[n], entry)]
        assert len(copies) >= SETTINGS.ack_quorum, (
            f"seed {seed}: entry {entry} on {copies} only ({final.fragments})")


@pytest.mark.parametrize("block", range(SEEDS // 50))
def test_recovery_keeps_every_acknowledged_entry_on_an_ack_quorum(block: int,
                                                                  tmp_path: Path) -> None:
    async def run() -> None:
        for seed in range(block * 50, (block + 1) * 50):
            await simulate(seed, tmp_path)

    asyncio.run(run())


def test_the_simulated_histories_cover_the_hard_cases(tmp_path: Path) -> None:
    """The seeds include what issue 37 hit: the end on one node only, a last fragment of
    two nodes (one of them down), and a tail starting before the last fragment."""
    seen = {"end on one node": 0, "two-node fragment": 0, "tail before the fragment": 0}
    for seed in range(SEEDS):
        rng = random.Random(seed)
        stores = {}
        for index, name in enumerate(NODES):
            stores[name] = LedgerStore(tmp_path / f"{seed}" / f"n{index}")
            stores[name].load()
        info, acked = write(rng, stores)
        lasts = [s.state(LEDGER).last_entry for s in stores.values()]
        if max(lasts) >= 0 and lasts.count(max(lasts)) == 1:
            seen["end on one node"] += 1
        if len(info.fragments[-1].nodes) == 2:
            seen["two-node fragment"] += 1
        if acked + 1 < info.fragments[-1].first_entry <= max(lasts):
            seen["tail before the fragment"] += 1
    assert all(seen.values()), seen
    assert msgspec.json.encode(seen)
