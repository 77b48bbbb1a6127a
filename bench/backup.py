"""BackupNode benchmark: the cost of being followed, replication lag, catch-up, checkpoint upload.

    .venv/bin/python bench/backup.py            # full run (about 6 minutes)
    .venv/bin/python bench/backup.py --quick    # smoke run, under 2 minutes

Every server is a real process (``python -m xdfs namenode`` / ``backupnode``, formatted with
``xdfs namenode -format``, the superuser from $XDFS_USER / $XDFS_PASSWORD as ``xdfs dev``
does); this process is the load generator and reads the servers' progress over RPC (the
NameNode's ``status``, the backup's ``backup_status``), so on a 2-core machine the NameNode,
the backup and the client compete for CPU exactly as they would in life.

(1) **cost of being followed**: empty-file creates (create + complete, 2 RPCs and 2 edits
    per file) from one connection with ``--writers`` (64) in flight, as bench/namenode.py's
    RPC part, against a NameNode alone (A) and a NameNode with a BackupNode attached and
    caught up (B), interleaved A B A B ...; every run on a freshly formatted NameNode (the
    same namespace size for both). Reported: files/s, the ratio B/A of the medians, the CPU
    of each process per file, and how long the backup took to catch up once the load
    stopped.
(2) **replication lag** at that maximum create rate (extra runs like B, with sampling):
    every ``--sample-ms`` (50) the NameNode's ``status`` and the backup's ``backup_status``
    are called together; lag in txids = NameNode synced txid - backup synced txid. Lag in
    ms, two ways. Probes: take the NameNode's synced txid T (the moment its status answer
    arrives is t0), poll the backup every 2 ms until its synced txid >= T (t1); lag = t1 -
    t0. The true lag counts from T's fsync, up to one group commit plus the status answer's
    trip before t0 (the NameNode answers it behind the queued creates), so probes read low
    by a few ms; t1 overshoots by up to one poll. Hence also: each txid sample divided by
    the run's edit rate (the age of the backup's state, if edits arrive evenly).
(3) **catch-up (fetched edits/s)**: a NameNode with ``--catchup-edits`` edits (file
    creates) and no backup; then a fresh backup starts (bootstraps from the NameNode's
    image at txid 0, so it must fetch every edit) with ``-D backupnode.fetch_batch_max=N``
    for each N of ``--batches``; edits/s from the first change of its synced txid (a batch
    boundary: the txid moves only when a whole batch is applied and synced) until it
    reaches the NameNode's, polled every 5 ms. Rounds alternate the order of the batches.
(4) **checkpoint upload** of a 1M-inode image (``--image-inodes``): a formatted name dir's
    image is replaced by one of the same namespace grown in this process to 1M inodes
    (still txid 0); a NameNode process starts on it; the few edits it then logs are
    fetched with ``fetch_edits`` and applied to the same namespace here, which is saved
    as ``fsimage_<T>`` with T = the NameNode's synced txid -- exactly the image a caught-up
    backup would upload -- and uploaded with ``upload_image`` (head, 1 MiB chunks, tail);
    the NameNode verifies the md5 and installs it. Timed: the upload call, head to answer.
    Each run logs one more edit first, so each image is newer than the last installed.

Rates are medians of runs, min .. max beside them. Nothing here is asserted by tests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench_env import Table, load_average, machine, percentile, proc_cpu_s, scratch_parent
from xdfs.client.client import AsyncClient
from xdfs.common.images import image_chunks
from xdfs.common.process import ServerProcess
from xdfs.config import XdfsConfig
from xdfs.namenode.editlog.replay import decode_batch
from xdfs.namenode.image.fsimage import image_head
from xdfs.namenode.image.recovery import load_namespace, save_checkpoint
from xdfs.namenode.image.storage import StorageDirectory
from xdfs.namenode.namespace.ops import AddFileOp, CloseFileOp, MkdirOp
from xdfs.namenode.namespace.tree import Namespace
from xdfs.protocol import namenode as nn_protocol
from xdfs.protocol.backup import (
    BACKUP_STATUS,
    FETCH_EDITS,
    UPLOAD_IMAGE,
    BackupStatus,
    FetchEditsRequest,
)
from xdfs.rpc.loop import run
from xdfs.rpc.messages import Empty

SUPERUSER, SUPER_PASSWORD = "root", "rootpw"
USER, PASSWORD = "bench", "benchpw"
ENV = {"XDFS_USER": SUPERUSER, "XDFS_PASSWORD": SUPER_PASSWORD}
FANOUT = 1000  # files per directory
NN_READY = r"namenode serving on (\S+)"
BACKUP_READY = r"backupnode serving on (\S+)"
PROBE_POLL_S = 0.002
CATCHUP_POLL_S = 0.005
AIM_SLOWDOWN = 0.10  # issue 5: being followed costs the NameNode <= 10% of its create rate


@dataclass(frozen=True)
class Settings:
    quick: bool
    runs: int  # create runs per arm (A: alone, B: followed)
    files: int  # files per create run
    lag_runs: int
    writers: int
    sample_s: float
    catchup_edits: int
    catchup_rounds: int
    batches: tuple[int, ...]
    image_inodes: int
    image_runs: int
    only: tuple[str, ...]
    workdir: str | None


# -- the table ---------------------------------------------------------------------------


# -- processes ---------------------------------------------------------------------------



def format_name_dir(name_dir: Path) -> None:
    fmt = ServerProcess.xdfs(
        "namenode", "--name-dir", str(name_dir), "-format",
        log_path=name_dir.parent / f"{name_dir.name}-format.log", ready_pattern=r"formatted ",
        env=ENV,
    )
    fmt.start(deadline_s=60)
    assert fmt.proc is not None
    if fmt.proc.wait(60) != 0:
        raise RuntimeError(f"formatting {name_dir} failed:\n{fmt.log_text()[-2000:]}")


def start_namenode(name_dir: Path) -> ServerProcess:
    nn = ServerProcess.xdfs(
        "--log-level", "WARNING", "namenode", "--name-dir", str(name_dir),
        "--rpc-address", "127.0.0.1:0",
        log_path=name_dir.parent / f"{name_dir.name}.log", ready_pattern=NN_READY, env=ENV,
    )
    nn.start(deadline_s=120)
    return nn


def start_backup(name_dir: Path, namenode: str, batch: int | None = None) -> ServerProcess:
    overrides = ["-D", f"backupnode.fetch_batch_max={batch}"] if batch is not None else []
    bk = ServerProcess.xdfs(
        *overrides, "--log-level", "WARNING", "backupnode", "--name-dir", str(name_dir),
        "--namenode", namenode, "--rpc-address", "127.0.0.1:0",
        log_path=name_dir.parent / f"{name_dir.name}.log", ready_pattern=BACKUP_READY,
        env=ENV,
    )
    bk.start(deadline_s=120)
    return bk


def address(proc: ServerProcess) -> str:
    assert proc.match is not None
    return proc.match.group(1)


async def stop(*procs: ServerProcess | None) -> None:
    for proc in procs:
        if proc is not None and proc.proc is not None:
            await asyncio.to_thread(proc.terminate)


def superuser_client(addr: str) -> AsyncClient:
    return AsyncClient(f"xdfs://{addr}", user=SUPERUSER, password=SUPER_PASSWORD,
                       config=XdfsConfig())


async def nn_synced(root: AsyncClient) -> int:
    return (await root.rpc.call(nn_protocol.STATUS, Empty())).synced_txid


async def backup_status(bk: AsyncClient) -> BackupStatus:
    return await bk.rpc.call(BACKUP_STATUS, Empty())


async def wait_caught_up(bk: AsyncClient, txid: int, poll_s: float = 0.005,
                         deadline_s: float = 300.0) -> float:
    """Seconds until the backup's synced txid reaches ``txid``."""
    started = time.perf_counter()
    while (await backup_status(bk)).synced_txid < txid:
        if time.perf_counter() - started > deadline_s:
            raise TimeoutError(f"the backup did not reach txid {txid} in {deadline_s} s")
        await asyncio.sleep(poll_s)
    return time.perf_counter() - started


