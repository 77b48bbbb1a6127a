"""A DataNode serving two metadata shards (``datanode.shards``), each a stub NameNode with
its own block key: one actor per shard, each shard's reports carry only its pool's
replicas, tokens are checked with the block's shard's keys, and a shard's command naming
another shard's block is refused (a forged delete never removes the replica)."""

from __future__ import annotations

import os

import pytest

from tests.integration.dn_helpers import (
    StubNameNode,
    dn_client,
    dn_config,
    flip_byte,
    make_token,
    new_key,
    read_block,
    start_stub,
    write_block,
)
from xdfs.datanode.metrics import status_facts
from xdfs.datanode.server import DataNode
from xdfs.errors import AuthenticationFailed, CorruptReplica, ShardNotServed
from xdfs.namenode.namespace.tree_base import FIRST_BLOCK_ID
from xdfs.protocol.blocks import BlockRecord
from xdfs.protocol.datanode import HeartbeatResponse, RecoverBlockTask, ReplicateTask
from xdfs.sharding.ids import first_id
from xdfs.testing.minicluster import MiniCluster
from xdfs.testing.poll import eventually

B0 = first_id(0, FIRST_BLOCK_ID)
B1 = first_id(1, FIRST_BLOCK_ID)
B2 = first_id(2, FIRST_BLOCK_ID)


async def two_shards(minicluster: MiniCluster) -> tuple[StubNameNode, StubNameNode, DataNode]:
    stub0 = await start_stub(minicluster)
    stub1 = await start_stub(minicluster, key=new_key(7))
    shards = {"0": stub0.address, "1": stub1.address}
    node = await minicluster.start_datanode("dn0", "unused:1", config=dn_config(shards=shards))
    node_id = node.storage.node_id
    await eventually(lambda: all(stub.last_full_report(node_id) is not None
                                 for stub in (stub0, stub1)) and all(node.shard_keys.values()))
    return stub0, stub1, node


async def heartbeats_after(stub: StubNameNode, node_id: str) -> None:
    """Wait until the queued commands went out and one more heartbeat came after them."""
    await eventually(lambda: not stub.commands.get(node_id))
    seen = len(stub.heartbeats)
    await eventually(lambda: len(stub.heartbeats) > seen + 1)


async def test_each_shard_hears_of_its_pool_only_and_refuses_another_shards_block(
    minicluster: MiniCluster, caplog: pytest.LogCaptureFixture
) -> None:
    stub0, stub1, node = await two_shards(minicluster)
    node_id = node.storage.node_id
    assert len(node.offers) == 2 and [o.shard for o in node.offers.values()] == [0, 1]
    facts = dict(status_facts(node))
    assert facts["NameNodes"] == f"shard 0: {stub0.address}; shard 1: {stub1.address}"
    client = dn_client(minicluster, node, "CID-stub")
    r0 = (await write_block(client, BlockRecord(B0, 1, 0), b"zero" * 50, stub0.token(B0))).block
    r1 = (await write_block(client, BlockRecord(B1, 1, 0), b"one" * 70, stub1.token(B1))).block
    # A token is checked with the keys of the block's shard; a shard not served is refused.
    with pytest.raises(AuthenticationFailed):
        await write_block(client, BlockRecord(B1 + 1, 1, 0), b"x", stub0.token(B1 + 1))
    with pytest.raises(ShardNotServed, match="shard 2"):
        await write_block(client, BlockRecord(B2, 1, 0), b"x", make_token(stub0.key, B2))
    assert node.storage.get(B1 + 1) is None and node.storage.get(B2) is None
    assert stub0.received(node_id) == [r0] and stub1.received(node_id) == [r1]
    assert (node.storage.pool_current(1) / "finalized").is_dir()
    assert node.storage.get(B1).data_path.is_relative_to(  # type: ignore[union-attr]
        node.storage.current / "BP-1" / "finalized")

    # Full reports and heartbeats: per pool.
    for stub in (stub0, stub1):
        stub.commands[node_id] = [HeartbeatResponse(send_full_report=True)]
    before = (len(stub0.reports), len(stub1.reports))
    await eventually(lambda: len(stub0.reports) > before[0] and len(stub1.reports) > before[1])
    assert stub0.reported_blocks(node_id) == [r0]
    assert stub1.reported_blocks(node_id) == [r1]
    await heartbeats_after(stub1, node_id)
    used = node.storage.pool_used
    assert stub0.heartbeats[-1].storage.used_bytes == used[0] > 0
    assert stub1.heartbeats[-1].storage.used_bytes == used[1] > 0
    capacities = {stub.heartbeats[-1].storage.capacity_bytes for stub in (stub0, stub1)}
    assert len(capacities) == 1  # the shared disk's, told to every shard

    # Shard 0 forges commands for shard 1's block: refused, the replica stays readable.
    target = "127.0.0.1:1"
    stub0.commands[node_id] = [HeartbeatResponse(
        delete=[B1], replicate=[ReplicateTask(r1, [target], stub0.token(B1))])]
    await heartbeats_after(stub0, node_id)
    assert node.storage.get(B1) is not None
    assert "refusing to delete block" in caplog.text
    assert "refusing to replicate block" in caplog.text
    assert B1 not in stub0.deleted(node_id) and B1 not in stub1.deleted(node_id)
    _, data = await read_block(client, r1, stub1.token(B1, "r"))
    assert data == b"one" * 70

    # Shard 1's own delete removes only its replica, and only shard 1 hears of it.
    stub1.commands[node_id] = [HeartbeatResponse(delete=[B1])]
    await eventually(lambda: B1 in stub1.deleted(node_id))
    assert node.storage.get(B1) is None and node.storage.get(B0) is not None
    assert node.storage.pool_used[1] == 0
    assert B1 not in stub0.deleted(node_id)


