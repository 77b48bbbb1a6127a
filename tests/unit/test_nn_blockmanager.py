"""The block manager's pure core: DataNode liveness, reports, orphans, excess and corrupt
replicas, client queries. Time and randomness are injected; nothing here sleeps.

:class:`Harness` (also used by test_replication.py) drives a namespace and a block manager
the way the NameNode does: ops applied, then made "durable" before their effects on
replicas run.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from xdfs.common import tokens
from xdfs.config import NameNodeConfig
from xdfs.errors import InvalidArgument, UnknownDataNode
from xdfs.namenode.blocks.manager import BlockManager, Commands
from xdfs.namenode.blocks.safemode import SafeMode
from xdfs.namenode.namespace.ops import (
    AddBlockOp,
    AddFileOp,
    AddTokenKeyOp,
    CloseFileOp,
    Op,
)
from xdfs.namenode.namespace.tree import Namespace
from xdfs.protocol.blocks import BlockRecord
from xdfs.protocol.datanode import StorageReport

GiB = 1 << 30
HOUR_MS = 3_600_000


class Clock:
    def __init__(self) -> None:
        self.now_s = 1_000_000.0

    def __call__(self) -> float:
        return self.now_s

    def advance(self, seconds: float) -> None:
        self.now_s += seconds


class Harness:
    def __init__(self, **config: Any) -> None:
        config.setdefault("safe_mode_threshold", 0.0)
        self.config = replace(NameNodeConfig(), **config)
        self.clock = Clock()
        self.ns = Namespace("root")
        self.safe_mode = SafeMode.from_config(self.config)
        self.bm = BlockManager(
            self.ns, self.config, self.safe_mode, clock=self.clock, rng=random.Random(7)
        )
        expires = int(self.clock() * 1000) + HOUR_MS
        self.ns.apply(AddTokenKeyOp(1, b"k" * 32, expires))
        self._inode = 100

    # --- namespace, as Namesystem.mutate drives it ------------------------------------

    def apply(self, *ops: Op, durable: bool = True) -> list[int]:
        dropped: list[int] = []
        affected: list[int] = []
        for op in ops:
            gone = self.ns.apply(op)
            self.bm.leaving(gone)
            dropped.extend(gone)
            affected.extend(self.bm.affected_blocks(op))
        if durable:
            self.bm.ops_durable(dropped, affected)
        return dropped

    def file(
        self, path: str, sizes: list[int], *, replication: int = 2, close: bool = True
    ) -> list[BlockRecord]:
        self._inode += 1
        ops: list[Op] = [
            AddFileOp(path, self._inode, 0o644, "root", "g", 0, replication, 1 << 20, "c")
        ]
        blocks = [
            BlockRecord(self.ns.allocate_block_id(), self.ns.allocate_genstamp(), size)
            for size in sizes
        ]
        ops.extend(AddBlockOp(path, BlockRecord(b.block_id, b.genstamp, 0)) for b in blocks)
        if close:
            ops.append(CloseFileOp(path, 1, 1, tuple(blocks)))
        self.apply(*ops)
        return blocks

    # --- DataNodes -----------------------------------------------------------------------

    def node(self, name: str, free: int = 100 * GiB) -> str:
        self.bm.register(name, f"{name}:9866", StorageReport(200 * GiB, 0, free))
        return name

    def report(self, node_id: str, *blocks: BlockRecord, batch: int = 100) -> None:
        chunks = [list(blocks[i : i + batch]) for i in range(0, len(blocks), batch)] or [[]]
        for index, chunk in enumerate(chunks):
            self.bm.block_report(node_id, 1, index, len(chunks), chunk)

    def receive(self, node_id: str, *blocks: BlockRecord) -> None:
        self.bm.incremental_report(node_id, blocks, ())

    def beat(self, node_id: str) -> Commands:
        return self.bm.heartbeat(node_id, StorageReport(200 * GiB, 0, 100 * GiB), 0)

    def holders(self, block: BlockRecord) -> list[str]:
        return sorted(r.node_id for r in self.bm.map.replicas(block.block_id) if not r.flags)


@pytest.fixture
def h() -> Harness:
    return Harness()


# --- liveness --------------------------------------------------------------------------


def test_liveness_death_and_coming_back(h: Harness) -> None:
    a, b = h.node("a"), h.node("b")
    (block,) = h.file("/f", [10])
    h.receive(a, block)
    h.receive(b, block)
    dead_after_s = h.config.heartbeat_interval_s * h.config.heartbeat_misses_dead
    h.clock.advance(dead_after_s)
    h.beat(a)
    assert h.bm.check_heartbeats() == []  # b is silent for exactly the limit: still live
    h.clock.advance(0.5)
    assert [n.node_id for n in h.bm.check_heartbeats()] == ["b"]
    assert h.bm.datanodes.live_count() == 1
    # its replicas stop counting at once, and the block wants a copy
    assert h.holders(block) == ["a"]
    assert block.block_id in h.bm.replication.needed
    with pytest.raises(UnknownDataNode, match="declared dead"):
        h.beat(b)
    with pytest.raises(UnknownDataNode, match="unknown"):
        h.beat("stranger")
    with pytest.raises(UnknownDataNode):
        h.receive("stranger", block)
    # it registers again (at a new address) and reports: counted again
    h.bm.register("b", "b-moved:9866", StorageReport(1, 0, 1))
    h.report(b, block)
    assert h.holders(block) == ["a", "b"]
    assert block.block_id not in h.bm.replication.needed
    assert h.bm.locations(block.block_id) in (
        ["a:9866", "b-moved:9866"], ["b-moved:9866", "a:9866"]
    )


def test_no_death_is_declared_right_after_the_namenode_stalled(h: Harness) -> None:
    a = h.node("a")
    interval_s = h.config.heartbeat_interval_s
    assert h.bm.check_heartbeats() == []
    h.clock.advance(10 * interval_s)  # the event loop was busy: no check, no heartbeat read
    assert h.bm.check_heartbeats() == []
    h.clock.advance(interval_s)  # still silent a round later: now it is dead
    assert [n.node_id for n in h.bm.check_heartbeats()] == [a]


def test_a_new_node_id_at_a_known_address_replaces_the_old_node(h: Harness) -> None:
    h.node("old")
    (block,) = h.file("/f", [1])
    h.receive("old", block)
    h.bm.register("new", "old:9866", StorageReport(1, 0, 1))  # data dir wiped
    assert not h.bm.datanodes.get("old").live  # type: ignore[union-attr]
    assert h.holders(block) == []
    assert h.bm.replication.missing == {block.block_id}


def test_registration_needs_an_id_and_an_address(h: Harness) -> None:
    with pytest.raises(InvalidArgument):
        h.bm.register("", "a:1", StorageReport(1, 0, 1))
    with pytest.raises(InvalidArgument):
        h.bm.register("a", "a:1", StorageReport(1, -1, 1))


def test_a_node_that_never_reports_is_asked_for_a_full_report(h: Harness) -> None:
    a = h.node("a")
    assert not h.beat(a).send_full_report  # just registered: its report is on the way
    h.clock.advance(h.bm.datanodes.dead_after_s - 0.1)
    assert not h.beat(a).send_full_report
    h.clock.advance(0.1)
    assert h.beat(a).send_full_report
    assert not h.beat(a).send_full_report  # asked once per interval
    h.report(a)
    h.clock.advance(2 * h.bm.datanodes.dead_after_s)
    h.beat(a)
    assert not h.beat(a).send_full_report


# --- client queries ----------------------------------------------------------------------


def test_locations_are_shuffled(h: Harness) -> None:
    for name in "abcd":
        h.node(name)
    (block,) = h.file("/f", [1], replication=4)
    for name in "abcd":
        h.receive(name, block)
    orders = {tuple(h.bm.locations(block.block_id)) for _ in range(50)}
    assert len(orders) > 1
    assert all(sorted(order) == [f"{n}:9866" for n in "abcd"] for order in orders)


def test_block_tokens_verify_with_the_keys_datanodes_get(h: Harness) -> None:
    keys = {key.key_id: key for key in h.bm.block_keys()}
    token = h.bm.block_token("alice", 77, "w")
    now_ms = int(h.clock() * 1000)
    body = tokens.check_block_token(token, keys, now_ms, 77, "r")
    assert (body.kind, body.user, body.scope) == ("block", "alice", "77:w")
    assert body.expires_ms - body.issued_ms == int(h.config.block_token_lifetime_s * 1000)
    with pytest.raises(Exception, match="invalid token"):
        tokens.verify_token(token, h.ns.token_keys, now_ms)  # not a login key


def test_block_tokens_are_signed_with_a_key_datanodes_had_before_a_rotation(
    h: Harness,
) -> None:
    """A key just added reaches DataNodes only with their next heartbeats: block tokens
    stay signed with the oldest key that outlives them, and never outlive their key."""
    lifetime_ms = int(h.config.block_token_lifetime_s * 1000)
    now_ms = int(h.clock() * 1000)
    h.ns.apply(AddTokenKeyOp(2, b"n" * 32, now_ms + 3 * HOUR_MS))  # the rotation's new key
    before = {key.key_id: key for key in h.bm.block_keys() if key.key_id == 1}
    body = tokens.check_block_token(h.bm.block_token("alice", 7, "w"), before, now_ms, 7, "w")
    assert body.key_id == 1 and body.expires_ms == now_ms + lifetime_ms
    h.clock.advance(HOUR_MS / 1000 - lifetime_ms / 2000)  # key 1 ends before a fresh token
    now_ms = int(h.clock() * 1000)
    keys = {key.key_id: key for key in h.bm.block_keys()}
    body = tokens.check_block_token(h.bm.block_token("alice", 7, "w"), keys, now_ms, 7, "w")
    assert body.key_id == 2 and body.expires_ms == now_ms + lifetime_ms


def test_a_block_token_never_outlives_its_key(h: Harness) -> None:
    h.clock.advance(HOUR_MS / 1000 - 1)  # the only key has one second left
    now_ms = int(h.clock() * 1000)
    keys = {key.key_id: key for key in h.bm.block_keys()}
    body = tokens.check_block_token(h.bm.block_token("alice", 7, "w"), keys, now_ms, 7, "w")
    assert body.expires_ms == h.ns.token_keys[1].expires_ms


def test_targets_exclude_addresses_and_the_safe_counts(h: Harness) -> None:
    h.node("a")
    h.node("b")
    chosen = h.bm.choose_targets(2, ["a:9866", "unknown:1"], 1024)
    assert [n.node_id for n in chosen] == ["b"]
    blocks = h.file("/f", [1, 2, 3])
    h.file("/open", [0, 0], close=False)
    h.receive("a", blocks[0])
    h.receive("a", blocks[1])
    assert h.bm.safe_counts() == (2, 4)  # the open file's last block is not counted