# -- load --------------------------------------------------------------------------------


def file_path(top: str, i: int) -> str:
    return f"{top}/p{i // FANOUT:04d}/f{i:07d}"


async def prepare(root: AsyncClient, uri: str, top: str, files: int) -> AsyncClient:
    """The ``bench`` user, owner of ``top``, with the directories the files go into."""
    await root.add_user(USER, PASSWORD)
    await root.mkdirs(top)
    await root.set_owner(top, USER)
    client = AsyncClient(uri, user=USER, password=PASSWORD, config=XdfsConfig())
    for p in range((files + FANOUT - 1) // FANOUT):
        await client.mkdirs(f"{top}/p{p:04d}", parents=False)
    return client


async def drive(op: Callable[[int], Awaitable[object]], n: int, tasks: int) -> float:
    """Run op(0..n-1) from ``tasks`` coroutines; returns the wall seconds."""
    items = iter(range(n))

    async def worker() -> None:
        for i in items:
            await op(i)

    wall = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(tasks)))
    return time.perf_counter() - wall


async def create_files(client: AsyncClient, top: str, n: int, tasks: int) -> float:
    async def create(i: int) -> None:
        path = file_path(top, i)
        await client.create(path, create_parents=False)
        await client.complete(path, [])

    return await drive(create, n, tasks)


