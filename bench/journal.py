"""Quorum journal benchmark: what writing through three JournalNodes costs the NameNode,
how fast JournalNodes take appends, and how fast one that was away catches up.

    .venv/bin/python bench/journal.py            # full run (a few minutes)
    .venv/bin/python bench/journal.py --quick    # smoke run

Every server is a real process on loopback (``xdfs journalnode``, ``xdfs namenode``); this
process is the load generator.

(a) **NameNode with local edits against the quorum journal**, interleaved L Q L Q ...:
    empty-file creates (create + complete, 2 RPCs, 2 edits) from one connection with
    ``--writers`` (64) in flight, on a freshly formatted NameNode (L: local name dir only;
    Q: the same plus 3 JournalNodes, ``-initializeSharedEdits`` first). Files/s, the ratio
    Q/L of each pair, and each file's latency (create + complete) at p50 and p99.
(b) **JournalNode appends**: a quorum writer in this process (the NameNode's own
    ``QuorumJournalWriter``) sends batches of ``--record-bytes`` records, one batch at a
    time as the edits log's syncer does, to 3 JournalNodes; records/s and MB/s by batch
    size, and the batch latency (majority acknowledged) at p50 and p99.
(c) **catch-up**: a JournalNode is stopped, ``--catchup-mb`` of edits are written in
    segments of ``--segment-mb``, then it restarts with an empty disk (a replaced one) and
    its syncer fetches every finalized segment it misses from a peer; MB/s and txns/s from
    its restart to the moment its finalized segments cover the others'.

Rates are medians of runs, min .. max beside them. Nothing here is asserted by tests.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from backup import FANOUT, file_path, format_name_dir, prepare, superuser_client
from bench_env import Table, load_average, machine, percentile
from xdfs.common.process import ServerProcess
from xdfs.common.secrets import new_secret_file
from xdfs.config import XdfsConfig
from xdfs.editlog.framing import frame_record
from xdfs.editlog.segments import segment_index
from xdfs.protocol.journal import JOURNAL_USER, JournalNamespace
from xdfs.quorum.channel import RpcJournalChannel
from xdfs.quorum.writer import QuorumJournalWriter, WriterSettings
from xdfs.rpc.loop import run
from xdfs.rpc.messages import PROTOCOL_VERSION, Hello
from xdfs.testing.net import free_port

ENV = {"XDFS_USER": "root", "XDFS_PASSWORD": "rootpw"}
JOURNAL_ID = "bench"
AIM_RATIO = 0.7  # issue 11: the quorum journal keeps at least 0.7 of the local create rate


@dataclass(frozen=True)
class Settings:
    quick: bool
    runs: int
    files: int
    writers: int
    batches: tuple[int, ...]
    record_bytes: int
    append_mb: float
    catchup_mb: float
    segment_mb: float
    only: tuple[str, ...]


class Journals:
    """Three JournalNode processes with a journal secret, on ports kept across restarts."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.secret = base / "journal.secret"
        new_secret_file(self.secret)
        self.ports = [free_port() for _ in range(3)]
        self.procs: list[ServerProcess | None] = [None, None, None]

    @property
    def uri(self) -> str:
        return f"qjournal://{';'.join(f'127.0.0.1:{p}' for p in self.ports)}/{JOURNAL_ID}"

    def conf(self, *extra: str) -> list[str]:
        return ["-D", f"journalnode.secret_file={self.secret}",
                "-D", f"namenode.shared_edits={self.uri}", *extra]

    def start(self, index: int, *extra: str) -> ServerProcess:
        proc = ServerProcess.xdfs(
            *self.conf(*extra), "--log-level", "WARNING", "journalnode",
            "--journal-dir", str(self.base / f"jn{index}"),
            "--rpc-address", f"127.0.0.1:{self.ports[index]}",
            log_path=self.base / f"jn{index}.log", ready_pattern=r"journalnode serving on",
        )
        proc.start(deadline_s=60)
        self.procs[index] = proc
        return proc

    def stop(self, index: int) -> None:
        proc = self.procs[index]
        if proc is not None:
            proc.terminate()
            self.procs[index] = None

    def stop_all(self) -> None:
        for index in range(3):
            self.stop(index)

    def writer(self) -> QuorumJournalWriter:
        config = XdfsConfig()
        hello = Hello(PROTOCOL_VERSION, user=JOURNAL_USER,
                      password=self.secret.read_text().strip())
        channels = [RpcJournalChannel(f"127.0.0.1:{p}", config.rpc, hello, call_timeout_s=30)
                    for p in self.ports]
        return QuorumJournalWriter(channels, WriterSettings(
            JOURNAL_ID, JournalNamespace("CID-bench", 1)))


