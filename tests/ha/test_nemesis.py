"""A nemesis against an HA cluster of real processes: a 3-server ZooKeeper, three
JournalNodes, nn1 and nn2 with their controllers, and a DataNode.

Each seeded round runs clients doing acknowledged mkdirs and file creates (create refusing
an existing path, then complete) while one fault hits: SIGKILL of
the active NameNode, SIGSTOP of it past the ZooKeeper session then SIGCONT, SIGKILL of
the active's controller, SIGSTOP of that controller past its session (the active cut off
from ZooKeeper), or SIGKILL of a JournalNode. Then everything killed is restarted and the
round is checked: exactly one NameNode is active and takes writes, every mkdirs and
create a client saw acknowledged, in any round so far, is there, and no client ever got
AlreadyExists for a fresh path (which only a retried call applied twice can cause: the
retry cache answers a retry with its first result, on the new active too). At the end,
the JournalNodes' finalized segments agree byte for byte wherever two hold the same one
(no writer ever split the history).

"No two writers" is also checked directly from the journals' records, after every round:
on each JournalNode the finalized segments' txids run without a gap and the writers'
epochs (the ``new_epoch`` op each new active logs first) only go up with txid, and each
active's ops follow its own ``new_epoch``; at the end (the last segment finalized by
``-rollEdits``) every acknowledged path is created by exactly one op of the history, and
no call key (client id, call number) is on two ops. An acknowledgement carries no epoch,
so "acknowledged under the epoch of the NameNode that answered" is checked as: each
acknowledged op is in the one agreed history, once, under a monotonic epoch sequence.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time

import pytest

from xdfs.client.client import AsyncClient
from xdfs.editlog.segments import read_segment_records, segment_index
from xdfs.errors import AlreadyExists, Unavailable, XdfsError
from xdfs.namenode.editlog.shared import decode_records
from xdfs.namenode.namespace.ops import AddFileOp, MkdirOp, NewEpochOp, Op
from xdfs.namenode.retry_cache import key_of

from ..journal.qjm_cluster import JOURNAL_ID
from .cluster import HaCluster

pytestmark = pytest.mark.slow

ROUNDS = 20
#: Failovers a check of the acknowledged paths rides out (see _missing).
MISSING_CHECK_TRIES = 3
SESSION_S = 4.0  # the test controllers' ZooKeeper session (HaCluster.automatic)
FAULTS = ("kill_active", "pause_active", "kill_controller", "pause_controller",
          "kill_journalnode")
WORKERS = 3


@pytest.fixture
def ha(auto_ha: HaCluster) -> HaCluster:
    return auto_ha


class Load:
    """Clients making acknowledged mkdirs of fresh paths until stopped."""

    def __init__(self, ha: HaCluster, round_: int) -> None:
        self.ha = ha
        self.round = round_
        self.acked: list[str] = []
        self.twice: list[str] = []  # AlreadyExists for a fresh path: applied twice
        self.stop = asyncio.Event()

    async def worker(self, w: int) -> None:
        i = 0
        while not self.stop.is_set():
            try:
                async with self.ha.client() as client:
                    while not self.stop.is_set():
                        path = f"/r{self.round}/w{w}/p{i}"
                        i += 1  # a failed try's path is never reused: it may exist or not
                        async with asyncio.timeout(5):
                            await self.one(client, path, i % 2 == 0)
                        self.acked.append(path)
            except AlreadyExists as exc:  # only a retry applied twice can say so
                self.twice.append(exc.message)
            except (XdfsError, TimeoutError):
                await asyncio.sleep(0.1)

    @staticmethod
    async def one(client: AsyncClient, path: str, directory: bool) -> None:
        """mkdirs, or an empty file (create refusing an existing path, then complete):
        the client retries both across a failover with the same call number."""
        if directory:
            await client.mkdirs(path)
        else:
            await client.create(path, overwrite=False)
            await client.complete(path, [])

    def start(self) -> list[asyncio.Task[None]]:
        return [asyncio.ensure_future(self.worker(w)) for w in range(WORKERS)]


def _fault(ha: HaCluster, kind: str, rng: random.Random) -> list[str]:
    """Inflict ``kind``; returns what must be restarted afterwards."""
    active = ha.active()
    assert active is not None, ha.logs()
    if kind == "kill_active":
        ha.namenodes[active].kill()
        return [f"nn:{active}"]
    if kind == "pause_active":
        _pause(ha.namenodes[active].pid, SESSION_S + 3)
        return []
    if kind == "kill_controller":
        ha.controllers[active].kill()
        return [f"zkfc:{active}"]
    if kind == "pause_controller":
        _pause(ha.controllers[active].pid, SESSION_S + 2)
        return []
    index = rng.randrange(3)
    ha.qjm.journalnodes[index].kill()
    return [f"jn:{index}"]


def _pause(pid: int, seconds: float) -> None:
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(pid, signal.SIGCONT)


def _restart(ha: HaCluster, what: list[str]) -> None:
    for item in what:
        role, _, name = item.partition(":")
        if role == "nn":
            ha.start(name)
        elif role == "zkfc":
            ha.start_controller(name)
        else:
            ha.qjm.start_journalnode(int(name))
    # a NameNode that was fenced (paused, then woke up) exits: bring it back as standby
    for nn_id, proc in list(ha.namenodes.items()):
        if not proc.alive():
            ha.start(nn_id)


async def _missing(ha: HaCluster, paths: list[str]) -> list[str]:
    """The acknowledged paths the active does not have. Under load a ZooKeeper session may
    still expire after a round (the active steps down and the other takes over): a check
    that finds no active waits for the next one and goes on where it was."""
    missing: list[str] = []
    async with ha.client() as client:
        for path in paths:
            for tries_left in reversed(range(MISSING_CHECK_TRIES)):
                try:
                    if not await client.exists(path):
                        missing.append(path)
                    break
                except Unavailable:
                    if not tries_left:
                        raise
                    await asyncio.to_thread(ha.wait, ha.active, "an active for the check")
    return missing


async def _round(ha: HaCluster, round_: int, kind: str, rng: random.Random
                 ) -> tuple[list[str], list[str]]:
    """Load, the fault, load during the failover; (acknowledged paths, to restart)."""
    load = Load(ha, round_)
    workers = load.start()
    await asyncio.sleep(rng.uniform(0.3, 1.5))
    restart = await asyncio.to_thread(_fault, ha, kind, rng)
    await asyncio.sleep(rng.uniform(0.5, 2.0))
    load.stop.set()
    await asyncio.gather(*workers)
    assert load.twice == [], f"round {round_} ({kind}): a retry was applied twice: {load.twice}"
    return load.acked, restart


@pytest.mark.timeout(1500)
def test_acknowledged_mkdirs_survive_a_seeded_nemesis(ha: HaCluster) -> None:
    seed = int(os.environ.get("XDFS_NEMESIS_SEED", "20261123"))
    rng = random.Random(seed)
    acked: list[str] = []
    for round_ in range(ROUNDS):
        kind = FAULTS[round_ % len(FAULTS)] if round_ < len(FAULTS) else rng.choice(FAULTS)
        started = time.monotonic()
        got, restart = asyncio.run(_round(ha, round_, kind, rng))
        _restart(ha, restart)
        ha.wait(ha.active, f"round {round_} ({kind}, seed {seed}): one active")
        ha.wait(ha.writable, f"round {round_} ({kind}, seed {seed}): the active takes writes")
        acked += got
        print(f"round {round_}: {kind}, {len(got)} acknowledged, "
              f"{time.monotonic() - started:.1f} s")
        missing = asyncio.run(_missing(ha, acked))
        assert missing == [], f"round {round_} ({kind}, seed {seed}) lost {missing[:5]}"
        _one_writer_at_a_time(_union_history(ha), f"round {round_}")
    assert len(acked) > ROUNDS  # the load did run
    _journals_agree(ha)
    result = ha.admin("-rollEdits")  # every acknowledged op into a finalized segment
    assert result.returncode == 0, result.stderr
    _each_acknowledged_once(ha, acked)


def _journal_history(ha: HaCluster, index: int) -> list[tuple[int, Op]]:
    """The ops of JournalNode ``index``'s finalized segments, in txid order (a
    finalized segment holds committed records only: a recovery finalizes what a
    majority has)."""
    current = ha.qjm.base / f"jn{index}" / JOURNAL_ID / "current"
    history: list[tuple[int, Op]] = []
    for info in segment_index(current):
        if info.in_progress or info.end is None:
            continue
        records, _bounds = read_segment_records(current, info.start, info.end,
                                                layout_version=None)
        history += decode_records(records, info.start)
    return history


def _union_history(ha: HaCluster) -> list[tuple[int, Op]]:
    """Every JournalNode's finalized records, merged by txid. One JournalNode alone may
    lack whole segments (down while they were written: the writer leaves it out of sync
    until the next segment), but where two hold a txid they must hold the same op, and
    each one's own epochs only go up."""
    merged: dict[int, Op] = {}
    for index in range(3):
        history = _journal_history(ha, index)
        _epochs_increase(history, f"jn{index}")
        for txid, op in history:
            assert merged.setdefault(txid, op) == op, f"jn{index}: another op at txid {txid}"
    return sorted(merged.items())


