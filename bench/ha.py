"""HA benchmark: failover time and what a tailing standby costs the active.

    .venv/bin/python bench/ha.py            # full run (about ten minutes)
    .venv/bin/python bench/ha.py --quick    # smoke run

Every cluster is ``xdfs dev`` as a user starts it (real processes on loopback, default
settings but one DataNode): ``--ha`` is ZooKeeper, three JournalNodes, nn1 and nn2 with
their failover controllers.

(a) **failover time**: on a fresh ``xdfs dev --ha``, the active NameNode is SIGKILLed
    (or SIGSTOPped: paused, not dead); from that moment, concurrently: the other
    NameNode's state is polled until it says active; a client that lived through the
    failure retries ``mkdirs`` until one is acknowledged; and a new client per try does
    the same (as successive ``xdfs dfs -mkdir`` commands would); both kinds of client run
    twice, with the failover probe (``client.failover_probe_after_s``, the default) and
    without it (0: the clients wait for their own timeouts). The times cover detection
    (the controller's health checks, or for SIGSTOP the health check timeout), the
    election, the new active's journal recovery, the DataNode's reports to it (safe mode)
    and, for the clients, their own timeouts before they leave the old address.
    One cluster per round.
(b) **create rate with a tailing standby**: empty-file creates (create + complete) with
    ``--writers`` in flight from one client, on ``xdfs dev --journal 3`` (one NameNode)
    against ``xdfs dev --ha`` (the same journal, plus a standby tailing it), interleaved.

Rates and times are medians of rounds, min .. max beside them. Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench_env import Table, load_average, machine, percentile
from xdfs.client.client import AsyncClient
from xdfs.config import load_config
from xdfs.errors import XdfsError
from xdfs.protocol.ha import GET_SERVICE_STATE
from xdfs.rpc.messages import Empty

READY = "xdfs dev cluster ready"
TRY_S = 60.0  # bound of one try during a failover (the client's own timeouts act first)


@dataclass(frozen=True)
class Settings:
    rounds: int
    create_runs: int
    create_s: float
    writers: int
    signals: tuple[str, ...] = ()  # failover rounds for these signals only (all: empty)


@dataclass
class DevCluster:
    base: Path
    proc: subprocess.Popen[str]

    @property
    def conf(self) -> Path:
        return self.base / "client.toml"

    def processes(self) -> list[dict[str, object]]:
        return list(json.loads((self.base / "cluster.json").read_text())["processes"])

    def client(self, addresses: Sequence[str] | None = None, probe: bool = True
               ) -> AsyncClient:
        config = load_config(self.conf)
        if not probe:
            config = dataclasses.replace(config, client=dataclasses.replace(
                config.client, failover_probe_after_s=0.0))
        uri = f"xdfs://{','.join(addresses)}" if addresses else None
        return AsyncClient(uri, config=config)


@contextmanager
def dev_cluster(*args: str) -> Iterator[DevCluster]:
    with tempfile.TemporaryDirectory(prefix="xdfs-bench-ha-") as tmp:
        base = Path(tmp)
        proc = subprocess.Popen(
            [sys.executable, "-m", "xdfs", "dev", "--base-dir", str(base), "--datanodes", "1",
             *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={k: v for k, v in os.environ.items() if k != "XDFS_CONF"})
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if READY in line:
                    break
            else:
                raise RuntimeError(f"xdfs dev {' '.join(args)} did not start")
            yield DevCluster(base, proc)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def active_namenode(cluster: DevCluster) -> tuple[str, int]:
    """(address, pid) of the active NameNode."""
    for info in cluster.processes():
        if info["role"] != "namenode":
            continue
        async with cluster.client([str(info["address"])]) as client:
            status = await client.rpc.call(GET_SERVICE_STATE, Empty())
            if status.state == "active":
                return str(info["address"]), int(str(info["pid"]))
    raise RuntimeError("no active NameNode")


async def failover_times(cluster: DevCluster, pid: int, sig: signal.Signals
                         ) -> dict[str, float]:
    """Seconds from ``sig`` to the active until: the other NameNode says it is active;
    the first mkdirs acknowledged to a client that lived through the failure (its call in
    flight waits for rpc.call_timeout_s before it moves on); the first one acknowledged to
    a new client per try (as a new ``xdfs dfs`` command: a paused NameNode costs it
    rpc.connect_timeout_s before it tries the next address)."""
    async with cluster.client() as client, cluster.client(probe=False) as unprobed:
        await client.mkdirs("/warm")
        await unprobed.mkdirs("/warm-unprobed")
        os.kill(pid, sig)
        start = time.monotonic()

        async def until_ok(work: Callable[[int], Awaitable[object]]) -> float:
            attempt = 0
            while True:
                attempt += 1
                try:
                    async with asyncio.timeout(TRY_S):
                        await work(attempt)
                    return time.monotonic() - start
                except (XdfsError, TimeoutError):
                    await asyncio.sleep(0.05)

        async def kept(attempt: int) -> None:
            await client.mkdirs(f"/kept/{attempt}")

        async def kept_unprobed(attempt: int) -> None:
            await unprobed.mkdirs(f"/kept-unprobed/{attempt}")

        async def fresh(attempt: int) -> None:
            async with cluster.client() as new:
                await new.mkdirs(f"/fresh/{attempt}")

        async def fresh_unprobed(attempt: int) -> None:
            async with cluster.client(probe=False) as new:
                await new.mkdirs(f"/fresh-unprobed/{attempt}")

        async def serving(attempt: int) -> None:
            for info in cluster.processes():
                if info["role"] == "namenode" and int(str(info["pid"])) != pid:
                    async with cluster.client([str(info["address"])]) as other:
                        status = await other.rpc.call(GET_SERVICE_STATE, Empty())
                        if status.state == "active":
                            return
            await asyncio.sleep(0.05)
            raise TimeoutError

        names = ("the other NameNode is active", "first ack, a client kept through it",
                 "first ack, a new client per try",
                 "first ack, a client kept through it, no probe",
                 "first ack, a new client per try, no probe")
        times = await asyncio.gather(until_ok(serving), until_ok(kept), until_ok(fresh),
                                     until_ok(kept_unprobed), until_ok(fresh_unprobed))
        return dict(zip(names, times, strict=True))


def failover_part(s: Settings, table: Table) -> None:
    for round_ in range(s.rounds):
        for name, sig in (("SIGKILL", signal.SIGKILL), ("SIGSTOP", signal.SIGSTOP)):
            if s.signals and name not in s.signals:
                continue
            with dev_cluster("--ha") as cluster:
                _address, pid = asyncio.run(active_namenode(cluster))
                times = asyncio.run(failover_times(cluster, pid, sig))
                if sig == signal.SIGSTOP:
                    os.kill(pid, signal.SIGCONT)
            for what, took_s in times.items():
                table.add("failover", f"{name} of the active -> {what}", "s", took_s,
                          fmt=".2f")
        print(f"round {round_ + 1} of {s.rounds} done", file=sys.stderr)


async def create_rate(cluster: DevCluster, seconds: float, writers: int
                      ) -> tuple[float, list[float]]:
    async with cluster.client() as client:
        await client.mkdirs("/bench")
        deadline = time.monotonic() + seconds
        latencies: list[float] = []
        count = 0

        async def writer(w: int) -> None:
            nonlocal count
            i = 0
            while time.monotonic() < deadline:
                path = f"/bench/w{w}-{i}"
                started = time.monotonic()
                await client.create(path)
                await client.complete(path, [])
                latencies.append(time.monotonic() - started)
                count += 1
                i += 1

        started = time.monotonic()
        await asyncio.gather(*(writer(w) for w in range(writers)))
        return count / (time.monotonic() - started), latencies


def create_part(s: Settings, table: Table) -> None:
    for _run in range(s.create_runs):
        rates = {}
        for label, args in (("one NameNode (journal 3)", ("--journal", "3")),
                            ("active + tailing standby (--ha)", ("--ha",))):
            with dev_cluster(*args) as cluster:
                rate, latencies = asyncio.run(create_rate(cluster, s.create_s, s.writers))
            rates[label] = rate
            table.add("create", f"{label}, {s.writers} in flight", "files/s", rate)
            table.add("create", f"{label}: p99 create + complete", "ms",
                      1000 * percentile(latencies, 99), fmt=".1f")
        table.add("create", "ratio --ha / one NameNode", "", rates[
            "active + tailing standby (--ha)"] / rates["one NameNode (journal 3)"], fmt=".2f")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one round of each")
    parser.add_argument("--rounds", type=int, default=5, help="failover rounds per signal")
    parser.add_argument("--writers", type=int, default=64)
    parser.add_argument("--only", action="append", default=[], help="failover or create")
    parser.add_argument("--signal", action="append", default=[], choices=("SIGKILL", "SIGSTOP"),
                        help="failover rounds with this signal only")
    args = parser.parse_args(argv)
    s = Settings(rounds=1 if args.quick else args.rounds,
                 create_runs=1 if args.quick else 3,
                 create_s=5.0 if args.quick else 15.0, writers=args.writers,
                 signals=tuple(args.signal))
    table = Table(args.only)
    print(f"machine: {machine()}; load before: {load_average()}", file=sys.stderr)
    if table.wanted("failover"):
        failover_part(s, table)
    if table.wanted("create"):
        create_part(s, table)
    print(f"load after: {load_average()}", file=sys.stderr)
    print(table.markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main())
