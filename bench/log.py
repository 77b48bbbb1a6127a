"""Log service benchmark: appends and reads through ``xdfs logservice`` on three storage
nodes, against ZooKeeper's own sequential-znode appends in the same run.

    .venv/bin/python bench/log.py            # full run
    .venv/bin/python bench/log.py --quick    # smoke run

Every server is a real process on loopback: a 3-server ZooKeeper ensemble (the log
service's metadata, and the reference), three ``xdfs journalnode`` storage nodes and one
``xdfs logservice``; this process is the load generator (AsyncLogClient, one connection).

(a) **appends**: ``--record-bytes`` records, one per append, with 1 and with 32 appends in
    flight (E=3, W=3, A=2: each acknowledged once two storage nodes fsynced it). Appends/s
    and each append's latency at p50 and p99.
(b) **reads**: the whole log read back from its start, ``--read-bytes`` a call; records/s
    and MB/s.
(c) **ZooKeeper reference**: ``create(sequence=True)`` of znodes holding the same record
    bytes (kazoo's async API), with 1 and 32 in flight, on the same ensemble.

Rates are medians of ``--runs`` runs, min .. max beside them. Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

from bench_env import Table, load_average, machine, percentile
from xdfs.common.process import ProcessGroup
from xdfs.common.secrets import new_secret_file
from xdfs.common.zookeeper import ZooKeeperEnsemble
from xdfs.config import XdfsConfig
from xdfs.log.client import AsyncLogClient
from xdfs.log.zkmeta import connect
from xdfs.protocol.log import LSN_ZERO, Record
from xdfs.rpc.loop import run
from xdfs.testing.net import free_port

WAIT_S = 120.0


def start_cluster(base: Path, group: ProcessGroup, zk: ZooKeeperEnsemble) -> tuple[str, str]:
    """Three storage nodes (sending heartbeats to the service, its keeper) and a log
    service; (its address, the secret)."""
    secret = base / "secret"
    new_secret_file(secret)
    ports = [free_port() for _ in range(3)]
    nodes = [f"127.0.0.1:{p}" for p in ports]
    instance = f"127.0.0.1:{free_port()}"
    conf = ["-D", f"journalnode.secret_file={secret}", "-D", f"logservice.secret_file={secret}",
            "-D", f"logservice.zookeeper_secret_file={secret}",
            "-D", f"logservice.zookeeper_quorum={zk.hosts}",
            "-D", f"logservice.storage_nodes={json.dumps(nodes)}",
            "-D", f"logservice.instances={json.dumps([instance])}"]
    for index, address in enumerate(nodes):
        group.start_xdfs(f"sn{index}", *conf, "journalnode", "--journal-dir",
                         str(base / f"sn{index}"), "--rpc-address", address,
                         ready_pattern=r"journalnode serving on (\S+)", deadline_s=WAIT_S)
    service = group.start_xdfs("logservice", *conf, "logservice", "--rpc-address",
                               instance, ready_pattern=r"logservice serving on (\S+)",
                               deadline_s=WAIT_S)
    assert service.match is not None
    return service.match.group(1), secret.read_text().strip()


async def timed(count: int, in_flight: int, one: Callable[[int], Awaitable[object]]
                ) -> tuple[float, list[float]]:
    """``count`` calls of ``one(i)``, ``in_flight`` at a time; (calls/s, latencies in s)."""
    latencies: list[float] = []
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < count:
            index = next_index
            next_index += 1
            start = time.perf_counter()
            await one(index)
            latencies.append(time.perf_counter() - start)

    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return count / (time.perf_counter() - began), latencies


def report(table: Table, part: str, what: str, rate: float, latencies: list[float]) -> None:
    table.add(part, f"{what}: appends/s", "/s", rate)
    table.add(part, f"{what}: p50 latency", "ms", 1000 * percentile(latencies, 50), ".2f")
    table.add(part, f"{what}: p99 latency", "ms", 1000 * percentile(latencies, 99), ".2f")


async def log_parts(table: Table, address: str, secret: str, args: argparse.Namespace,
                    run_no: int) -> None:
    config = XdfsConfig()
    config = replace(config, rpc=replace(config.rpc, call_timeout_s=60.0))
    payload = b"x" * args.record_bytes
    async with AsyncLogClient(address, password=secret, config=config) as client:
        name = f"bench-{run_no}"
        await client.create(name)
        await client.append(name, Record(payload))  # opens the writer
        for in_flight, count in ((1, args.appends // 8), (32, args.appends)):
            rate, lat = await timed(count, in_flight,
                                    lambda i: client.append(name, Record(payload)))
            report(table, "appends", f"{in_flight} in flight", rate, lat)
        began = time.perf_counter()
        position, records, size = LSN_ZERO, 0, 0
        while True:
            got, position = await client.read(name, position, args.read_bytes)
            if not got:
                break
            records += len(got)
            size += sum(len(r.record.payload) for r in got)
        elapsed = time.perf_counter() - began
        table.add("reads", "records/s", "/s", records / elapsed)
        table.add("reads", "MB/s", "MB/s", size / elapsed / 1e6, ".1f")


async def zookeeper_part(table: Table, hosts: str, args: argparse.Namespace,
                         run_no: int) -> None:
    zk = connect(hosts, 30.0, "bench-" + "0" * 32)  # its own parent, no xdfs tree
    parent = f"/bench-seq-{run_no}"
    zk.ensure_path(parent)
    payload = b"x" * args.record_bytes
    loop = asyncio.get_running_loop()

    def create(index: int) -> asyncio.Future[object]:
        future: asyncio.Future[object] = loop.create_future()
        result = zk.create_async(f"{parent}/e-", payload, sequence=True)

        def done(async_result: object) -> None:
            loop.call_soon_threadsafe(future.set_result, None)

        result.rawlink(done)
        return future

    try:
        for in_flight, count in ((1, args.appends // 8), (32, args.appends)):
            rate, lat = await timed(count, in_flight, create)
            report(table, "zookeeper", f"sequential znodes, {in_flight} in flight", rate, lat)
    finally:
        zk.stop()
        zk.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    parser.add_argument("--appends", type=int, default=8000)
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--read-bytes", type=int, default=4 << 20)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if args.quick:
        args.appends, args.runs = 800, 1
    table = Table()
    print(f"machine: {machine(('msgspec', 'uvloop', 'kazoo'))}; load {load_average()}",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="xdfs-bench-log-") as tmp:
        base = Path(tmp)
        with ZooKeeperEnsemble(base / "zk", 3) as zk, ProcessGroup(base) as group:
            zk.start(WAIT_S)
            address, secret = start_cluster(base, group, zk)
            for run_no in range(args.runs):
                run(log_parts(table, address, secret, args, run_no))
                run(zookeeper_part(table, zk.hosts, args, run_no))
    print(table.markdown())
    print(f"load after: {load_average()}; threads {threading.active_count()}")


if __name__ == "__main__":
    main()