# -- (a) the NameNode's create rate, local against quorum -----------------------------------


def start_namenode(name_dir: Path, conf: Sequence[str]) -> ServerProcess:
    nn = ServerProcess.xdfs(
        *conf, "--log-level", "WARNING", "namenode", "--name-dir", str(name_dir),
        "--rpc-address", "127.0.0.1:0",
        log_path=name_dir.parent / f"{name_dir.name}.log",
        ready_pattern=r"namenode serving on (\S+)", env=ENV,
    )
    nn.start(deadline_s=120)
    return nn


def initialize_shared_edits(name_dir: Path, conf: Sequence[str]) -> None:
    """``namenode -initializeSharedEdits``: the formatted ``name_dir``'s namespace onto the
    JournalNodes of ``conf`` (its log beside ``name_dir``, in ``init.log``)."""
    init = ServerProcess.xdfs(
        *conf, "namenode", "--name-dir", str(name_dir), "-initializeSharedEdits",
        log_path=name_dir.parent / "init.log", ready_pattern="initialized shared edits",
        env=ENV)
    init.start(deadline_s=60)


async def create_run(s: Settings, table: Table, base: Path, quorum: bool) -> float:
    label = "quorum" if quorum else "local"
    work = Path(tempfile.mkdtemp(prefix=f"{label}-", dir=base))
    journals = Journals(work) if quorum else None
    try:
        conf: list[str] = []
        name_dir = work / "nn"
        format_name_dir(name_dir)
        if journals is not None:
            for index in range(3):
                journals.start(index)
            conf = journals.conf()
            initialize_shared_edits(name_dir, conf)
        nn = start_namenode(name_dir, conf)
        assert nn.match is not None
        address = nn.match.group(1)
        rate, latencies = await timed_creates(s, address)
        nn.terminate()
        name = f"files/s, {label} ({s.writers} in flight)"
        table.add("(a) create", name, "files/s", rate)
        table.add("(a) create", f"latency p50, {label}", "ms", percentile(latencies, 50),
                  fmt=".2f")
        table.add("(a) create", f"latency p99, {label}", "ms", percentile(latencies, 99),
                  fmt=".2f")
        return rate
    finally:
        if journals is not None:
            journals.stop_all()
        shutil.rmtree(work, ignore_errors=True)


async def timed_creates(s: Settings, address: str) -> tuple[float, list[float]]:
    root = superuser_client(address)
    async with root:
        client = await prepare(root, f"xdfs://{address}", "/bench", s.files)
        async with client:
            latencies: list[float] = []
            items = iter(range(s.files))

            async def worker() -> None:
                for i in items:
                    path = file_path("/bench", i)
                    started = time.perf_counter()
                    await client.create(path, create_parents=False)
                    await client.complete(path, [])
                    latencies.append((time.perf_counter() - started) * 1000)

            wall = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(s.writers)))
            return s.files / (time.perf_counter() - wall), latencies


async def create_part(s: Settings, table: Table, base: Path) -> None:
    for run_index in range(s.runs):
        order = [False, True] if run_index % 2 == 0 else [True, False]
        rates = {quorum: await create_run(s, table, base, quorum) for quorum in order}
        table.add("(a) create", "ratio quorum / local (each pair)", "", rates[True] / rates[False],
                  fmt=".2f", note=f"aim >= {AIM_RATIO}")


# -- (b) appends to three JournalNodes ------------------------------------------------------


def records(first: int, count: int, size: int) -> bytes:
    payload = b"x" * max(1, size - 17)
    return b"".join(frame_record(1, t, payload) for t in range(first, first + count))


