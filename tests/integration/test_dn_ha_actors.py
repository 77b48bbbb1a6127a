"""A real DataNode between two stub NameNodes of an HA pair (``ha.namenodes``): one actor
per NameNode, registering and reporting to both, commands carried out only from the one
believed active (the last to claim "active" at the highest epoch), a fenced one (below the
persisted epoch) never obeyed, and corrupt-replica reports to the believed active only."""

from __future__ import annotations

from dataclasses import dataclass, replace

import msgspec

from tests.integration.dn_helpers import (
    STUB_BAD_REPLICAS,
    StubNameNode,
    dn_client,
    stub_authenticator,
    write_block,
)
from xdfs.config import XdfsConfig
from xdfs.datanode.server import DataNode
from xdfs.protocol.blocks import BlockRecord
from xdfs.protocol.datanode import (
    DATANODE_PROTOCOL,
    HeartbeatRequest,
    HeartbeatResponse,
    RegisterRequest,
    RegisterResponse,
)
from xdfs.rpc.handling import CallContext
from xdfs.testing.minicluster import MiniCluster
from xdfs.testing.poll import eventually


@dataclass
class HaStub(StubNameNode):
    """A stub that says its HA state and epoch in every answer."""

    ha_state: str = "standby"
    epoch: int = 1

    def register_datanode(self, ctx: CallContext, request: RegisterRequest) -> RegisterResponse:
        answer = super().register_datanode(ctx, request)
        return msgspec.structs.replace(answer, epoch=self.epoch, ha_state=self.ha_state)

    def heartbeat(self, ctx: CallContext, request: HeartbeatRequest) -> HeartbeatResponse:
        answer = super().heartbeat(ctx, request)
        return msgspec.structs.replace(answer, epoch=self.epoch, ha_state=self.ha_state)


async def _start(minicluster: MiniCluster, ha_state: str) -> HaStub:
    stub = HaStub(heartbeat_interval_s=0.05, ha_state=ha_state)
    stub.server = await minicluster.start_server(
        f"stub-{ha_state}", [(DATANODE_PROTOCOL, stub), (STUB_BAD_REPLICAS, stub)],
        role="namenode", cluster_id=stub.cluster_id, diagnostics=False,
        authenticator=stub_authenticator(),
    )
    return stub


async def _pair(minicluster: MiniCluster) -> tuple[HaStub, HaStub, DataNode]:
    """nn1 active and nn2 standby at epoch 1, and a DataNode registered with both."""
    active, standby = await _start(minicluster, "active"), await _start(minicluster, "standby")
    base = XdfsConfig()
    config = replace(base, ha=replace(base.ha, namenodes={"nn1": active.address,
                                                          "nn2": standby.address}))
    node = await minicluster.start_datanode("dn0", f"{active.address},{standby.address}",
                                            config=config)
    await eventually(lambda: all(s.last_full_report(node.storage.node_id) is not None
                                 for s in (active, standby)) and bool(node.block_keys))
    return active, standby, node


async def _stored(minicluster: MiniCluster, stub: HaStub, node: DataNode,
                  block_id: int) -> BlockRecord:
    client = dn_client(minicluster, node)
    response = await write_block(client, BlockRecord(block_id, 1, 0), b"x" * 1000,
                                 stub.token(block_id))
    return response.block


async def test_both_namenodes_hear_everything_and_only_the_active_commands(
    minicluster: MiniCluster,
) -> None:
    active, standby, node = await _pair(minicluster)
    node_id = node.storage.node_id
    assert node.actor is not None and len(node.actor.actors) == 2
    assert node.actor.choice.active == active.address
    first = await _stored(minicluster, active, node, 11)
    second = await _stored(minicluster, active, node, 12)
    # both hear of the new replicas
    await eventually(lambda: {b.block_id for b in standby.received(node_id)} >= {11, 12})
    assert {b.block_id for b in active.received(node_id)} >= {11, 12}
    # a deletion from the standby is ignored; the active's is carried out and both hear it
    standby.commands[node_id] = [HeartbeatResponse(delete=[first.block_id])]
    await eventually(lambda: not standby.commands[node_id])
    beats = len(standby.heartbeats)  # the next heartbeat goes after the answer was handled
    await eventually(lambda: len(standby.heartbeats) > beats + 1)
    assert node.storage.replicas.get(first.block_id) is not None
    active.commands[node_id] = [HeartbeatResponse(delete=[second.block_id])]
    await eventually(lambda: second.block_id in standby.deleted(node_id)
                     and second.block_id in active.deleted(node_id))
    assert node.storage.replicas.get(second.block_id) is None
    assert node.storage.replicas.get(first.block_id) is not None


async def test_a_failover_moves_obedience_and_the_old_epoch_is_fenced(
    minicluster: MiniCluster,
) -> None:
    old, new, node = await _pair(minicluster)
    node_id = node.storage.node_id
    offer = node.actor
    assert offer is not None
    block = await _stored(minicluster, old, node, 21)
    # the standby takes over at a higher epoch; the old one still claims active
    new.epoch, new.ha_state = 2, "active"
    await eventually(lambda: offer.choice.active == new.address)
    assert (node.data_dir / "current" / "active_epoch").read_text().strip() == "2"
    # the old one, below the watermark now, is fenced: whatever it says is not obeyed
    old.commands[node_id] = [HeartbeatResponse(delete=[block.block_id])]
    await eventually(lambda: not offer.actors[0].registered)
    beats = len(new.heartbeats)
    await eventually(lambda: len(new.heartbeats) > beats + 10)
    assert node.storage.replicas.get(block.block_id) is not None
    # corrupt replicas go to the believed active only
    offer.report_bad(block.block_id)
    await eventually(lambda: {b.block_id for b in new.bad} == {block.block_id})  # (maybe twice)
    assert old.bad == []
