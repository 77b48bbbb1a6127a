"""``xdfs balancer`` as a real process against a real NameNode and real DataNodes: an
empty node added to a skewed cluster is filled until every node is within the threshold
of the mean; a balancer SIGKILLed in the middle of a move loses nothing, a second one is
refused while the first holds /system/balancer.id, and a rerun converges. Every block
keeps its replication throughout and every file reads back intact."""

from __future__ import annotations

import asyncio
import os
import sys

from tests.integration.conftest import run_xdfs
from xdfs.common.process import ProcessGroup
from xdfs.testing.poll import eventually

from .conftest import ROOT, ROOT_PW, Lifecycle, MiB

CAPACITY = 16 * MiB
THRESHOLD = 10.0


def balancer_args(lifecycle: Lifecycle, *extra: str) -> list[str]:
    assert lifecycle.nn is not None
    return ["-D", "balancer.iteration_wait_s=0.5", "-D", "balancer.idle_iterations_max=20",
            "-D", "balancer.lock_renew_interval_s=0.2",
            "balancer", "-fs", f"xdfs://{lifecycle.nn.address}", "-threshold",
            str(THRESHOLD), *extra]


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDFS_")}
    return {**env, "XDFS_USER": ROOT, "XDFS_PASSWORD": ROOT_PW}


async def run_balancer(lifecycle: Lifecycle, *extra: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "xdfs", *balancer_args(lifecycle, *extra),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        stdin=asyncio.subprocess.DEVNULL, env=child_env(),
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 240)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def skewed_cluster(lifecycle: Lifecycle) -> dict[str, bytes]:
    """Two full-ish nodes (about 40 % used), then two empty ones."""
    await lifecycle.start_namenode()
    for _ in range(2):
        await lifecycle.start_datanode(capacity_bytes=CAPACITY)
    files = await lifecycle.write_files(6, 1 * MiB, replication=2)
    for _ in range(2):
        await lifecycle.start_datanode(capacity_bytes=CAPACITY)
    await wait_usage_settled(lifecycle, files)
    return files


async def wait_usage_settled(lifecycle: Lifecycle, files: dict[str, bytes]) -> None:
    """Heartbeats carried every node's usage, and no copy or deletion is pending."""
    expected = 2 * sum(len(d) for d in files.values())

    async def settled() -> bool:
        report = await lifecycle.report()
        used = sum(n.used_bytes for n in report.nodes if n.state == "live")
        return (report.pending_replication, report.pending_deletion) == (0, 0) and (
            expected <= used < expected * 1.1)

    await eventually(settled, timeout_s=60, what="usage reported")


async def utilizations(lifecycle: Lifecycle) -> list[float]:
    report = await lifecycle.report()
    return [100.0 * n.used_bytes / n.capacity_bytes for n in report.nodes if n.state == "live"]


def spread(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return max(abs(v - mean) for v in values)


async def check_intact(lifecycle: Lifecycle, files: dict[str, bytes]) -> None:
    for path, data in files.items():
        assert await lifecycle.client.read_file(path) == data
        assert all(len(h) == 2 for h in await lifecycle.holders(path))
    fsck = await lifecycle.client.fsck("/data")
    assert fsck.healthy and fsck.under_replicated_blocks == 0


async def test_an_empty_node_is_filled_until_every_node_is_within_the_threshold(
    lifecycle: Lifecycle,
) -> None:
    files = await skewed_cluster(lifecycle)
    assert spread(await utilizations(lifecycle)) > THRESHOLD
    code, out = await run_balancer(lifecycle)
    assert code == 0, out
    assert "The cluster is balanced" in out
    assert "Moved 0 block" not in out
    await wait_usage_settled(lifecycle, files)
    # the same mean-based rule the balancer stopped on (within threshold of the mean)
    assert spread(await utilizations(lifecycle)) <= THRESHOLD
    await check_intact(lifecycle, files)
    assert not await lifecycle.client.exists("/system/balancer.id")


async def test_kill_9_mid_move_then_rerun_converges(
    lifecycle: Lifecycle, processes: ProcessGroup
) -> None:
    files = await skewed_cluster(lifecycle)
    first = await asyncio.to_thread(
        processes.start_xdfs, "balancer", *balancer_args(lifecycle, "-bandwidth", "262144"),
        ready_pattern=r"move of block \d+ from", env=child_env(),
    )
    # a second balancer is refused while the first holds /system/balancer.id
    code, out = await run_balancer(lifecycle)
    assert code == 1 and "BalancerRunning" in out, out
    await asyncio.to_thread(first.kill)  # SIGKILL by pid, a move under way
    assert first.proc is not None and first.proc.returncode == -9
    await check_intact(lifecycle, files)  # nothing lost, replication kept

    async def rerun() -> tuple[int, str] | None:
        code, out = await run_balancer(lifecycle)
        return None if "BalancerRunning" in out else (code, out)  # the lease must lapse

    code, out = await eventually(rerun, timeout_s=120, what="a rerun taking the lock")
    assert code == 0, out
    await wait_usage_settled(lifecycle, files)
    assert spread(await utilizations(lifecycle)) <= THRESHOLD
    await check_intact(lifecycle, files)


async def test_bad_balancer_arguments_are_one_line_usage_errors() -> None:
    for args in (["-threshold", "0"], ["-threshold", "x"], ["-bandwidth", "0"], ["-fast"]):
        code, out, err = await run_xdfs("balancer", *args, env=child_env())
        assert code == 2 and out == "", (args, out, err)
        assert len(err.strip().splitlines()) == 1 and "Usage: xdfs balancer" in err, err