# -- (1) and (2): create rate alone and followed; lag ----------------------------------------


@dataclass
class LagSamples:
    txns: list[float] = field(default_factory=list)
    ms: list[float] = field(default_factory=list)


async def sample_txn_lag(root: AsyncClient, bk: AsyncClient, done: asyncio.Event,
                         interval_s: float, out: list[float]) -> None:
    while not done.is_set():
        nn_status, b = await asyncio.gather(root.rpc.call(nn_protocol.STATUS, Empty()),
                                            backup_status(bk))
        out.append(max(0, nn_status.synced_txid - b.synced_txid))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), interval_s)


async def probe_ms_lag(root: AsyncClient, bk: AsyncClient, done: asyncio.Event,
                       interval_s: float, out: list[float]) -> None:
    while not done.is_set():
        target = await nn_synced(root)
        t0 = time.perf_counter()
        while True:  # polled: the backup has no way to tell us when it gets there
            reached = (await backup_status(bk)).synced_txid >= target
            if reached:
                break
            await asyncio.sleep(PROBE_POLL_S)
        out.append((time.perf_counter() - t0) * 1000)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), interval_s)


async def create_run(s: Settings, table: Table, base: Path, label: str, *, followed: bool,
                     lag: LagSamples | None = None) -> float:
    """One run on a fresh NameNode (and backup): returns files/s."""
    run_dir = base / label
    run_dir.mkdir()
    nn: ServerProcess | None = None
    bp: ServerProcess | None = None
    try:
        await asyncio.to_thread(format_name_dir, run_dir / "nn")
        nn = await asyncio.to_thread(start_namenode, run_dir / "nn")
        uri = f"xdfs://{address(nn)}"
        async with superuser_client(address(nn)) as root:
            client = await prepare(root, uri, "/bench", s.files)
            bk: AsyncClient | None = None
            try:
                if followed:
                    bp = await asyncio.to_thread(start_backup, run_dir / "bk", address(nn))
                    bk = superuser_client(address(bp))
                    await wait_caught_up(bk, await nn_synced(root))
                done = asyncio.Event()
                samplers: list[asyncio.Task[None]] = []
                if lag is not None:
                    assert bk is not None
                    samplers = [
                        asyncio.create_task(sample_txn_lag(root, bk, done, s.sample_s,
                                                           lag.txns)),
                        asyncio.create_task(probe_ms_lag(root, bk, done, s.sample_s, lag.ms)),
                    ]
                nn_cpu = proc_cpu_s(nn.pid)
                bk_cpu = proc_cpu_s(bp.pid) if bp is not None else 0.0
                own_cpu = time.process_time()
                wall = await create_files(client, "/bench", s.files, s.writers)
                own_cpu = time.process_time() - own_cpu
                done.set()
                last = await nn_synced(root)
                drain = await wait_caught_up(bk, last) if bk is not None else 0.0
                # After the drain: the backup's work for these files, and the NameNode's
                # work serving it, are both done.
                nn_cpu = proc_cpu_s(nn.pid) - nn_cpu
                bk_cpu = proc_cpu_s(bp.pid) - bk_cpu if bp is not None else 0.0
                await asyncio.gather(*samplers)
            finally:
                await client.close()
                if bk is not None:
                    await bk.close()
        rate = s.files / wall
        arm = ("with backup, lag sampled" if lag is not None else "with backup") \
            if followed else "NameNode alone"
        part = "lag" if lag is not None else "cost"
        table.add(part, f"create, {s.writers} in flight, {arm}", "files/s", rate)
        cpu = [("NameNode", nn_cpu), ("client", own_cpu)]
        if followed:
            cpu.insert(1, ("backup", bk_cpu))
        for who, seconds in cpu:
            table.add(part, f"CPU per file, {who}, {arm}", "us", seconds / s.files * 1e6,
                      quiet=True)
        print("    CPU per file: " + ", ".join(f"{who} {seconds / s.files * 1e6:,.0f} us"
                                              for who, seconds in cpu),
              file=sys.stderr, flush=True)
        if followed and lag is None:
            table.add(part, "backup catch-up once the load stops", "ms", drain * 1000,
                      ",.1f")
        return rate
    finally:
        await stop(bp, nn)
        shutil.rmtree(run_dir, ignore_errors=True)


