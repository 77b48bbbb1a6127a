"""A failing JournalNode: the NameNode's mkdirs rate while one of its three JournalNodes
cannot write (its disk full), against all three healthy.

    .venv/bin/python bench/journal_failing.py              # 3 rounds of 5 s per phase
    .venv/bin/python bench/journal_failing.py --hook       # ENOSPC from a fault hook

Every server is a real process on loopback (``xdfs journalnode``, ``xdfs namenode``); this
process is the load generator: ``--writers`` (16) mkdirs in flight on one connection.
Phases, each ``--seconds`` long, one after the other on the same cluster:

1. healthy: three JournalNodes that write;
2. full: jn0's journal dir is a small tmpfs (needs root), filled to the last byte at the
   start of the phase, so its next write fails with ENOSPC (``--hook``: instead, jn0 runs
   with ``XDFS_FAULTS=editlog.before_write=enospc`` from the start, and phase 1 is left
   out); the rate over the whole phase and over its first second (where a writer that
   waits on the failing node loses its time);
3. freed (tmpfs only): the filler deleted, the edits log rolled; whether jn0 is back in
   the writer's quorum (its journal holds the new segment).

Rates are ops/s; nothing here is asserted by tests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from backup import format_name_dir, superuser_client
from bench_env import load_average, machine
from journal import Journals, initialize_shared_edits, start_namenode
from xdfs.client.client import AsyncClient
from xdfs.common.process import ServerProcess
from xdfs.editlog.segments import segment_index
from xdfs.testing.disk import fill, tmpfs

SERIES: list[int] = []  # ops acknowledged in each second of the last phase


async def mkdirs_rate(client: AsyncClient, top: str, seconds: float, writers: int
                      ) -> tuple[float, float]:
    """(ops/s over ``seconds``, ops/s in the first second); SERIES: ops in each second."""
    done = 0
    start = time.perf_counter()
    SERIES[:] = [0] * (int(seconds) + 2)

    async def worker(w: int) -> None:
        nonlocal done
        i = 0
        while time.perf_counter() - start < seconds:
            await client.mkdirs(f"{top}/w{w}-{i}")
            i += 1
            done += 1
            SERIES[int(time.perf_counter() - start)] += 1

    await asyncio.gather(*(worker(w) for w in range(writers)))
    return done / (time.perf_counter() - start), float(SERIES[0])


async def one_round(base: Path, seconds: float, writers: int, hook: str) -> dict[str, str]:
    work = Path(tempfile.mkdtemp(prefix="jnfail-", dir=base))
    journals = Journals(work)
    out: dict[str, str] = {}
    nn: ServerProcess | None = None
    with contextlib.ExitStack() as stack:
        try:
            if not hook:
                stack.enter_context(tmpfs(work / "jn0", "8m"))
            for index in range(3):
                extra = {"XDFS_FAULTS": f"editlog.before_write={hook}"} \
                    if hook and index == 0 else {}
                os.environ.update(extra)
                try:
                    journals.start(index)
                finally:
                    for key in extra:
                        os.environ.pop(key)
            name_dir = work / "nn"
            format_name_dir(name_dir)
            conf = journals.conf()
            initialize_shared_edits(name_dir, conf)
            nn = start_namenode(name_dir, conf)
            assert nn.match is not None
            address = nn.match.group(1)
            async with superuser_client(address) as client:
                await client.mkdirs("/a")
                await client.mkdirs("/b")
                await client.mkdirs("/c")
                if not hook:
                    rate, _ = await mkdirs_rate(client, "/a", seconds, writers)
                    out["healthy"] = f"{rate:,.0f}"
                    filler = fill(work / "jn0")
                rate, first = await mkdirs_rate(client, "/b", seconds, writers)
                out["one JN failing"] = f"{rate:,.0f}"
                out["one JN failing, first second"] = f"{first:,.0f}"
                if not hook:
                    filler.unlink()
                    await client.roll_edits()
                    await client.mkdirs("/c/after")
                    await asyncio.sleep(1.0)
                    journal_dirs = [p for p in (work / "jn0").iterdir() if (p / "current").is_dir()]
                    segments = [s for d in journal_dirs for s in segment_index(d / "current")]
                    status = await client.status()
                    newest = max((s.start for s in segments), default=0)
                    out["jn0 rejoined at the roll"] = str(
                        newest >= status.segment_start_txid)
        finally:
            if nn is not None:
                nn.terminate()
            journals.stop_all()
    shutil.rmtree(work, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--writers", type=int, default=16)
    parser.add_argument("--hook", choices=("enospc", "slow", "stop"), default="",
                        help="jn0's writes fail with ENOSPC, or take 50 ms more, from a "
                             "fault hook (instead of a full tmpfs: no root needed)")
    parser.add_argument("--series", action="store_true",
                        help="print the ops acknowledged in each second of the failing phase")
    args = parser.parse_args()
    if not args.hook and os.geteuid() != 0:
        sys.exit("a tmpfs needs root: run as root, or with --hook")
    print(machine(), f"load average {load_average()}")
    base = Path(tempfile.mkdtemp(prefix="bench-jnfail-"))
    try:
        for index in range(args.rounds):
            result = asyncio.run(one_round(base, args.seconds, args.writers, args.hook))
            print(f"round {index + 1}: " + "; ".join(f"{k}: {v}" for k, v in result.items()))
            if args.series:
                print("  ops in each second of the failing phase:", SERIES[:int(args.seconds)])
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"load average {load_average()}")


if __name__ == "__main__":
    main()