async def test_each_shard_keeps_its_own_epoch_watermark(minicluster: MiniCluster) -> None:
    """Epochs are per namespace (each pool keeps its own ``active_epoch``): shard 1 at epoch
    2 is obeyed although shard 0 is at epoch 9."""
    stub0, stub1, node = await two_shards(minicluster)
    node_id = node.storage.node_id
    client = dn_client(minicluster, node, "CID-stub")
    await write_block(client, BlockRecord(B1, 1, 0), b"one", stub1.token(B1))
    stub0.commands[node_id] = [HeartbeatResponse(epoch=9)]
    epoch_0 = node.storage.pool_current(0) / "active_epoch"
    epoch_1 = node.storage.pool_current(1) / "active_epoch"
    await eventually(lambda: epoch_0.exists() and epoch_0.read_text().strip() == "9")
    stub1.commands[node_id] = [HeartbeatResponse(epoch=2, delete=[B1])]
    await eventually(lambda: B1 in stub1.deleted(node_id))
    assert node.storage.get(B1) is None
    assert epoch_1.read_text().strip() == "2" and epoch_0.read_text().strip() == "9"


async def test_a_shard_may_be_an_ha_pair(minicluster: MiniCluster) -> None:
    """Two addresses of a shard in ``datanode.shards`` are its HA pair: one actor each,
    only the active's commands obeyed."""
    from tests.integration.test_dn_ha_actors import _start

    stub0 = await start_stub(minicluster)
    active, standby = await _start(minicluster, "active"), await _start(minicluster, "standby")
    shards = {"0": stub0.address, "1": f"{active.address},{standby.address}"}
    node = await minicluster.start_datanode("dn0", "unused:1", config=dn_config(shards=shards))
    node_id = node.storage.node_id
    await eventually(lambda: all(s.last_full_report(node_id) is not None
                                 for s in (stub0, active, standby)) and all(
                                     node.shard_keys.values()))
    pair = node.offers[1]
    assert pair.ha and len(pair.actors) == 2 and pair.choice.active == active.address
    assert not node.offers[0].ha
    client = dn_client(minicluster, node, "CID-stub")
    await write_block(client, BlockRecord(B1, 1, 0), b"one", active.token(B1))
    standby.commands[node_id] = [HeartbeatResponse(delete=[B1])]
    await heartbeats_after(standby, node_id)
    assert node.storage.get(B1) is not None
    active.commands[node_id] = [HeartbeatResponse(delete=[B1])]
    await eventually(lambda: B1 in active.deleted(node_id) and B1 in standby.deleted(node_id))
    assert node.storage.get(B1) is None and B1 not in stub0.deleted(node_id)


async def test_a_block_recovery_commits_to_the_shard_of_its_block(
    minicluster: MiniCluster, caplog: pytest.LogCaptureFixture
) -> None:
    stub0, stub1, node = await two_shards(minicluster)
    node_id = node.storage.node_id
    client = dn_client(minicluster, node, "CID-stub")
    await write_block(client, BlockRecord(B1, 1, 0), b"one" * 10, stub1.token(B1))
    task = RecoverBlockTask(BlockRecord(B1, 1, 0), 2, [node.address], stub1.token(B1))
    stub0.commands[node_id] = [HeartbeatResponse(recover=[task])]  # not shard 0's block
    await heartbeats_after(stub0, node_id)
    assert "refusing to recover block" in caplog.text and not stub0.commits
    stub1.commands[node_id] = [HeartbeatResponse(recover=[task])]
    await eventually(lambda: stub1.commits)
    assert [c.block.block_id for c in stub1.commits] == [B1] and not stub0.commits
    assert node.storage.get(B1).genstamp == 2  # type: ignore[union-attr]


async def test_a_corrupt_replica_is_reported_to_its_shard_only(minicluster: MiniCluster) -> None:
    stub0, stub1, node = await two_shards(minicluster)
    client = dn_client(minicluster, node, "CID-stub")
    record = (await write_block(client, BlockRecord(B1, 1, 0), os.urandom(3 * 65536),
                                stub1.token(B1))).block
    replica = node.storage.get(B1)
    assert replica is not None
    flip_byte(replica.data_path, 65536 + 1)
    with pytest.raises(CorruptReplica):
        await read_block(client, record, stub1.token(B1, "r"))
    await eventually(lambda: stub1.bad)
    assert [b.block_id for b in stub1.bad] == [B1] and not stub0.bad
