"""What one fsspec metadata operation costs: ``mkdir``, ``info`` and ``mv`` through
``fsspec.filesystem("xdfs")`` against ``xdfs dev``, from 1 and 8 threads, with the
synchronous client's calls made inline (``client.inline_calls = true``, the default: each
calling thread over its own connection) and through its event loop's thread (``false``,
the way every call went before), in the same run, alternating.

    .venv/bin/python bench/fsspec_meta_costs.py              # 2000 ops per figure, 3 runs
    .venv/bin/python bench/fsspec_meta_costs.py --ops 500 --runs 1

Per op: wall time; CPU of this process (``time.process_time``, all its threads) and of the
NameNode process (``/proc/PID/stat``); NameNode RPCs (``RpcClient.call`` counted); context
switches of this process (``getrusage``: voluntary + involuntary, all threads). CPU and the
counts move much less with a shared machine's load than the rates; each figure is the
median of ``--runs``. Nothing here is asserted by the test suite.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import fsspec
from fsspec import AbstractFileSystem

from bench_env import dev_cluster, load_average, machine, proc_cpu_s
from vs_moosefs import PASSWORD, USER
from xdfs.rpc.client import RpcClient

MODES = {"inline": "true", "loop": "false"}


class CallCounter:
    """Counts RpcClient.call (every NameNode RPC of the client) while installed."""

    def __init__(self) -> None:
        self.calls = 0

    @contextmanager
    def installed(self) -> Iterator[None]:
        original = RpcClient.call
        counter = self

        def counted(client: RpcClient, *args: Any, **kwargs: Any) -> Coroutine[Any, Any, Any]:
            counter.calls += 1
            return original(client, *args, **kwargs)

        RpcClient.call = counted  # type: ignore[method-assign, assignment]
        try:
            yield
        finally:
            RpcClient.call = original  # type: ignore[method-assign]


def switches() -> int:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_nvcsw + usage.ru_nivcsw


def filesystem(uri: str, inline: str, base: Path) -> AbstractFileSystem:
    """An fsspec file system whose client reads ``client.inline_calls`` from a config file
    (XDFS_CONF, as a user would set it)."""
    conf = base / f"client-{inline}.toml"
    conf.write_text(f"[client]\ninline_calls = {inline}\n")
    before = os.environ.get("XDFS_CONF")
    os.environ["XDFS_CONF"] = str(conf)
    try:
        return fsspec.filesystem("xdfs", skip_instance_cache=True, fs=uri, user=USER,
                                 password=PASSWORD)
    finally:
        if before is None:
            del os.environ["XDFS_CONF"]
        else:
            os.environ["XDFS_CONF"] = before


def measure(fs: AbstractFileSystem, nn_pid: int, counter: CallCounter, threads: int,
            ops: int, top: str) -> dict[str, dict[str, float]]:
    """mkdir, info and mv of ``ops`` directories under ``top`` from ``threads`` threads."""
    fs.mkdir(top)
    per_thread = max(1, ops // threads)
    total = per_thread * threads

    def names(t: int, stem: str) -> list[str]:
        return [f"{top}/t{t}-{stem}{i}" for i in range(per_thread)]

    work: dict[str, Callable[[int], object]] = {
        "mkdir": lambda t: [fs.mkdir(p) for p in names(t, "d")],
        "info": lambda t: [fs.info(p) for p in names(t, "d")],
        "mv": lambda t: [fs.mv(a, b) for a, b in zip(names(t, "d"), names(t, "r"), strict=True)],
    }
    out: dict[str, dict[str, float]] = {}
    together = threading.Barrier(threads)

    def connect(_t: int) -> None:
        together.wait()  # every thread calls at once: as many connections as threads
        fs.info(top)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(connect, range(threads)))  # the handshakes are not measured
        for op, run in work.items():
            calls, switched, nn_cpu = counter.calls, switches(), proc_cpu_s(nn_pid)
            wall, cpu = time.perf_counter(), time.process_time()
            list(pool.map(run, range(threads)))
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            out[op] = {
                "rate": total / wall,
                "client_cpu_us": cpu / total * 1e6,
                "nn_cpu_us": (proc_cpu_s(nn_pid) - nn_cpu) / total * 1e6,
                "rpcs": (counter.calls - calls) / total,
                "switches": (switches() - switched) / total,
            }
    fs.rm(top, recursive=True)
    return out


FIELDS = (("rate", "ops/s", ",.0f"), ("client_cpu_us", "client CPU us", ",.0f"),
          ("nn_cpu_us", "NameNode CPU us", ",.0f"), ("rpcs", "RPCs", ".2f"),
          ("switches", "context switches", ".1f"))


def table(results: dict[tuple[str, int, str], list[dict[str, float]]]) -> str:
    lines = ["| op, threads | " + " | ".join(
        f"{label} (loop / inline)" for _, label, _ in FIELDS) + " |",
        "|---|" + "---:|" * len(FIELDS)]
    keys = sorted({(op, threads) for op, threads, _ in results},
                  key=lambda k: (k[1], ["mkdir", "info", "mv"].index(k[0])))
    for op, threads in keys:
        cells = []
        for field, _, fmt in FIELDS:
            loop, inline = (statistics.median(r[field] for r in results[(op, threads, mode)])
                            for mode in ("loop", "inline"))
            cells.append(f"{loop:{fmt}} / {inline:{fmt}}")
        lines.append(f"| {op}, {threads} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Per-op costs of fsspec metadata calls.")
    parser.add_argument("--ops", type=int, default=2000, help="ops per figure (2000)")
    parser.add_argument("--runs", type=int, default=3, help="runs; medians shown (3)")
    args = parser.parse_args(argv)
    load_before = load_average()
    counter = CallCounter()
    results: dict[tuple[str, int, str], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="xdfs-fsspec-meta-") as tmp, \
            dev_cluster(Path(tmp), 1, USER, PASSWORD) as cluster, counter.installed():
        uri, nn_pid = cluster.uri, cluster.pids("namenode")[0]
        systems = {mode: filesystem(uri, flag, Path(tmp)) for mode, flag in MODES.items()}
        for run in range(args.runs):
            order = list(MODES) if run % 2 == 0 else list(MODES)[::-1]
            for threads in (1, 8):
                for mode in order:
                    top = f"/costs-{run}-{threads}-{mode}"
                    measured = measure(systems[mode], nn_pid, counter, threads, args.ops, top)
                    for op, figures in measured.items():
                        results.setdefault((op, threads, mode), []).append(figures)
                        print(f"  {mode:<6} {threads} thr {op:<5} " + "  ".join(
                            f"{label} {figures[field]:{fmt}}" for field, label, fmt in FIELDS),
                            file=sys.stderr, flush=True)
    print(f"\n{machine()}; load before {load_before}, after {load_average()}")
    print(f"command: .venv/bin/python bench/fsspec_meta_costs.py --ops {args.ops} "
          f"--runs {args.runs}\n")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
