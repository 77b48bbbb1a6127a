"""fsck statuses and the DataNode report, over a block manager driven by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest

from xdfs.errors import AccessDenied
from xdfs.namenode.blocks import fsck
from xdfs.namenode.namespace.ops import AddUserOp, MkdirOp
from xdfs.protocol.blocks import BlockRecord
from xdfs.protocol.namenode import FsckReport

from .test_nn_blockmanager import Harness


@pytest.fixture
def h() -> Harness:
    h = Harness()
    for name in "abc":
        h.node(name)
    return h


def run(h: Harness, path: str = "/", **options: bool) -> FsckReport:
    return fsck.fsck(h.ns, h.bm, h.config, "root", path, **options)


def test_statuses_and_counts(h: Harness) -> None:
    healthy = h.file("/healthy", [10, 20])
    under = h.file("/under", [5], replication=3)
    corrupt = h.file("/corrupt", [7])
    h.file("/missing", [9])
    h.file("/open", [3, 0], close=False)
    h.file("/empty", [])
    for block in healthy:
        h.receive("a", block)
        h.receive("b", block)
    h.receive("a", under[0])
    h.receive("c", BlockRecord(corrupt[0].block_id, corrupt[0].genstamp, 8))  # wrong length
    report = run(h)
    assert not report.healthy
    assert (report.files, report.directories, report.total_bytes) == (6, 1, 51)  # open: 0
    assert (report.total_blocks, report.healthy_blocks, report.under_replicated_blocks,
            report.corrupt_blocks, report.missing_blocks) == (7, 3, 1, 1, 2)
    # the open file's first block has no replica: under construction is judged on
    # complete blocks only, its last block is healthy until completed
    assert {f.path: f.status for f in report.listed} == {
        "/under": "under_replicated", "/corrupt": "corrupt", "/missing": "missing",
        "/open": "missing",
    }
    assert all(f.blocks == [] for f in report.listed)
    assert (report.live_datanodes, report.default_replication, report.truncated) == (3, 2, False)


def test_listing_with_blocks_and_locations(h: Harness) -> None:
    h.ns.apply(MkdirOp("/dir", 600, 0o755, "root", "g", 0))
    (block,) = h.file("/dir/f", [10])
    h.receive("a", block)
    h.receive("b", BlockRecord(block.block_id, block.genstamp, 11))  # wrong length
    report = run(h, "/dir", files=True, locations=True)
    assert report.healthy
    (listed,) = report.listed
    assert (listed.path, listed.status, listed.replication, listed.length) == (
        "/dir/f", "under_replicated", 2, 10
    )
    (checked,) = listed.blocks
    assert (checked.live_replicas, checked.expected_replicas) == (1, 2)
    assert (checked.locations, checked.corrupt_locations) == (["a:9866"], ["b:9866"])
    assert run(h, "/dir/f", files=True).listed[0].path == "/dir/f"  # a file path too


def test_listing_stops_at_the_limit(h: Harness) -> None:
    for i in range(5):
        h.file(f"/m{i}", [1])
    h.config = replace(h.config, fsck_list_max=3)
    report = run(h)
    assert len(report.listed) == 3 and report.truncated
    assert report.missing_blocks == 5


def test_fsck_needs_read_access_to_the_subtree(h: Harness) -> None:
    h.ns.apply(AddUserOp("eve", b"", b"", (), 0))
    h.ns.apply(MkdirOp("/private", 500, 0o700, "root", "g", 0))
    h.ns.apply(MkdirOp("/private/x", 501, 0o700, "root", "g", 0))
    with pytest.raises(AccessDenied):
        fsck.fsck(h.ns, h.bm, h.config, "eve", "/private")
    with pytest.raises(AccessDenied):
        fsck.fsck(h.ns, h.bm, h.config, "eve", "/")
    h.ns.apply(MkdirOp("/open", 502, 0o755, "root", "g", 0))
    assert fsck.fsck(h.ns, h.bm, h.config, "eve", "/open").healthy


def test_datanode_report(h: Harness) -> None:
    blocks = h.file("/f", [1, 2], replication=3)
    for block in blocks:
        h.receive("a", block)
        h.receive("b", block)
    h.bm.report_bad_replica(blocks[0].block_id, "b:9866")
    h.clock.advance(h.bm.datanodes.dead_after_s + 1)
    h.beat("a")
    h.beat("b")
    h.bm.check_heartbeats()  # c is dead
    report = fsck.datanode_report(h.ns, h.bm)
    assert [(n.node_id, n.state, n.blocks) for n in report.nodes] == [
        ("a", "live", 2), ("b", "live", 2), ("c", "dead", 0),
    ]
    assert report.nodes[2].last_contact_s == pytest.approx(h.bm.datanodes.dead_after_s + 1)
    assert (report.capacity_bytes, report.free_bytes) == (2 * 200 << 30, 2 * 100 << 30)
    assert (report.blocks, report.under_replicated, report.corrupt_blocks,
            report.missing_blocks, report.safe_mode) == (2, 2, 1, 0, False)
