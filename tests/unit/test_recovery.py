"""Startup recovery, checkpoints and retention on real files."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.test_image import FakeNamespace
from xdfs.common.faults import FAULTS
from xdfs.common.images import md5_name
from xdfs.editlog.framing import SEGMENT_HEADER_BYTES
from xdfs.editlog.segments import SegmentInfo, segment_index, segment_name
from xdfs.errors import StorageError
from xdfs.namenode.editlog.editlog import EditLog, EditLogSettings
from xdfs.namenode.image.recovery import (
    analyze_dir_log,
    load_namespace,
    plan_purge,
    purge,
    save_checkpoint,
)
from xdfs.namenode.image.storage import StorageDirectory
from xdfs.namenode.namespace.ops import LAYOUT_VERSION, DeleteOp, MkdirOp, Op, SetPermissionOp


@pytest.fixture(autouse=True)
def _disarm() -> Iterator[None]:
    yield
    FAULTS.disarm()


def formatted(root: Path, count: int = 1) -> list[StorageDirectory]:
    dirs = [StorageDirectory(root / f"name{i}") for i in range(count)]
    for d in dirs:
        d.format("CID-r", 99, 1)
    save_checkpoint(dirs, FakeNamespace(), 0)
    return dirs


def mk(ns: FakeNamespace, i: int) -> Op:
    return MkdirOp(f"/dir{i}", ns.next_inode_id, 0o755, "alice", "staff", i)


async def run_ops(
    dirs: list[StorageDirectory], ns: FakeNamespace, count: int, first_txid: int, *,
    crash: bool = False, settings: EditLogSettings | None = None,
) -> int:
    """Apply+log ``count`` mkdirs starting at txid ``first_txid``; returns the last txid."""
    log = EditLog.for_storage(dirs, settings)
    await log.open_for_write(first_txid)
    txid = first_txid - 1
    for _ in range(count):
        op = mk(ns, first_txid + ns.applied)
        ns.apply(op)
        txid = log.append(op)
        await log.sync(txid)
    if crash:  # like SIGKILL: nothing finalized
        for journal in log.journals:
            await journal.close()
    else:
        await log.close()
    return txid


def inprogress(d: StorageDirectory) -> Path:
    """The segment a crash left open, without the zeros written ahead of its records (the
    tests that use it tear or flip its last record as an append would leave it)."""
    from xdfs.editlog.segments import ZEROS_AHEAD, SegmentReader
    [seg] = [s for s in segment_index(d.current) if s.in_progress]
    reader = SegmentReader(seg.path, layout_version=LAYOUT_VERSION, torn_tail="allow")
    for _ in reader:
        pass
    assert reader.torn is None or reader.torn.startswith(ZEROS_AHEAD), reader.torn
    os.truncate(seg.path, reader.valid_bytes)
    return seg.path


def record_offsets(path: Path) -> list[int]:
    from xdfs.editlog.segments import SegmentReader
    reader = SegmentReader(path, layout_version=LAYOUT_VERSION)
    return [offset for _, _, _, offset in reader]


async def test_load_image_then_replay(tmp_path: Path) -> None:
    dirs = formatted(tmp_path)
    ns = FakeNamespace()
    last = await run_ops(dirs, ns, 30, 1)
    loaded, txid = load_namespace(dirs, FakeNamespace)
    assert txid == last == 30
    assert loaded.canonical_dump() == ns.canonical_dump()
    # checkpoint, more edits, load again: image + the edits after it only
    save_checkpoint(dirs, loaded, txid)
    await run_ops(dirs, ns, 5, 31)
    loaded2, txid2 = load_namespace(dirs, FakeNamespace)
    assert txid2 == 35 and loaded2.canonical_dump() == ns.canonical_dump()
    assert loaded2.applied == 5


async def test_crash_leaves_inprogress_then_reopen_finalizes(tmp_path: Path) -> None:
    dirs = formatted(tmp_path)
    ns = FakeNamespace()
    await run_ops(dirs, ns, 10, 1, crash=True)
    assert [s.name for s in segment_index(dirs[0].current)] == [segment_name(1)]
    loaded, last = load_namespace(dirs, FakeNamespace)
    assert last == 10 and loaded.canonical_dump() == ns.canonical_dump()
    await run_ops(dirs, loaded, 3, last + 1)
    assert [s.name for s in segment_index(dirs[0].current)] == [
        segment_name(1, 10), segment_name(11, 13)]


async def test_torn_tail_at_every_byte_is_truncated(tmp_path: Path) -> None:
    template = formatted(tmp_path / "template")
    ns = FakeNamespace()
    await run_ops(template, ns, 4, 1, crash=True)
    seg = inprogress(template[0])
    data = seg.read_bytes()
    last_start = record_offsets(seg)[-1]
    expected = FakeNamespace()
    for i in range(3):
        expected.apply(mk(expected, 1 + i))
    for d in template:
        d.unlock()
    for cut in range(last_start + 1, len(data)):
        case = tmp_path / f"cut{cut}"
        shutil.copytree(tmp_path / "template", case)
        dirs = [StorageDirectory(case / "name0")]
        path = dirs[0].current / seg.name
        os.truncate(path, cut)
        loaded, last = load_namespace(dirs, FakeNamespace)
        assert last == 3, cut
        assert loaded.canonical_dump() == expected.canonical_dump(), cut
        assert path.stat().st_size == last_start, cut  # the torn record is gone from disk


async def test_crc_bad_final_record_is_torn_but_middle_is_fatal(tmp_path: Path) -> None:
    dirs = formatted(tmp_path)
    await run_ops(dirs, FakeNamespace(), 5, 1, crash=True)
    seg = inprogress(dirs[0])
    offsets = record_offsets(seg)
    data = bytearray(seg.read_bytes())
    data[-2] ^= 0x10  # the crc of the last record
    seg.write_bytes(bytes(data))
    _, last = load_namespace(dirs, FakeNamespace)
    assert last == 4
    data = bytearray(seg.read_bytes())
    data[offsets[1] + 14] ^= 0x10  # a middle record
    seg.write_bytes(bytes(data))
    with pytest.raises(StorageError) as info:
        load_namespace(dirs, FakeNamespace)
    assert seg.name in str(info.value) and f"byte offset {offsets[1]}" in str(info.value)
    assert seg.stat().st_size == len(data)  # nothing truncated on corruption


async def test_corrupt_finalized_segment_is_fatal(tmp_path: Path) -> None:
    dirs = formatted(tmp_path)
    ns = FakeNamespace()
    await run_ops(dirs, ns, 5, 1)
    await run_ops(dirs, ns, 5, 6)
    path = dirs[0].current / segment_name(1, 5)
    offsets = record_offsets(path)
    os.truncate(path, offsets[-1] + 3)  # looks torn, but the segment is finalized
    with pytest.raises(StorageError, match=rf"{path.name} at byte offset {offsets[-1]}"):
        load_namespace(dirs, FakeNamespace)


async def test_gap_between_segments_is_fatal(tmp_path: Path) -> None:
    dirs = formatted(tmp_path)
    ns = FakeNamespace()
    for first in (1, 4, 7):
        await run_ops(dirs, ns, 3, first)
    (dirs[0].current / segment_name(4, 6)).unlink()
    with pytest.raises(StorageError, match=r"txids 4..6 are missing"):
        load_namespace(dirs, FakeNamespace)


async def test_bad_newest_image_falls_back_to_older(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dirs = formatted(tmp_path)
    ns = FakeNamespace()
    await run_ops(dirs, ns, 10, 1)
    loaded, last = load_namespace(dirs, FakeNamespace)
    save_checkpoint(dirs, loaded, last)
    await run_ops(dirs, ns, 5, 11)
    image = dirs[0].image_path(10)
    data = bytearray(image.read_bytes())
    data[len(data) // 2] ^= 0xFF
    image.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="xdfs.namenode.image.recovery"):
        loaded, last = load_namespace(dirs, FakeNamespace)
    assert last == 15 and loaded.canonical_dump() == ns.canonical_dump()
    assert loaded.applied == 15  # replayed from the txid-0 image
    assert any("skipping image" in r.getMessage() and image.name in r.getMessage()
               for r in caplog.records)
    dirs[0].image_path(0).write_bytes(b"XDFSIMG1 junk")
    with pytest.raises(StorageError, match="no usable fsimage"):
        load_namespace(dirs, FakeNamespace)


async def test_seen_txid_beyond_the_log_means_lost_edits(tmp_path: Path) -> None:
    dirs = formatted(tmp_path)
    await run_ops(dirs, FakeNamespace(), 5, 1)
    dirs[0].write_seen_txid(9)
    with pytest.raises(StorageError, match="seen_txid says txids up to 9"):
        load_namespace(dirs, FakeNamespace)


async def test_replay_failure_names_txid_and_file(tmp_path: Path) -> None:
    dirs = formatted(tmp_path)
    log = EditLog.for_storage(dirs)
    await log.open_for_write(1)
    log.append(DeleteOp("/nothing", 1))
    await log.close()
    with pytest.raises(StorageError, match=r"replaying txid 1 \(delete\) from .*edits_0+1-0+1 "
                                           r"at byte offset 20"):
        load_namespace(dirs, FakeNamespace)


async def test_longest_dir_wins_and_the_other_is_repaired(tmp_path: Path) -> None:
    dirs = formatted(tmp_path, 2)
    ns = FakeNamespace()
    await run_ops(dirs, ns, 5, 1)
    await run_ops(dirs, ns, 6, 6, crash=True)
    short = inprogress(dirs[0])
    os.truncate(short, record_offsets(short)[2])  # dir 0 lost its last 4 records (torn)
    loaded, last = load_namespace(dirs, FakeNamespace)
    assert last == 11 and loaded.canonical_dump() == ns.canonical_dump()
    a, b = (sorted(p.name for p in d.current.glob("edits_*")) for d in dirs)
    assert a == b
    assert inprogress(dirs[0]).read_bytes() == inprogress(dirs[1]).read_bytes()
    await run_ops(dirs, loaded, 1, 12)
    for d in dirs:
        assert [s.name for s in segment_index(d.current)][-2:] == [
            segment_name(6, 11), segment_name(12, 12)]


async def test_corrupt_dir_is_replaced_by_a_valid_one(tmp_path: Path) -> None:
    dirs = formatted(tmp_path, 2)
    ns = FakeNamespace()
    await run_ops(dirs, ns, 8, 1)
    path = dirs[1].current / segment_name(1, 8)
    data = bytearray(path.read_bytes())
    data[SEGMENT_HEADER_BYTES + 30] ^= 1
    path.write_bytes(bytes(data))
    assert analyze_dir_log(dirs[1], 0).error is not None
    loaded, last = load_namespace(dirs, FakeNamespace)
    assert last == 8 and loaded.canonical_dump() == ns.canonical_dump()
    assert path.read_bytes() == (dirs[0].current / segment_name(1, 8)).read_bytes()
    # with every copy corrupt, startup stops
    for d in dirs:
        p = d.current / segment_name(1, 8)
        data = bytearray(p.read_bytes())
        data[SEGMENT_HEADER_BYTES + 30] ^= 1
        p.write_bytes(bytes(data))
    with pytest.raises(StorageError, match="byte offset"):
        load_namespace(dirs, FakeNamespace)


async def test_dirs_of_different_namespaces_are_refused(tmp_path: Path) -> None:
    a = StorageDirectory(tmp_path / "a")
    b = StorageDirectory(tmp_path / "b")
    a.format("CID", 1, 1)
    b.format("CID", 2, 1)
    with pytest.raises(StorageError, match="belongs to namespace 2"):
        load_namespace([a, b], FakeNamespace)


def test_plan_purge_is_pure() -> None:
    def seg(start: int, end: int | None) -> SegmentInfo:
        return SegmentInfo(start, end, Path(segment_name(start, end)))

    def img(t: int) -> list[str]:
        return [f"fsimage_{t:019d}", f"fsimage_{t:019d}.md5"]

    names = [*img(0), *img(100), *img(200), *img(300), f"fsimage_{400:019d}",
             f"fsimage.ckpt_{250:019d}", f"fsimage.ckpt_{500:019d}",
             f"fsimage_{150:019d}.md5", "seen_txid.tmp", "fsimage_x.md5.tmp"]
    segments = [seg(1, 100), seg(101, 199), seg(200, 250), seg(251, 300), seg(301, None)]
    plan = plan_purge(names, segments, 2)
    assert plan.images == [0, 100]
    assert plan.stray == ["fsimage.ckpt_0000000000000000250",
                          "fsimage_0000000000000000150.md5", "fsimage_x.md5.tmp"]
    assert [(s.start, s.end) for s in plan.segments] == [(1, 100), (101, 199)]
    assert plan_purge(names, segments, 4).images == []
    assert plan_purge(names, segments, 1).images == [0, 100, 200]
    assert [(s.start, s.end) for s in plan_purge(names, segments, 1).segments] == [
        (1, 100), (101, 199), (200, 250), (251, 300)]
    assert plan_purge(["fsimage_0000000000000000001"], segments, 1).segments == []


async def test_retention_keeps_two_images_and_needed_edits(tmp_path: Path) -> None:
    dirs = formatted(tmp_path, 2)
    ns = FakeNamespace()
    txid = 0
    for _ in range(4):
        txid = await run_ops(dirs, ns, 5, txid + 1)
        loaded, last = load_namespace(dirs, FakeNamespace)
        save_checkpoint(dirs, loaded, last)
        purge(dirs, retained_images=2)
    (dirs[0].current / "fsimage.ckpt_0000000000000000012").write_bytes(b"left over")
    txid = await run_ops(dirs, ns, 3, txid + 1, crash=True)
    deleted = purge(dirs, retained_images=2)
    assert [p.name for p in deleted] == ["fsimage.ckpt_0000000000000000012"]
    for d in dirs:
        assert d.images() == [20, 15]
        assert sorted(p.name for p in d.current.iterdir() if p.name.startswith("fsimage")) == [
            "fsimage_0000000000000000015", "fsimage_0000000000000000015.md5",
            "fsimage_0000000000000000020", "fsimage_0000000000000000020.md5"]
        assert [s.name for s in segment_index(d.current)] == [
            segment_name(16, 20), segment_name(21)]
    # the oldest retained image can still be replayed to the end
    dirs[0].image_path(20).write_bytes(b"corrupt")
    dirs[1].image_path(20).write_bytes(b"corrupt")
    loaded, last = load_namespace(dirs, FakeNamespace)
    assert last == 23 and loaded.canonical_dump() == ns.canonical_dump()


async def test_purge_leaves_everything_without_images(tmp_path: Path) -> None:
    dirs = formatted(tmp_path)
    await run_ops(dirs, FakeNamespace(), 3, 1)
    for name in (dirs[0].image_path(0), dirs[0].current / md5_name(0)):
        name.unlink()
    assert purge(dirs) == []
    assert len(segment_index(dirs[0].current)) == 1


async def test_real_namespace_replay_equals_live_state(tmp_path: Path) -> None:
    from xdfs.namenode.namespace.tree import Namespace

    dirs = [StorageDirectory(tmp_path / "nn")]
    dirs[0].format("CID", 7, 1)
    live = Namespace("hdfs")
    save_checkpoint(dirs, live, 0)
    log = EditLog.for_storage(dirs)
    await log.open_for_write(1)
    ops: list[Op] = []
    for i in range(50):
        ops.append(MkdirOp(f"/d{i}", live.next_inode_id + i, 0o755, "hdfs", "supergroup", i))
    ops.append(SetPermissionOp("/d3", 0o700))
    ops.append(DeleteOp("/d4", 99))
    for op in ops:
        live.apply(op)
        log.append(op)
    await log.sync()
    loaded, last = load_namespace(dirs, Namespace)
    assert last == len(ops)
    assert loaded.canonical_dump() == live.canonical_dump()
    save_checkpoint(dirs, loaded, last)
    for i in range(5):
        op = MkdirOp(f"/late{i}", live.next_inode_id, 0o755, "hdfs", "supergroup", 1000)
        live.apply(op)
        log.append(op)
    await log.close()
    loaded, last = load_namespace(dirs, Namespace)
    assert last == len(ops) + 5 and loaded.canonical_dump() == live.canonical_dump()


CRASH_WRITER = textwrap.dedent("""
    import asyncio, sys
    from xdfs.namenode.editlog.editlog import EditLog
    from xdfs.namenode.namespace.ops import MkdirOp
    from xdfs.namenode.image.storage import StorageDirectory

    async def main():
        sd = StorageDirectory(sys.argv[1])
        sd.lock()
        log = EditLog.for_storage([sd])
        await log.open_for_write(1)

        async def writer(w):
            for i in range(100000):
                op = MkdirOp(f"/w{w}/{i}", 2, 0o755, "u", "g", i)
                txid = log.append(op)
                await log.sync(txid)
                print(txid, flush=True)   # acknowledged

        await asyncio.gather(*(writer(w) for w in range(16)))

    asyncio.run(main())
""")


def test_sigkill_during_group_commit_loses_no_acknowledged_edit(tmp_path: Path) -> None:
    dirs = [StorageDirectory(tmp_path / "nn")]
    dirs[0].format("CID", 1, 1)
    save_checkpoint(dirs, FakeNamespace(), 0)
    dirs[0].unlock()
    child = subprocess.Popen([sys.executable, "-c", CRASH_WRITER, str(dirs[0].root)],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    acked = 0
    for line in child.stdout:
        acked = max(acked, int(line))
        if acked >= 3000:
            break
    child.send_signal(signal.SIGKILL)
    rest = child.stdout.read()
    child.wait()
    acked = max([acked, *(int(x) for x in rest.split())])

    class Counting(FakeNamespace):
        def apply(self, op: Op) -> tuple[int, ...]:
            self.applied += 1
            return ()

    loaded, last = load_namespace(dirs, Counting)
    assert last >= acked >= 3000
    assert loaded.applied == last
