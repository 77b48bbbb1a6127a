"""A real NameNode process SIGKILLed under concurrent mutating load, restarted, and checked;
then the same with its name dir on the power-loss layer, each crash a power cut that drops
everything not fsynced (``crash_site``, docs/testing.md).

Each round: start ``xdfs namenode`` on the same name dir, let ``WORKERS`` tasks (spread over
``CLIENTS`` AsyncClients) mutate their own subtrees, SIGKILL the process at a seeded random
moment, check the files on disk, restart and compare every subtree with a model.

What must hold (the durability rule of ``namesystem.py``: an answer is sent only after its
txid is fsynced on every name dir):

* **acknowledged => durable.** Every call that returned without error is in the namespace
  after the restart (unless a later acknowledged call of the same worker undid it). Each
  worker owns its subtree and issues one call at a time, so its model is exact.
* **in flight => all or nothing.** The one call per worker that was in flight when the
  process died may or may not have happened, and the subtree must equal *exactly* one of:

  - ``mkdirs a/b`` (-p, both new): nothing, ``a``, or ``a`` and ``a/b`` - a prefix of the
    chain, parents before children (one MkdirOp per directory, as HDFS logs it);
  - ``create f``: no ``f``, or ``f`` empty and under construction;
  - ``complete f`` (create acknowledged): ``f`` under construction, or ``f`` closed;
  - ``rename s d``: the whole subtree at ``s`` and not at ``d``, or at ``d`` and not at ``s``
    (source xor destination, children moved with it);
  - ``delete s`` (recursive, skip trash): the whole subtree there, or none of it;
  - ``set_permission p m``: the old mode or ``m``.

  Nothing else may differ: no stray entry, no lost sibling, modes and under-construction
  state as modelled; every file is empty.
* **loadable.** Every restart succeeds. Before it, the edits on disk are validated offline:
  finalized segments fully valid, txids contiguous across segments, every payload decodes,
  only the last in-progress segment may end in a torn record (tolerated by design, truncated
  at startup); every ``fsimage_N`` has a matching md5. After it, the NameNode's inode count
  and files-under-construction count equal the model's (no stray inode anywhere).
* **clients survive.** In-flight calls fail with ``Unavailable`` (``ConnectionLost`` is one)
  and the old clients keep failing that way while the NameNode is down.

Checkpoints: some rounds SIGKILL the NameNode while an admin ``save_namespace`` is in flight;
three rounds run it with a fault hook (``XDFS_FAULTS``) that SIGKILLs it at a chosen step of
the checkpoint (image written not renamed, renamed, purge about to delete). Automatic
checkpoints (every ``CHECKPOINT_TXNS``) and segment rolls (every ``SEGMENT_TXNS``) also run
during the load, so random kills land in those too.

``XDFS_CRASH_SEED`` picks another seed (the failure message names the seed in use).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from xdfs.client.client import AsyncClient
from xdfs.common.images import file_md5, parse_image_name, read_md5_file
from xdfs.common.process import ProcessGroup, ServerProcess
from xdfs.config import XdfsConfig
from xdfs.editlog.segments import SegmentReader, segment_index
from xdfs.errors import RpcTimeout, StorageError, Unavailable
from xdfs.namenode.editlog.codec import decode_payload
from xdfs.namenode.namespace.ops import LAYOUT_VERSION
from xdfs.testing.lazyfs import CrashSite

pytestmark = pytest.mark.slow

SEED = int(os.environ.get("XDFS_CRASH_SEED", "20261121"))
ROUNDS = 20
CLIENTS = 4
WORKERS_PER_CLIENT = 2
LOAD_S = (0.2, 1.0)
#: Rounds that kill the NameNode while an admin save_namespace is in flight.
SAVE_KILL_ROUNDS = frozenset({3, 8, 12, 16})
#: Rounds whose NameNode SIGKILLs itself at a checkpoint step (fault hook).
FAULT_ROUNDS = {6: "image.before_rename", 11: "image.after_rename", 18: "purge.before_delete"}
SEGMENT_TXNS = 400
CHECKPOINT_TXNS = 1500
TREE_MAX = 60  # entries per worker subtree before deletes are favoured
DEADLINE_S = 240.0
USER, PASSWORD = "root", "pw"
ENV = {"XDFS_USER": USER, "XDFS_PASSWORD": PASSWORD}
READY = r"namenode serving on (\S+)"
BASE_INODES = 3  # /, /user, /tmp after -format
DIR_MODES = (0o700, 0o711, 0o750, 0o755, 0o770, 0o777)
FILE_MODES = (0o600, 0o640, 0o644, 0o664)
# Launches the CLI with the fault hooks of XDFS_FAULTS armed (`xdfs namenode` does not arm
# them itself).
ARMED_MAIN = (
    "import sys\n"
    "from xdfs.common.faults import arm_faults_from_env\n"
    "arm_faults_from_env()\n"
    "from xdfs.cli.main import main\n"
    "sys.argv[0] = 'xdfs'\n"
    "main()\n"
)


@dataclass(frozen=True)
class Entry:
    is_dir: bool
    mode: int
    uc: bool = False  # a file under construction


Tree = dict[str, Entry]  # path relative to the worker's root -> entry


@dataclass
class Pending:
    """One call: what the subtree is if it took effect, and every state allowed if it was
    in flight at the kill (always including "not done" and "done")."""

    name: str
    call: Callable[[AsyncClient], Awaitable[object]]
    after: Tree
    outcomes: list[Tree]


def _subtree(tree: Tree, top: str) -> list[str]:
    return [p for p in tree if p == top or p.startswith(top + "/")]


@dataclass
class Worker:
    root: str  # absolute, e.g. /c0/w1
    rng: random.Random
    tree: Tree = field(default_factory=dict)
    counter: int = 0
    pending: Pending | None = None
    failure: BaseException | None = None
    acked: Counter[str] = field(default_factory=Counter)

    def abs(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    def _name(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    # -- the operations; each computes its effect from the current (exact) model ---------

    def mkdirs(self) -> Pending:
        parents = [""] + [p for p, e in self.tree.items() if e.is_dir and p.count("/") < 3]
        base = self.rng.choice(parents)
        a = f"{base}/{self._name('d')}".lstrip("/")
        b = f"{a}/{self._name('d')}"
        mode = self.rng.choice(DIR_MODES)
        one = {**self.tree, a: Entry(True, 0o755)}
        two = {**one, b: Entry(True, mode)}
        return Pending(
            f"mkdirs {b}",
            lambda c: c.mkdirs(self.abs(b), mode=mode, parents=True),
            two,
            [self.tree, one, two],
        )

    def create(self) -> Pending:
        base = self.rng.choice([""] + [p for p, e in self.tree.items() if e.is_dir])
        f = f"{base}/{self._name('f')}".lstrip("/")
        after = {**self.tree, f: Entry(False, 0o644, uc=True)}
        return Pending(
            f"create {f}", lambda c: c.create(self.abs(f)), after, [self.tree, after]
        )

    def complete(self, f: str) -> Pending:
        after = {**self.tree, f: Entry(False, self.tree[f].mode, uc=False)}
        return Pending(
            f"complete {f}", lambda c: c.complete(self.abs(f), []), after, [self.tree, after]
        )

    def rename(self) -> Pending | None:
        if not self.tree:
            return None
        src = self.rng.choice(list(self.tree))
        moved = set(_subtree(self.tree, src))
        targets = [""] + [p for p, e in self.tree.items() if e.is_dir and p not in moved]
        dst = f"{self.rng.choice(targets)}/{self._name('r')}".lstrip("/")
        after = {}
        for path, entry in self.tree.items():
            after[dst + path[len(src):] if path in moved else path] = entry
        return Pending(
            f"rename {src} {dst}",
            lambda c: c.rename(self.abs(src), self.abs(dst)),
            after,
            [self.tree, after],
        )

    def delete(self) -> Pending | None:
        if not self.tree:
            return None
        top_level = [p for p in self.tree if "/" not in p]
        many = len(self.tree) > TREE_MAX
        victim = self.rng.choice(top_level if many else list(self.tree))
        gone = set(_subtree(self.tree, victim))
        after = {p: e for p, e in self.tree.items() if p not in gone}
        return Pending(
            f"delete {victim}",
            lambda c: c.delete(self.abs(victim), recursive=True, skip_trash=True),
            after,
            [self.tree, after],
        )

    def set_permission(self) -> Pending | None:
        if not self.tree:
            return None
        path = self.rng.choice(list(self.tree))
        entry = self.tree[path]
        mode = self.rng.choice(DIR_MODES if entry.is_dir else FILE_MODES)
        after = {**self.tree, path: Entry(entry.is_dir, mode, entry.uc)}
        return Pending(
            f"set_permission {path} {mode:o}",
            lambda c: c.set_permission(self.abs(path), mode),
            after,
            [self.tree, after],
        )

    # -- the load ---------------------------------------------------------------------

    async def _do(self, client: AsyncClient, op: Pending) -> bool:
        self.pending = op
        try:
            await op.call(client)
        except (Unavailable, RpcTimeout) as exc:  # the NameNode died: op stays in flight
            self.failure = exc
            return False
        self.tree = op.after
        self.pending = None
        self.acked[op.name.split()[0]] += 1
        return True

    async def run(self, client: AsyncClient) -> None:
        """Mutate until a call fails because the NameNode is gone."""
        self.failure = None
        while True:
            kind = self.rng.choices(
                ["mkdirs", "touchz", "rename", "delete", "set_permission"],
                weights=[20, 30, 15, 25 if len(self.tree) > TREE_MAX else 8, 15],
            )[0]
            if kind == "touchz":  # create + complete, as `dfs -touchz`
                create = self.create()
                ok = await self._do(client, create)
                if ok:
                    ok = await self._do(client, self.complete(create.name.split()[1]))
            else:
                op = getattr(self, kind)()
                ok = True if op is None else await self._do(client, op)
            if not ok:
                return


# -- checks -------------------------------------------------------------------------------


async def read_tree(client: AsyncClient, root: str) -> Tree:
    tree: Tree = {}
    todo = [root]
    while todo:
        directory = todo.pop()
        async for status in client.iter_dir(directory):
            rel = status.path[len(root) + 1:]
            assert status.path.startswith(root + "/"), status.path
            tree[rel] = Entry(status.is_dir, status.mode & 0o7777, status.under_construction)
            if status.is_dir:
                todo.append(status.path)
            else:
                assert status.length == 0, f"{status.path} has {status.length} bytes"
    return tree


def describe(actual: Tree, expected: Tree) -> str:
    lines = []
    for path in sorted(set(actual) | set(expected)):
        a, e = actual.get(path), expected.get(path)
        if a != e:
            lines.append(f"    {path}: actual {a}, model {e}")
    return "\n".join(lines) or "    (equal)"


@dataclass
class DiskReport:
    last_txid: int
    torn: int
    in_progress: int


def check_disk(name_dir: Path) -> DiskReport:
    """Offline validation of what a kill left: edits contiguous and decodable (a torn tail
    only at the end of the last in-progress segment), every image matching its md5."""
    current = name_dir / "current"
    segments = segment_index(current)
    assert segments, f"no edits segment in {current}"
    in_progress = [s for s in segments if s.in_progress]
    assert len(in_progress) <= 1, f"several in-progress segments: {in_progress}"
    assert all(not s.in_progress for s in segments[:-1]), "in-progress segment not last"
    expected = segments[0].start
    torn = 0
    for i, seg in enumerate(segments):
        last = i == len(segments) - 1
        assert seg.start == expected, f"{seg.path}: starts at {seg.start}, expected {expected}"
        reader = SegmentReader(
            seg.path,
            layout_version=LAYOUT_VERSION,
            expected_start=seg.start,
            expected_end=seg.end,
            torn_tail="allow" if seg.in_progress and last else "error",
        )
        for txid, opcode, payload, _offset in reader:
            assert txid == expected, f"{seg.path}: txid {txid}, expected {expected}"
            decode_payload(opcode, payload)
            expected += 1
        torn += reader.torn is not None
    images = []
    for name in os.listdir(current):
        parsed = parse_image_name(name)
        if parsed is not None and parsed[0] == "image":
            image = current / name
            assert read_md5_file(image) == file_md5(image), f"{image}: md5 mismatch"
            images.append(parsed[1])
    assert images, f"no fsimage in {current}"
    assert max(images) <= expected - 1, f"image {max(images)} beyond the edits ({expected - 1})"
    assert segments[0].start <= min(images) + 1, "edits after the oldest image were purged"
    return DiskReport(expected - 1, torn, len(in_progress))


@dataclass
class Stats:
    rounds: int = 0
    acked: Counter[str] = field(default_factory=Counter)
    inflight: Counter[str] = field(default_factory=Counter)
    torn_tails: int = 0
    save_killed_in_flight: int = 0
    fault_kills: list[str] = field(default_factory=list)


class Cluster:
    """The NameNode under test: its name dir is on ``site`` (the power-loss layer, where a
    crash is a power cut, or a plain directory, where it is SIGKILL); logs go to ``base``."""

    def __init__(self, processes: ProcessGroup, base: Path, site: CrashSite) -> None:
        self.processes = processes
        self.base = base
        self.site = site
        self.name_dir = site.root / "name"
        self.starts = 0
        self.nn: ServerProcess | None = None
        self.address = ""

    def format(self) -> None:
        result = subprocess.run(
            [sys.executable, "-m", "xdfs", "namenode", "--name-dir", str(self.name_dir),
             "-format"],
            env={**os.environ, **ENV}, capture_output=True, text=True, timeout=120,
        )
        assert result.returncode == 0, result.stderr

    def args(self, fault: str | None = None) -> list[str]:
        # With a fault armed, only the round's own save_namespace may reach it: a checkpoint
        # due at startup (a fast round logs more than CHECKPOINT_TXNS) would fire it while
        # the previous round is still being verified.
        checkpoint_txns = CHECKPOINT_TXNS if fault is None else 1 << 40
        return [
            "-D", f"namenode.edits_segment_txns_max={SEGMENT_TXNS}",
            "-D", f"namenode.checkpoint_txns={checkpoint_txns}",
            "-D", "namenode.checkpoint_check_interval_s=0.5",
            "namenode", "--name-dir", str(self.name_dir), "--rpc-address", "127.0.0.1:0",
        ]

    async def start(self, fault: str | None = None) -> str:
        self.starts += 1
        name = f"nn-{self.starts:02d}"
        if fault is None:
            nn = await asyncio.to_thread(
                self.processes.start_xdfs, name, *self.args(), ready_pattern=READY, env=ENV
            )
        else:
            proc = ServerProcess(
                [sys.executable, "-c", ARMED_MAIN, *self.args(fault)],
                log_path=self.base / f"{name}.log",
                ready_pattern=READY,
                env={**ENV, "XDFS_FAULTS": f"{fault}=kill"},
            )
            nn = await asyncio.to_thread(self.processes.start, proc, 60.0)
        assert nn.match is not None
        self.nn = nn
        self.address = nn.match.group(1)
        text = nn.log_text()
        for bad in ("skipping image", "CRITICAL", "Traceback"):
            assert bad not in text, f"{name}: {bad!r} in its log:\n{text[-3000:]}"
        return text

    def client(self) -> AsyncClient:
        return AsyncClient(
            f"xdfs://{self.address}", user=USER, password=PASSWORD, config=XdfsConfig()
        )

    def crash(self) -> None:
        assert self.nn is not None
        self.site.crash(self.nn)


async def verify(cluster: Cluster, workers: list[Worker], stats: Stats) -> None:
    """Resolve every in-flight call against the restarted namespace; then the model is
    exact again. Also compares the NameNode's own inode and open-file counts."""
    async with cluster.client() as client:
        for w in workers:
            root = await client.stat(w.root)
            assert root.is_dir, w.root
            actual = await read_tree(client, w.root)
            allowed = [w.tree] if w.pending is None else w.pending.outcomes
            if actual not in allowed:
                what = w.pending.name if w.pending else "nothing"
                raise AssertionError(
                    f"seed {SEED}, round {stats.rounds}: {w.root} (in flight: {what}) "
                    f"matches no allowed state; vs 'not done':\n{describe(actual, allowed[0])}"
                    f"\nvs 'done':\n{describe(actual, allowed[-1])}"
                )
            if w.pending is not None:
                index = allowed.index(actual)
                kind = w.pending.name.split()[0]
                outcome = "done" if index == len(allowed) - 1 else (
                    "not done" if index == 0 else "partial")
                stats.inflight[f"{kind} {outcome}"] += 1
            w.tree = actual
            w.pending = None
        status = await client.status()
        model_inodes = BASE_INODES + CLIENTS + len(workers) + sum(len(w.tree) for w in workers)
        model_uc = sum(e.uc for w in workers for e in w.tree.values())
        assert status.inodes == model_inodes, (status.inodes, model_inodes)
        assert status.files_under_construction == model_uc, (
            status.files_under_construction, model_uc)