def _one_writer_at_a_time(history: list[tuple[int, Op]], where: str) -> None:
    """No gap in the txids; each new_epoch above the last (a writer's ops follow its own
    new_epoch and precede the next writer's)."""
    txids = [txid for txid, _op in history]
    if not txids:
        return
    assert txids == list(range(txids[0], txids[0] + len(txids))), f"{where}: txid gap"
    _epochs_increase(history, where)


def _epochs_increase(history: list[tuple[int, Op]], where: str) -> None:
    epochs = [op.epoch for _txid, op in history if isinstance(op, NewEpochOp)]
    assert epochs == sorted(set(epochs)), f"{where}: epochs not increasing: {epochs}"


def _each_acknowledged_once(ha: HaCluster, acked: list[str]) -> None:
    """In the JournalNodes' merged history (they agree where they overlap, checked
    above): every acknowledged path made by exactly one op, and no call key on two ops."""
    history = _union_history(ha)
    _one_writer_at_a_time(history, "final history")
    made: dict[str, int] = {}
    keys: dict[tuple[bytes, int], int] = {}
    for _txid, op in history:
        if isinstance(op, MkdirOp | AddFileOp):
            made[op.path] = made.get(op.path, 0) + 1
        key = key_of(op)
        if key is not None:
            keys[key] = keys.get(key, 0) + 1
    assert [p for p in acked if made.get(p) != 1] == [], "acknowledged, not made once"
    assert [k for k, n in keys.items() if n > 1] == [], "a call key on two ops"


def _journals_agree(ha: HaCluster) -> None:
    finalized: dict[str, set[bytes]] = {}
    for index in range(3):
        current = ha.qjm.base / f"jn{index}" / JOURNAL_ID / "current"
        for info in segment_index(current):
            if not info.in_progress:
                finalized.setdefault(info.name, set()).add(info.path.read_bytes())
    assert finalized, "no finalized segment on any JournalNode"
    split = [name for name, copies in finalized.items() if len(copies) > 1]
    assert split == [], f"JournalNodes disagree on {split}"