async def cost_part(s: Settings, table: Table, base: Path) -> None:
    alone: list[float] = []
    followed: list[float] = []
    for run_number in range(1, s.runs + 1):
        # A B, then B A: neither arm always runs first.
        order = (False, True) if run_number % 2 else (True, False)
        for with_backup in order:
            arm = "B" if with_backup else "A"
            print(f"cost run {run_number}/{s.runs} {arm}", file=sys.stderr, flush=True)
            rate = await create_run(s, table, base, f"run{run_number}{arm}",
                                    followed=with_backup)
            (followed if with_backup else alone).append(rate)
    ratio = statistics.median(followed) / statistics.median(alone)
    pairs = [b / a for a, b in zip(alone, followed, strict=True)]
    met = "met" if ratio >= 1 - AIM_SLOWDOWN else "MISSED"
    table.add("cost", "create rate with backup / alone (medians)", "", ratio, ".3f",
              note=f"per run pair {min(pairs):.3f} .. {max(pairs):.3f}; aim >= "
                   f"{1 - AIM_SLOWDOWN:.2f} (<= {AIM_SLOWDOWN:.0%} slower): {met}")


async def lag_part(s: Settings, table: Table, base: Path) -> None:
    lag = LagSamples()
    derived: list[float] = []  # txid lag / the run's edit rate, in ms
    for run_number in range(1, s.lag_runs + 1):
        print(f"lag run {run_number}/{s.lag_runs}", file=sys.stderr, flush=True)
        before = (len(lag.txns), len(lag.ms))
        rate = await create_run(s, table, base, f"lag{run_number}", followed=True, lag=lag)
        txns, ms = lag.txns[before[0]:], lag.ms[before[1]:]
        edits_per_s = 2 * rate  # create + complete
        derived.extend(x / edits_per_s * 1000 for x in txns)
        print(f"    lag this run: txns median {statistics.median(txns):,.0f} max "
              f"{max(txns):,.0f}; ms median {statistics.median(ms):,.1f} max {max(ms):,.1f} "
              f"({len(txns)} samples, {len(ms)} probes)", file=sys.stderr, flush=True)
    note = f"{len(lag.txns)} samples every {s.sample_s * 1000:.0f} ms over {s.lag_runs} runs"
    for name, q in (("median", 50.0), ("p99", 99.0)):
        table.add("lag", f"lag in txids, {name}", "txns", percentile(lag.txns, q), note=note)
    table.add("lag", "lag in txids, max", "txns", max(lag.txns), note=note)
    note = f"{len(lag.ms)} probes over {s.lag_runs} runs"
    for name, q in (("median", 50.0), ("p99", 99.0)):
        table.add("lag", f"lag in ms by probes, {name}", "ms",
                  percentile(lag.ms, q), ",.1f", note=note)
    table.add("lag", "lag in ms by probes, max", "ms", max(lag.ms), ",.1f", note=note)
    note = "each txid sample divided by its run's edit rate (2 edits per file)"
    for name, q in (("median", 50.0), ("p99", 99.0)):
        table.add("lag", f"lag in ms as txids / edit rate, {name}", "ms",
                  percentile(derived, q), ",.1f", note=note)


# -- (3) catch-up ----------------------------------------------------------------------------