async def append_part(s: Settings, table: Table, base: Path) -> None:
    for batch in s.batches:
        work = Path(tempfile.mkdtemp(prefix="append-", dir=base))
        journals = Journals(work)
        try:
            for index in range(3):
                journals.start(index)
            writer = journals.writer()
            await writer.format()
            await writer.become_writer()
            await writer.start_segment(1, 1)
            total = max(batch, int(s.append_mb * 1e6 / s.record_bytes) // batch * batch)
            latencies: list[float] = []
            started = time.perf_counter()
            for first in range(1, total + 1, batch):
                data = records(first, batch, s.record_bytes)
                t0 = time.perf_counter()
                await writer.write(data, first, first + batch - 1)
                latencies.append((time.perf_counter() - t0) * 1000)
            wall = time.perf_counter() - started
            await writer.close()
            part = "(b) append"
            table.add(part, f"records/s, batches of {batch}", "records/s", total / wall)
            table.add(part, f"MB/s, batches of {batch}", "MB/s",
                      total * s.record_bytes / wall / 1e6, fmt=".1f")
            table.add(part, f"batch latency p50 / p99, batches of {batch}", "ms",
                      percentile(latencies, 50), fmt=".2f",
                      note=f"p99 {percentile(latencies, 99):.2f} ms")
        finally:
            journals.stop_all()
            shutil.rmtree(work, ignore_errors=True)


# -- (c) catch-up of a JournalNode that was away --------------------------------------------


def finalized_txids(journal_dir: Path) -> set[tuple[int, int | None]]:
    current = journal_dir / JOURNAL_ID / "current"
    if not current.is_dir():
        return set()
    return {(i.start, i.end) for i in segment_index(current) if not i.in_progress}


async def catchup_part(s: Settings, table: Table, base: Path) -> None:
    for _ in range(s.runs):
        work = Path(tempfile.mkdtemp(prefix="catchup-", dir=base))
        journals = Journals(work)
        sync = ("-D", "journalnode.sync_interval_s=0.2")
        try:
            for index in range(3):
                journals.start(index, *sync)
            writer = journals.writer()
            await writer.format()
            await writer.become_writer()
            journals.stop(2)
            per_segment = max(1, int(s.segment_mb * 1e6 / s.record_bytes))
            total = max(per_segment, int(s.catchup_mb * 1e6 / s.record_bytes))
            txid = 1
            while txid <= total:
                await writer.start_segment(txid, 1)
                for first in range(txid, txid + per_segment, 1024):
                    count = min(1024, txid + per_segment - first)
                    await writer.write(records(first, count, s.record_bytes), first,
                                       first + count - 1)
                await writer.finalize_segment(txid, txid + per_segment - 1)
                txid += per_segment
            shutil.rmtree(work / "jn2", ignore_errors=True)  # a replaced disk
            journals.start(2, *sync)
            await writer.start_segment(txid, 1)  # formats it; it joins here
            started = time.perf_counter()
            wanted = finalized_txids(work / "jn0")
            while not wanted <= finalized_txids(work / "jn2"):
                if time.perf_counter() - started > 600:
                    raise TimeoutError("the replaced JournalNode did not catch up in 600 s")
                await asyncio.sleep(0.05)
            wall = time.perf_counter() - started
            await writer.close()
            part = "(c) catch-up"
            size_mb = (txid - 1) * s.record_bytes / 1e6
            table.add(part, "MB/s fetched by a replaced JournalNode", "MB/s", size_mb / wall,
                      fmt=".1f", note=f"{size_mb:.0f} MB in {len(wanted)} segments, "
                      "including up to one sync interval (0.2 s) of waiting")
            table.add(part, "txns/s fetched", "txns/s", (txid - 1) / wall)
        finally:
            journals.stop_all()
            shutil.rmtree(work, ignore_errors=True)


async def bench(s: Settings, table: Table, base: Path) -> None:
    if table.wanted("create"):
        await create_part(s, table, base)
    if table.wanted("append"):
        await append_part(s, table, base)
    if table.wanted("catch-up"):
        await catchup_part(s, table, base)


def parse_args(argv: Sequence[str] | None) -> Settings:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--files", type=int, default=None)
    parser.add_argument("--writers", type=int, default=64)
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--only", nargs="*", default=[],
                        help="parts to run: create, append, catch-up")
    args = parser.parse_args(argv)
    quick = args.quick
    return Settings(
        quick=quick,
        runs=args.runs or (2 if quick else 4),
        files=args.files or (2 * FANOUT if quick else 10 * FANOUT),
        writers=args.writers,
        batches=(1, 64, 1024) if quick else (1, 16, 64, 256, 1024, 4096),
        record_bytes=args.record_bytes,
        append_mb=2.0 if quick else 20.0,
        catchup_mb=10.0 if quick else 100.0,
        segment_mb=2.0 if quick else 10.0,
        only=tuple(args.only),
    )


def main(argv: Sequence[str] | None = None) -> int:
    s = parse_args(argv)
    table = Table(s.only)
    print(f"machine: {machine()}; load before: {load_average()}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="xdfs-bench-journal-") as tmp:
        run(bench(s, table, Path(tmp)))
    print(f"\nload after: {load_average()}\n")
    print(table.markdown())
    return 0


if __name__ == "__main__":
    os.environ.setdefault("XDFS_USER", ENV["XDFS_USER"])
    sys.exit(main())