async def load_and_kill(
    cluster: Cluster, workers: list[Worker], rng: random.Random, round_no: int,
    stats: Stats, save_estimate_s: float,
) -> None:
    nn = cluster.nn
    assert nn is not None
    clients = [cluster.client() for _ in range(CLIENTS)]
    admin = cluster.client()
    tasks = [
        asyncio.create_task(w.run(clients[i % CLIENTS]), name=f"worker {w.root}")
        for i, w in enumerate(workers)
    ]
    await asyncio.sleep(rng.uniform(*LOAD_S))
    fault = FAULT_ROUNDS.get(round_no)
    if fault is not None:
        save = asyncio.create_task(admin.save_namespace())
        for _ in range(1500):  # the fault hook SIGKILLs the process mid-checkpoint
            if not nn.alive():
                break
            await asyncio.sleep(0.01)
        assert not nn.alive(), f"round {round_no}: fault {fault} never fired"
        assert nn.proc is not None and nn.proc.returncode == -9, nn.proc
        cluster.crash()  # reap and clean the session (and cut the power)
        stats.fault_kills.append(fault)
    elif round_no in SAVE_KILL_ROUNDS:
        save = asyncio.create_task(admin.save_namespace())
        await asyncio.sleep(rng.uniform(0.0, save_estimate_s))
        in_flight = not save.done()
        cluster.crash()
        stats.save_killed_in_flight += in_flight
    else:
        save = None
        cluster.crash()
    done, _ = await asyncio.wait(tasks, timeout=30)
    assert len(done) == len(tasks), "a worker did not notice the NameNode died"
    for task in tasks:
        task.result()  # anything but Unavailable (a model mismatch) fails here
    for w in workers:
        assert isinstance(w.failure, Unavailable | RpcTimeout), w.failure
        stats.acked.update(w.acked)
        w.acked.clear()
    if save is not None:  # answered just before the kill, or failed with it
        # (A power cut stops the disk a moment before the process is killed: a save may
        # fail on its disk first, StorageError, and say so before it dies.)
        powered = cluster.site.disk is not None
        with contextlib.suppress(Unavailable, *((StorageError,) if powered else ())):
            await save
    for client in [*clients, admin]:  # the NameNode is down: calls fail, clients survive
        with pytest.raises(Unavailable):
            await client.stat("/")
        await client.close()