async def catchup_part(s: Settings, table: Table, base: Path) -> None:
    work = base / "catchup"
    work.mkdir()
    nn: ServerProcess | None = None
    try:
        await asyncio.to_thread(format_name_dir, work / "nn")
        nn = await asyncio.to_thread(start_namenode, work / "nn")
        files = s.catchup_edits // 2  # create + complete: two edits per file
        async with superuser_client(address(nn)) as root:
            client = await prepare(root, f"xdfs://{address(nn)}", "/bench", files)
            try:
                wall = await create_files(client, "/bench", files, s.writers)
            finally:
                await client.close()
            target = await nn_synced(root)
        edits_bytes = sum(p.stat().st_size for p in (work / "nn" / "current").glob("edits_*"))
        print(f"catch-up: {target:,} edits logged ({files:,} files in {wall:.1f} s), "
              f"{edits_bytes / target:,.0f} bytes per edit on disk", file=sys.stderr, flush=True)
        rates: dict[int, list[float]] = {b: [] for b in s.batches}
        for round_number in range(1, s.catchup_rounds + 1):
            order = s.batches if round_number % 2 else tuple(reversed(s.batches))
            for batch in order:
                rate = await catchup_once(table, work, address(nn), nn.pid, batch, target,
                                          f"bk{batch}r{round_number}")
                rates[batch].append(rate)
        medians = {b: statistics.median(rates[b]) for b in s.batches}
        best = max(s.batches, key=lambda b: medians[b])
        plateau = min(b for b in s.batches if medians[b] >= 0.95 * medians[best])
        table.add("catch-up", "fastest fetch_batch_max (median edits/s)", "", best,
                  note=f"the smallest within 5% of it: {plateau}; "
                       f"{target:,} edits from txid 1, {edits_bytes / target:,.0f} bytes each "
                       f"on disk; fetch answers are capped at namenode.edits_fetch_bytes_max "
                       f"({XdfsConfig().namenode.edits_fetch_bytes_max / 2**20:g} MiB)")
    finally:
        await stop(nn)
        shutil.rmtree(work, ignore_errors=True)


async def catchup_once(table: Table, work: Path, nn_addr: str, nn_pid: int, batch: int,
                       target: int, name: str) -> float:
    bp: ServerProcess | None = None
    try:
        bp = await asyncio.to_thread(start_backup, work / name, nn_addr, batch)
        async with superuser_client(address(bp)) as bk:
            # The synced txid moves only once a whole batch is applied *and* synced, so
            # the backup may be deep into a batch (up to ~180 ms of work at 16384) while
            # it still shows the old value: start the clock when it first moves, at a
            # batch boundary, seen within one poll.
            first = (await backup_status(bk)).synced_txid
            while True:
                start = (await backup_status(bk)).synced_txid
                t0 = time.perf_counter()
                if start != first:
                    break
                await asyncio.sleep(CATCHUP_POLL_S)
            cpu0, nn_cpu0 = proc_cpu_s(bp.pid), proc_cpu_s(nn_pid)
            await wait_caught_up(bk, target, poll_s=CATCHUP_POLL_S, deadline_s=600)
            wall = time.perf_counter() - t0
            cpu, nn_cpu = proc_cpu_s(bp.pid) - cpu0, proc_cpu_s(nn_pid) - nn_cpu0
        if start >= target:
            raise RuntimeError(f"fetch_batch_max={batch}: one batch held every edit; "
                               "give --catchup-edits several batches' worth")
        fetched = target - start
        rate = fetched / wall
        table.add("catch-up", f"fetched edits/s, fetch_batch_max={batch}", "edits/s", rate)
        table.add("catch-up", f"CPU per edit, backup, fetch_batch_max={batch}", "us",
                  cpu / fetched * 1e6, ",.1f", quiet=True)
        table.add("catch-up", f"CPU per edit, NameNode, fetch_batch_max={batch}", "us",
                  nn_cpu / fetched * 1e6, ",.1f", quiet=True)
        print(f"    {fetched:,} edits in {wall:.2f} s; CPU per edit: backup "
              f"{cpu / fetched * 1e6:,.1f} us, NameNode {nn_cpu / fetched * 1e6:,.1f} us",
              file=sys.stderr, flush=True)
        return rate
    finally:
        await stop(bp)
        shutil.rmtree(work / name, ignore_errors=True)


