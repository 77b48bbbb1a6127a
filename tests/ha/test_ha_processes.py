"""HA with real processes: two NameNodes on a quorum journal of three JournalNodes.

A NameNode of ``ha.namenodes`` starts standby and tails the journal; ``xdfs admin``
makes one active. What must hold: the standby's namespace follows the active's; after
the active is SIGKILLed, or paused (SIGSTOP) and later resumed, the other becomes active
with every acknowledged edit, and the old one never acknowledges anything more (its next
journal write is fenced by the new epoch); graceful transitions both ways lose nothing.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from xdfs.editlog.segments import SegmentReader, segment_index
from xdfs.errors import XdfsError
from xdfs.namenode.editlog.codec import encode_record
from xdfs.namenode.namespace.ops import MkdirOp

from .cluster import HaCluster, formatted_pair

pytestmark = pytest.mark.slow


@pytest.fixture
def ha(tmp_path: Path) -> Iterator[HaCluster]:
    with formatted_pair(tmp_path) as cluster:
        yield cluster


def _ok(result: object) -> str:
    assert getattr(result, "returncode", 1) == 0, (getattr(result, "stdout", ""),
                                                   getattr(result, "stderr", ""))
    return str(getattr(result, "stdout", ""))


async def _mkdirs(ha: HaCluster, prefix: str, count: int, *ids: str) -> list[str]:
    async with ha.client(*ids) as client:
        done = []
        for i in range(count):
            path = f"/{prefix}/d{i}"
            await client.mkdirs(path)
            done.append(path)
        return done


async def _missing(ha: HaCluster, paths: list[str], *ids: str) -> list[str]:
    async with ha.client(*ids) as client:
        return [p for p in paths if not await client.exists(p)]


def _last_txid(ha: HaCluster, nn_id: str) -> int:
    from xdfs.protocol.ha import GET_SERVICE_STATE
    from xdfs.rpc.loop import run
    from xdfs.rpc.messages import Empty

    async def ask() -> int:
        async with ha.client(nn_id) as client:
            status = await client.rpc.call(GET_SERVICE_STATE, Empty())
            return int(status.last_txid)

    return run(ask())


def test_standby_tails_then_takes_over_after_the_active_is_killed(ha: HaCluster) -> None:
    """nn2 is bootstrapped from nn1's image (-bootstrapStandby) while nn1 serves."""
    shutil.rmtree(ha.name_dir("nn2"))
    ha.start("nn1")
    assert ha.state("nn1") == "standby"
    _ok(ha.admin("-transitionToActive", "nn1"))
    assert ha.state("nn1") == "active"
    acked = asyncio.run(_mkdirs(ha, "before", 20))
    _ok(ha.admin("-saveNamespace"))
    acked += asyncio.run(_mkdirs(ha, "before-more", 20))
    said = _ok(ha.xdfs("namenode", "--name-dir", str(ha.name_dir("nn2")), "-bootstrapStandby"))
    assert "bootstrapped" in said
    ha.start("nn2")
    assert ha.state("nn2") == "standby"
    # the standby answers Standby to clients, and its namespace follows the active's
    refused = ha.xdfs("dfs", "-fs", f"xdfs://{ha.addresses['nn2']}", "-ls", "/")
    assert refused.returncode != 0 and "is standby" in refused.stderr, refused.stderr
    active_txid = _last_txid(ha, "nn1")
    ha.wait(lambda: _last_txid(ha, "nn2") >= active_txid, "nn2 tails nn1")

    ha.namenodes["nn1"].kill()
    _ok(ha.admin("-transitionToActive", "nn2"))
    assert ha.state("nn2") == "active"
    assert asyncio.run(_missing(ha, acked)) == []
    acked += asyncio.run(_mkdirs(ha, "after", 20))
    # nn1 restarts as a standby and catches up from the journal
    ha.start("nn1")
    assert ha.state("nn1") == "standby"
    txid = _last_txid(ha, "nn2")
    ha.wait(lambda: _last_txid(ha, "nn1") >= txid, "nn1 tails nn2")
    assert asyncio.run(_missing(ha, acked)) == []


def test_a_paused_active_is_fenced_when_it_wakes_up(ha: HaCluster) -> None:
    ha.start("nn1")
    ha.start("nn2")
    _ok(ha.admin("-transitionToActive", "nn1"))
    acked = asyncio.run(_mkdirs(ha, "before", 10))
    old = ha.namenodes["nn1"]
    os.kill(old.pid, signal.SIGSTOP)
    try:
        _ok(ha.admin("-transitionToActive", "nn2"))
        acked += asyncio.run(_mkdirs(ha, "during", 10, "nn2"))
    finally:
        os.kill(old.pid, signal.SIGCONT)

    async def write_to_old() -> str:
        async with ha.client("nn1") as client:
            try:
                await client.mkdirs("/from-the-old-active")
            except XdfsError as exc:
                return type(exc).__name__
            return "acknowledged"

    assert asyncio.run(write_to_old()) != "acknowledged"
    assert asyncio.run(_missing(ha, ["/from-the-old-active"], "nn2")) == [
        "/from-the-old-active"]
    assert asyncio.run(_missing(ha, acked, "nn2")) == []
    ha.wait(lambda: not old.alive() or ha.state("nn1") != "active",
            "the fenced NameNode stops being active")