async def test_namenode_crash_under_load(
    processes: ProcessGroup, tmp_path: Path, crash_site: CrashSite
) -> None:
    """Run once with SIGKILL, once on the power-loss layer, where each crash drops every
    write and directory change the NameNode had not synced (a missing fsync fails there)."""
    await crash_rounds(Cluster(processes, tmp_path, crash_site))
    if crash_site.disk is not None:
        cuts = crash_site.disk.cuts
        assert len(cuts) == ROUNDS
        assert sum(cut.dirty_files + cut.names for cut in cuts) > 0, cuts


async def crash_rounds(cluster: Cluster) -> None:
    rng = random.Random(SEED)
    started = time.monotonic()
    stats = Stats()
    workers = [
        Worker(f"/c{c}/w{i}", random.Random(rng.random()))
        for c in range(CLIENTS)
        for i in range(WORKERS_PER_CLIENT)
    ]
    async with asyncio.timeout(DEADLINE_S):
        await asyncio.to_thread(cluster.format)
        await cluster.start()
        async with cluster.client() as client:
            for w in workers:
                await client.mkdirs(w.root)
            began = time.monotonic()
            await client.save_namespace()  # an estimate of how long a checkpoint takes
            save_estimate_s = max(0.005, time.monotonic() - began)
        for round_no in range(1, ROUNDS + 1):
            stats.rounds = round_no
            await load_and_kill(cluster, workers, rng, round_no, stats, save_estimate_s)
            disk = check_disk(cluster.name_dir)
            log_text = await cluster.start(FAULT_ROUNDS.get(round_no + 1))
            stats.torn_tails += log_text.count("truncating the tail")
            await verify(cluster, workers, stats)
            async with cluster.client() as client:
                status = await client.status()
            assert status.last_txid >= disk.last_txid, (status.last_txid, disk.last_txid)
        assert cluster.nn is not None
        assert cluster.nn.terminate() == 0  # a graceful stop after all that
        disk = check_disk(cluster.name_dir)
        assert disk.in_progress == 0 and disk.torn == 0
    assert stats.fault_kills == list(FAULT_ROUNDS.values())
    assert stats.save_killed_in_flight >= 1, "no save_namespace was in flight at a kill"
    assert sum(stats.acked.values()) > ROUNDS * len(workers), stats.acked
    print(
        f"\nseed {SEED}: {stats.rounds} rounds in {time.monotonic() - started:.1f} s; "
        f"acknowledged {dict(stats.acked)}; in flight at the kill {dict(stats.inflight)}; "
        f"save_namespace in flight at {stats.save_killed_in_flight} of "
        f"{len(SAVE_KILL_ROUNDS)} kills; fault kills {stats.fault_kills}; "
        f"tails truncated (torn or zeros ahead) {stats.torn_tails}"
    )