# -- (4) checkpoint upload -------------------------------------------------------------------


def grow(ns: Namespace, inodes: int) -> None:
    """Add about ``inodes`` inodes: directories of FANOUT files under /data, applied as
    replay applies ops."""
    dirs = max(1, inodes // (FANOUT + 1))
    files = inodes - dirs - 1
    now_ms = int(time.time() * 1000)
    apply = ns.apply
    apply(MkdirOp("/data", ns.allocate_inode_id(), 0o755, USER, "users", now_ms))
    for d in range(dirs):
        apply(MkdirOp(f"/data/d{d:04d}", ns.allocate_inode_id(), 0o755, USER, "users", now_ms))
    for i in range(files):
        path = f"/data/d{i % dirs:04d}/part-{i:07d}"
        mtime = now_ms + i
        apply(AddFileOp(path, ns.allocate_inode_id(), 0o644, USER, "users", mtime, 3,
                        128 << 20, "client-1"))
        apply(CloseFileOp(path, mtime, mtime, ()))


def big_name_dir(name_dir: Path, inodes: int) -> Namespace:
    """Format ``name_dir`` and replace its image (txid 0) by the same namespace grown to
    ``inodes`` inodes; returns that namespace."""
    format_name_dir(name_dir)
    storage = StorageDirectory(name_dir)
    ns, last = load_namespace([storage], Namespace)
    assert last == 0
    grow(ns, inodes)
    for path in storage.current.glob("fsimage_*"):
        path.unlink()
    save_checkpoint([storage], ns, 0)
    return ns


async def catch_up_namespace(root: AsyncClient, ns: Namespace, applied: int) -> int:
    """Apply the NameNode's edits after ``applied`` to ``ns``, as its backup would."""
    synced = await nn_synced(root)
    while applied < synced:
        answer = await root.rpc.call(FETCH_EDITS, FetchEditsRequest(applied, 100_000))
        for record in decode_batch(answer.first_txid, answer.count, answer.records):
            ns.apply(record.op)
        applied += answer.count
    return applied


async def upload_part(s: Settings, table: Table, base: Path) -> None:
    work = base / "upload"
    work.mkdir()
    nn: ServerProcess | None = None
    try:
        wall = time.perf_counter()
        ns = await asyncio.to_thread(big_name_dir, work / "nn", s.image_inodes)
        inodes = ns.inode_count()
        print(f"upload: namespace of {inodes:,} inodes built and saved in "
              f"{time.perf_counter() - wall:.1f} s", file=sys.stderr, flush=True)
        wall = time.perf_counter()
        nn = await asyncio.to_thread(start_namenode, work / "nn")
        print(f"upload: NameNode started on it in {time.perf_counter() - wall:.1f} s",
              file=sys.stderr, flush=True)
        # The sender's dir: same VERSION (ids), its own images.
        sender = StorageDirectory(work / "sender")
        sender.current.mkdir(parents=True)
        shutil.copy(work / "nn" / "current" / "VERSION", sender.current / "VERSION")
        applied = 0
        async with superuser_client(address(nn)) as root:
            for run_number in range(1, s.image_runs + 1):
                await root.mkdirs(f"/checkpoint-{run_number}")  # a newer txid every run
                applied = await catch_up_namespace(root, ns, applied)
                wall = time.perf_counter()
                await asyncio.to_thread(save_checkpoint, [sender], ns, applied)
                save_s = time.perf_counter() - wall
                path = sender.image_path(applied)
                head = await asyncio.to_thread(image_head, path, applied)
                nn_cpu, own_cpu = proc_cpu_s(nn.pid), time.process_time()
                wall = time.perf_counter()
                answer = await root.rpc.upload(UPLOAD_IMAGE, head, image_chunks(path))
                upload_s = time.perf_counter() - wall
                nn_cpu, own_cpu = proc_cpu_s(nn.pid) - nn_cpu, time.process_time() - own_cpu
                assert answer.installed and answer.image_txid == applied, answer
                mb = head.size_bytes / 1e6
                table.add("upload", f"checkpoint upload, {inodes:,}-inode image", "MB/s",
                          mb / upload_s, ",.0f",
                          note=f"image {mb:,.1f} MB ({head.size_bytes / inodes:.0f} B/inode); "
                               "head, 1 MiB chunks, tail; md5 verified, fsynced, installed")
                table.add("upload", "checkpoint upload time", "s", upload_s, ",.2f")
                table.add("upload", "CPU ms per MB, NameNode + sender", "ms/MB",
                          (nn_cpu + own_cpu) / mb * 1000, ",.1f", quiet=True,
                          note=f"NameNode {nn_cpu / mb * 1000:,.1f} + sender "
                               f"{own_cpu / mb * 1000:,.1f}")
                table.add("upload", "(context) image save at the sender, fsynced", "s",
                          save_s, ",.2f")
                for old in sender.current.glob("fsimage_*"):
                    old.unlink()
    finally:
        await stop(nn)
        shutil.rmtree(work, ignore_errors=True)


# -- report ------------------------------------------------------------------------------




async def bench(s: Settings, table: Table, base: Path) -> None:
    if table.wanted("cost"):
        await cost_part(s, table, base)
    if table.wanted("lag"):
        await lag_part(s, table, base)
    if table.wanted("catch-up"):
        await catchup_part(s, table, base)
    if table.wanted("upload"):
        await upload_part(s, table, base)


def parse_args(argv: Sequence[str] | None) -> Settings:
    parser = argparse.ArgumentParser(description="BackupNode: cost, lag, catch-up, upload.")
    parser.add_argument("--quick", action="store_true", help="smaller counts, fewer runs")
    parser.add_argument("--runs", type=int, help="create runs per arm, alone and followed (4)")
    parser.add_argument("--files", type=int, help="files per create run (20000)")
    parser.add_argument("--lag-runs", type=int, help="create runs with lag sampling (2)")
    parser.add_argument("--writers", type=int, default=64, help="creates in flight (64)")
    parser.add_argument("--sample-ms", type=float, default=50.0,
                        help="lag sampling interval (50)")
    parser.add_argument("--catchup-edits", type=int, help="edits the backup catches up (200000)")
    parser.add_argument("--catchup-rounds", type=int, help="rounds over the batch sizes (2)")
    parser.add_argument("--batches", default="10,100,1000,4096,16384",
                        help="fetch_batch_max values, comma separated")
    parser.add_argument("--image-inodes", type=int, help="inodes of the uploaded image (1M)")
    parser.add_argument("--image-runs", type=int, help="uploads (3)")
    parser.add_argument("--only", action="append", default=[], metavar="PART",
                        help="cost, lag, catch-up or upload (repeatable)")
    parser.add_argument("--dir", default=None, help="where name dirs go (a temp dir)")
    args = parser.parse_args(argv)
    q = args.quick
    s = Settings(
        quick=q,
        runs=args.runs or (2 if q else 4),
        files=args.files or (5_000 if q else 20_000),
        lag_runs=args.lag_runs or (1 if q else 2),
        writers=args.writers,
        sample_s=args.sample_ms / 1000,
        catchup_edits=args.catchup_edits or (50_000 if q else 200_000),
        catchup_rounds=args.catchup_rounds or (1 if q else 2),
        batches=tuple(int(b) for b in args.batches.split(",")),
        image_inodes=args.image_inodes or (100_000 if q else 1_000_000),
        image_runs=args.image_runs or (2 if q else 3),
        only=tuple(args.only),
        workdir=scratch_parent(args.dir),
    )
    if min(s.runs, s.files, s.lag_runs, s.writers, s.catchup_edits, s.catchup_rounds,
           s.image_inodes, s.image_runs, *s.batches) <= 0 or s.sample_s <= 0:
        parser.error("counts must be positive")
    return s


def main(argv: Sequence[str] | None = None) -> int:
    s = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    command = " ".join([".venv/bin/python bench/backup.py",
                        *(sys.argv[1:] if argv is None else argv)])
    print(f"machine: {machine()}\nload average before: {load_average()}", file=sys.stderr)
    table = Table(s.only)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="xdfs-backupbench-", dir=s.workdir) as tmp:
        run(bench(s, table, Path(tmp)), use_uvloop=True)  # as the xdfs processes run
    elapsed = time.perf_counter() - started
    print(f"\ncommand: {command}")
    print(f"machine: {machine()}")
    print(f"load average after (1/5/15 min): {load_average()}; took {elapsed:.0f} s")
    print()
    print(table.markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main())