def test_graceful_transitions_both_ways_lose_nothing(ha: HaCluster) -> None:
    ha.start("nn1")
    ha.start("nn2")
    _ok(ha.admin("-transitionToActive", "nn1"))
    acked = asyncio.run(_mkdirs(ha, "first", 5))
    # a second active is refused while the first answers
    refused = ha.admin("-transitionToActive", "nn2")
    assert refused.returncode == 1 and "TakeoverRefused" in refused.stderr, refused.stderr
    for round_, (old, new) in enumerate((("nn1", "nn2"), ("nn2", "nn1"), ("nn1", "nn2"))):
        _ok(ha.admin("-transitionToStandby", old))
        assert ha.state(old) == "standby"
        _ok(ha.admin("-transitionToActive", new))
        acked += asyncio.run(_mkdirs(ha, f"round{round_}", 10))
        assert asyncio.run(_missing(ha, acked)) == []
    assert ha.state("nn1") == "standby" and ha.state("nn2") == "active"


def test_standby_checkpoints_and_uploads_to_the_active(ha: HaCluster) -> None:
    """The active (nn1) would checkpoint only after many more txns than its standby."""
    ha.qjm.extra += ["-D", "namenode.checkpoint_check_interval_s=0.3"]
    ha.start("nn1", "-D", "namenode.checkpoint_txns=100000")
    ha.start("nn2", "-D", "namenode.checkpoint_txns=60")
    _ok(ha.admin("-transitionToActive", "nn1"))
    acked = asyncio.run(_mkdirs(ha, "many", 80))
    ha.wait(lambda: "installed the checkpoint uploaded" in ha.namenodes["nn1"].log_text(),
            "the active installs the standby's checkpoint")
    assert "standby checkpoint written" in ha.namenodes["nn2"].log_text()
    assert any(p.name.startswith("fsimage_") for p in (ha.name_dir("nn2") / "current").iterdir())
    # restarted, nn1 loads the uploaded image and its edits: nothing is lost
    ha.namenodes["nn1"].kill()
    ha.start("nn1")
    _ok(ha.admin("-transitionToActive", "nn1"))
    assert asyncio.run(_missing(ha, acked)) == []


def _sync_unacknowledged_mkdir(name_dir: Path, path: str) -> None:
    """Append to the local in-progress segment what a NameNode killed mid-flush leaves: a
    record its own dir synced while no JournalNode stored it (nobody was answered)."""
    [segment] = [s for s in segment_index(name_dir / "current") if s.end is None]
    reader = SegmentReader(segment.path, layout_version=None, expected_start=segment.start,
                           torn_tail="allow")  # the zeros written ahead of the records
    for _ in reader:
        pass
    op = MkdirOp(path, inode_id=10**9, mode=0o755, owner="root", group="supergroup",
                 mtime_ms=1)
    with open(segment.path, "r+b") as f:
        f.seek(reader.valid_bytes)  # where the NameNode writes its next record
        f.write(encode_record(reader.last_txid + 1, op))
        os.fsync(f.fileno())


def _epochs_raised(ha: HaCluster) -> list[int]:
    return [int(e) for nn_id in ("nn1", "nn2") for e in
            re.findall(r"active epoch is now (\d+)", ha.namenodes[nn_id].log_text())]


def test_a_restarted_active_drops_its_unacknowledged_record_that_another_writer_replaced(
    ha: HaCluster,
) -> None:
    """nn1 is killed with a record in its own dir that no majority stored; nn2 takes over
    and logs other records at the same txids (below the journal's end). Restarted, nn1
    must cut its record (comparing it with the journal's), tail nn2's in its place, and
    raise the epoch above nn2's when it is made active again: the unacknowledged
    directory never appears, and no two actives share an epoch (the nemesis found both)."""
    ha.start("nn1")
    ha.start("nn2")
    _ok(ha.admin("-transitionToActive", "nn1"))
    acked = asyncio.run(_mkdirs(ha, "before", 5))
    ha.namenodes["nn1"].kill()
    _sync_unacknowledged_mkdir(ha.name_dir("nn1"), "/never-acknowledged")
    _ok(ha.admin("-transitionToActive", "nn2"))
    acked += asyncio.run(_mkdirs(ha, "after", 5, "nn2"))
    ha.start("nn1")
    assert ha.state("nn1") == "standby"
    assert "differs from the shared journal's record" in ha.namenodes["nn1"].log_text()
    assert any(p.name.endswith(".unacked") for p in (ha.name_dir("nn1") / "current").iterdir())
    txid = _last_txid(ha, "nn2")
    ha.wait(lambda: _last_txid(ha, "nn1") >= txid, "nn1 tails nn2")
    _ok(ha.admin("-transitionToStandby", "nn2"))
    _ok(ha.admin("-transitionToActive", "nn1"))
    assert asyncio.run(_missing(ha, acked, "nn1")) == []
    assert asyncio.run(_missing(ha, ["/never-acknowledged"], "nn1")) == ["/never-acknowledged"]
    epochs = _epochs_raised(ha)
    assert len(epochs) == 3 and len(set(epochs)) == 3, epochs
