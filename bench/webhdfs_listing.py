"""Another user's mkdir while one user runs parallel WebHDFS LISTSTATUS of a big directory.

    .venv/bin/python bench/webhdfs_listing.py [--entries 100000] [--listers 8] [--rounds 2]
        [--baseline-src /work/main/src] [--variant NAME:KEY=VALUE] [--dir D]

One NameNode process per variant (no DataNodes: listings and mkdirs are metadata), its
directory ``/bench/big`` filled with ``--entries`` subdirectories of user ``bench``. Then
``--listers`` processes' worth of parallel LISTSTATUS of it by ``bench`` (one other
process, ``--rounds`` listings each, the bodies read whole and dropped), while this process
makes directories as user ``other``, one call after the other, through RPC and through
WebHDFS MKDIRS. The table: each mkdir's latency (p50, p99, max) during the listings, the
listings' throughput, and the NameNode's resident memory before and at its peak.
``--baseline-src``: also run the NameNode from those sources (the same machine, the same
run), e.g. a checkout without streamed listings.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import multiprocessing
import os
import queue
import socket
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from bench_env import load_average, scratch_run
from namenode import PASSWORD, READY, SUPER_PASSWORD, SUPERUSER, USER, drive
from xdfs.client.client import AsyncClient
from xdfs.common.process import ServerProcess

OTHER, OTHER_PASSWORD = "other", "otherpw"
BIG = "/bench/big"


@dataclass
class Result:
    variant: str
    listings_per_s: float
    rpc_ms: list[float]
    http_ms: list[float]
    rss_before_mib: float
    rss_peak_mib: float


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def start_namenode(base: Path, http: str, src: str | None,
                   settings: list[str]) -> ServerProcess:
    env = {"XDFS_USER": SUPERUSER, "XDFS_PASSWORD": SUPER_PASSWORD}
    if src is not None:
        env["PYTHONPATH"] = src
    name_dir = base / "nn"
    fmt = ServerProcess.xdfs("namenode", "--name-dir", str(name_dir), "-format",
                             log_path=base / "format.log", ready_pattern=r"formatted ", env=env)
    fmt.start(deadline_s=60)
    assert fmt.proc is not None
    fmt.proc.wait(60)
    overrides = [arg for setting in settings for arg in ("-D", setting)]
    nn = ServerProcess.xdfs(
        *overrides, "-D", f"namenode.http_address={http}", "--log-level", "WARNING", "namenode",
        "--name-dir", str(name_dir), "--rpc-address", "127.0.0.1:0",
        log_path=base / "nn.log", ready_pattern=READY, env=env)
    nn.start(deadline_s=60)
    return nn


async def fill(uri: str, entries: int) -> None:
    async with AsyncClient(uri, user=SUPERUSER, password=SUPER_PASSWORD) as root:
        for user, password in ((USER, PASSWORD), (OTHER, OTHER_PASSWORD)):
            await root.add_user(user, password)
            await root.mkdirs(f"/bench/{user}")
            await root.set_owner(f"/bench/{user}", user)
        await root.mkdirs(BIG)
        await root.set_owner(BIG, USER)
    async with AsyncClient(uri, user=USER, password=PASSWORD) as client:
        await drive(lambda i: client.mkdirs(f"{BIG}/entry-{i:07d}", parents=False),
                    entries, 256)


def run_listers(url: str, listers: int, rounds: int,
                done: multiprocessing.Queue[tuple[float, int]]) -> None:
    """(In a process of its own, so that reading the bodies does not slow the probes.)"""
    async def lister(session: aiohttp.ClientSession) -> int:
        total = 0
        for _ in range(rounds):
            async with session.get(url, params={"op": "LISTSTATUS"}) as answer:
                answer.raise_for_status()
                total += len(await answer.read())
        return total

    async def main() -> tuple[float, int]:
        timeout = aiohttp.ClientTimeout(total=3600)
        async with aiohttp.ClientSession(headers=basic(USER, PASSWORD),
                                         timeout=timeout) as session:
            started = time.perf_counter()
            sizes = await asyncio.gather(*(lister(session) for _ in range(listers)))
            return time.perf_counter() - started, sum(sizes)

    done.put(asyncio.run(main()))


async def probe(uri: str, http: str, pid: int, listers: int, rounds: int
                ) -> tuple[float, list[float], list[float], float, float]:
    url = f"http://{http}/webhdfs/v1{BIG}"
    rss_before = rss_mib(pid)
    rss_peak = rss_before
    rpc_ms: list[float] = []
    http_ms: list[float] = []
    spawn = multiprocessing.get_context("spawn")  # (no copy of this running loop)
    done: multiprocessing.Queue[tuple[float, int]] = spawn.Queue()
    load = spawn.Process(target=run_listers, args=(url, listers, rounds, done))
    async with (AsyncClient(uri, user=OTHER, password=OTHER_PASSWORD) as client,
                aiohttp.ClientSession(headers=basic(OTHER, OTHER_PASSWORD)) as web):
        await client.mkdirs("/bench/other/warm")
        load.start()
        count = 0
        while load.is_alive():
            started = time.perf_counter()
            await client.mkdirs(f"/bench/other/r{count}", parents=False)
            rpc_ms.append((time.perf_counter() - started) * 1e3)
            started = time.perf_counter()
            async with web.put(f"http://{http}/webhdfs/v1/bench/other/h{count}",
                               params={"op": "MKDIRS"}) as answer:
                answer.raise_for_status()
            http_ms.append((time.perf_counter() - started) * 1e3)
            rss_peak = max(rss_peak, rss_mib(pid))
            count += 1
        load.join()
    try:
        wall_s, _bytes = done.get(timeout=30)
    except queue.Empty:
        raise SystemExit("the listing process failed (see its output)") from None
    return listers * rounds / wall_s, rpc_ms, http_ms, rss_before, rss_peak


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def run_variant(base: Path, variant: str, src: str | None, settings: list[str],
                args: argparse.Namespace) -> Result:
    http = f"127.0.0.1:{free_port()}"
    nn = start_namenode(base / variant, http, src, settings)
    try:
        assert nn.match is not None
        uri = f"xdfs://{nn.match.group(1)}"
        asyncio.run(fill(uri, args.entries))
        rate, rpc_ms, http_ms, before, peak = asyncio.run(
            probe(uri, http, nn.pid, args.listers, args.rounds))
    finally:
        nn.terminate()
    return Result(variant, rate, rpc_ms, http_ms, before, peak)


def row(result: Result) -> str:
    def cells(values: list[float]) -> str:
        return (f"{statistics.median(values):8.1f} {percentile(values, 0.99):8.1f} "
                f"{max(values):8.1f}")

    return (f"| {result.variant:<9} | {result.listings_per_s:9.2f} | {cells(result.rpc_ms)} | "
            f"{cells(result.http_ms)} | {result.rss_before_mib:7.0f} | "
            f"{result.rss_peak_mib - result.rss_before_mib:+8.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--listers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--baseline-src", default=None,
                        help="also run a NameNode from these sources (PYTHONPATH)")
    parser.add_argument("--variant", action="append", default=[],
                        metavar="NAME:KEY=VALUE[,KEY=VALUE]",
                        help="also run this branch's NameNode with these settings (-D), "
                             "e.g. batch250:http.list_batch_entries=250")
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    here = os.environ.get("PYTHONPATH")
    variants: list[tuple[str, str | None, list[str]]] = []
    if args.baseline_src:
        variants.append(("baseline", args.baseline_src, []))
    variants.append(("this", here, []))
    for spec in args.variant:
        name, _, settings = spec.partition(":")
        variants.append((name, here, settings.split(",") if settings else []))
    with scratch_run("xdfs-bench-listing-", args.dir) as base:
        results = [run_variant(base, name, src, settings, args)
                   for name, src, settings in variants]
        print(f"\n{args.listers} parallel LISTSTATUS x {args.rounds} of {args.entries} "
              f"entries (user bench); user other's mkdir, one after the other (ms)\n")
        print("| NameNode  | lists/s   | RPC mkdir p50      p99      max | "
              "HTTP mkdir p50     p99      max | RSS MiB | growth   |")
        print("|-----------|-----------|--------------------------------|"
              "--------------------------------|---------|----------|")
        for result in results:
            print(row(result))
        print(f"\nload average: {load_average()}; mkdirs sampled: "
              + ", ".join(f"{r.variant} {len(r.rpc_ms)}" for r in results), file=sys.stdout)


if __name__ == "__main__":
    main()
