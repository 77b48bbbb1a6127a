"""The NameNode and its DataNodes over real RPC: registration and reports, targets and block
tokens, complete waiting for replicas, startup safe mode. The DataNodes are fakes
(tests/integration/conftest.py) that speak DATANODE_PROTOCOL and store nothing."""

from __future__ import annotations

import asyncio
import time

import pytest

from xdfs.common import tokens
from xdfs.errors import (
    AccessDenied,
    InvalidArgument,
    LeaseError,
    NotEnoughReplicas,
    SafeModeError,
    UnknownDataNode,
)
from xdfs.protocol import datanode as d
from xdfs.protocol import namenode as p
from xdfs.protocol.blocks import BlockRecord
from xdfs.rpc.messages import Empty
from xdfs.testing.minicluster import MiniCluster
from xdfs.testing.poll import eventually

from .conftest import (
    ROOT,
    ROOT_PW,
    Cluster,
    StartDataNodes,
    connect,
    nn_config,
    write_file,
)
from .fake_datanodes import FakeDataNodes


def _verify(token: str, datanodes: FakeDataNodes, block_id: int, mode: str) -> tokens.TokenBody:
    """Check a block token as a DataNode does, with the keys the NameNode gave it."""
    keys = {key.key_id: key for key in datanodes[0].keys}
    return tokens.check_block_token(token, keys, int(time.time() * 1000), block_id, mode)


async def test_add_block_targets_and_block_tokens(cluster: Cluster) -> None:
    alice, datanodes = cluster["alice"], cluster.datanodes
    addresses = {node.address for node in datanodes.nodes}
    await alice.create("/tmp/f", replication=2)
    first = await alice.rpc.call(p.ADD_BLOCK, p.AddBlockRequest("/tmp/f", alice.client_name))
    assert len(first.locations) == len(set(first.locations)) == 2
    assert set(first.locations) <= addresses
    body = _verify(first.token, datanodes, first.block.block_id, "w")
    assert (body.user, body.scope) == ("alice", f"{first.block.block_id}:w")
    with pytest.raises(AccessDenied):  # the token is for that block only
        _verify(first.token, datanodes, first.block.block_id + 1, "w")
    block = await datanodes.store(first, 1000)
    # excluded addresses are not chosen again; more replicas than nodes: every other node
    excluded = sorted(addresses)[0]
    second = await alice.rpc.call(p.ADD_BLOCK, p.AddBlockRequest(
        "/tmp/f", alice.client_name, block, [excluded]
    ))
    assert excluded not in second.locations and len(second.locations) == 2
    await alice.complete("/tmp/f", [block, await datanodes.store(second, 10)])
    await alice.create("/tmp/wide", replication=5)
    wide = await alice.rpc.call(p.ADD_BLOCK, p.AddBlockRequest("/tmp/wide", alice.client_name))
    assert sorted(wide.locations) == sorted(addresses)
    # readers get the replicas and a read token per block
    located = await alice.block_locations("/tmp/f")
    assert [len(b.locations) for b in located.blocks] == [2, 2]
    for located_block in located.blocks:
        read = _verify(located_block.token, datanodes, located_block.block.block_id, "r")
        assert read.scope.endswith(":r")
        with pytest.raises(AccessDenied):
            _verify(located_block.token, datanodes, located_block.block.block_id, "w")


async def test_no_datanode_means_not_enough_replicas_and_nothing_logged(
    minicluster: MiniCluster,
) -> None:
    nn = await minicluster.start_namenode()
    async with connect(nn, ROOT, ROOT_PW) as root:
        await root.create("/f")
        before = (await root.status()).last_txid
        with pytest.raises(NotEnoughReplicas) as info:
            await root.rpc.call(p.ADD_BLOCK, p.AddBlockRequest("/f", root.client_name))
        assert "0 live DataNode(s)" in info.value.message
        assert (await root.status()).last_txid == before
        assert (await root.block_locations("/f")).blocks == []


async def test_complete_waits_for_the_replicas(
    minicluster: MiniCluster, fake_datanodes: StartDataNodes
) -> None:
    nn = await minicluster.start_namenode(config=nn_config(complete_wait_s=60.0))
    datanodes = await fake_datanodes(nn, 2)
    assert nn.fs is not None
    async with connect(nn, ROOT, ROOT_PW) as root:
        await root.create("/f", replication=2)
        located = await root.rpc.call(p.ADD_BLOCK, p.AddBlockRequest("/f", root.client_name))
        block = BlockRecord(located.block.block_id, located.block.genstamp, 4096)
        completing = asyncio.create_task(root.complete("/f", [block]))

        async def waiting() -> bool:
            assert nn.fs is not None
            return nn.fs.blocks.watched(block.block_id)

        await eventually(waiting)  # the NameNode holds the call until a replica comes
        # a replica of another length does not count (the writer's length is the truth)
        short = BlockRecord(block.block_id, block.genstamp, 100)
        await datanodes.at(located.locations[0]).receive(short)
        assert (await root.stat("/f")).under_construction
        assert not completing.done()
        await datanodes.at(located.locations[1]).receive(block)  # min_replication is 1
        done = await completing
        assert (done.length, done.under_construction) == (4096, False)
        assert not nn.fs.blocks.watched(block.block_id)
        # the short replica is corrupt now: the block reads from the good one only
        (only,) = (await root.block_locations("/f")).blocks
        assert only.locations == [located.locations[1]]


async def test_complete_gives_up_after_complete_wait_s(
    minicluster: MiniCluster, fake_datanodes: StartDataNodes
) -> None:
    nn = await minicluster.start_namenode(config=nn_config(complete_wait_s=0.3))
    await fake_datanodes(nn, 1)
    async with connect(nn, ROOT, ROOT_PW) as root:
        await root.create("/f")
        located = await root.rpc.call(p.ADD_BLOCK, p.AddBlockRequest("/f", root.client_name))
        block = BlockRecord(located.block.block_id, located.block.genstamp, 1)
        with pytest.raises(NotEnoughReplicas, match="has 0 of the 1 replica"):
            await root.complete("/f", [block])
        assert (await root.stat("/f")).under_construction
        # an empty file needs no DataNode
        await root.create("/empty")
        assert not (await root.complete("/empty", [])).under_construction


async def test_abandon_block_and_additional_datanode(cluster: Cluster) -> None:
    root, datanodes = cluster.root, cluster.datanodes
    await root.create("/f", replication=2)
    located = await root.rpc.call(p.ADD_BLOCK, p.AddBlockRequest("/f", root.client_name))
    existing, failed = located.locations
    (spare,) = {n.address for n in datanodes.nodes} - set(located.locations)
    extra = await root.rpc.call(p.ADDITIONAL_DATANODE, p.AdditionalDataNodeRequest(
        "/f", root.client_name, located.block, [existing], [failed]
    ))
    assert extra.locations == [spare] and extra.offset == 0
    assert _verify(extra.token, datanodes, located.block.block_id, "w").scope.endswith(":w")
    with pytest.raises(NotEnoughReplicas):  # nothing left to choose
        await root.rpc.call(p.ADDITIONAL_DATANODE, p.AdditionalDataNodeRequest(
            "/f", root.client_name, located.block, [existing, spare], [failed]
        ))
    # one target stored part of it before the writer gave the block up
    await datanodes.at(existing).receive(located.block)
    request = p.AbandonBlockRequest("/f", root.client_name, located.block.block_id)
    await root.rpc.call(p.ABANDON_BLOCK, request)
    await root.rpc.call(p.ABANDON_BLOCK, request)  # again: already done
    assert (await root.block_locations("/f")).blocks == []
    node = datanodes.at(existing)

    async def deleted() -> bool:
        return located.block.block_id not in node.held

    await eventually(deleted)  # a delete command in one of its heartbeat replies
    # only the writer may: others lack the lease, or the permission
    with pytest.raises(LeaseError):
        await root.rpc.call(p.ABANDON_BLOCK, p.AbandonBlockRequest("/f", "another-client", 1))
    alice = cluster["alice"]
    with pytest.raises(AccessDenied):
        await alice.rpc.call(p.ABANDON_BLOCK, p.AbandonBlockRequest("/f", alice.client_name, 1))


async def test_datanode_protocol_checks(cluster: Cluster) -> None:
    datanodes = cluster.datanodes
    rpc = datanodes.rpc
    storage = d.StorageReport(10, 0, 10)
    with pytest.raises(UnknownDataNode):
        await rpc.call(d.HEARTBEAT, d.HeartbeatRequest("nobody", storage))
    with pytest.raises(UnknownDataNode):
        await rpc.call(d.BLOCK_REPORT, d.BlockReportRequest("nobody", 1, 0, 1, []))
    with pytest.raises(UnknownDataNode):
        await rpc.call(d.INCREMENTAL_REPORT, d.IncrementalReportRequest("nobody"))
    batch_max = cluster.nn.config.namenode.block_report_batch_max
    too_many = [BlockRecord(i, 1, 1) for i in range(10 * batch_max + 1)]
    with pytest.raises(InvalidArgument):
        await rpc.call(d.BLOCK_REPORT, d.BlockReportRequest(
            datanodes[0].node_id, 7, 0, 1, too_many
        ))
    # only superusers act as DataNodes
    alice = cluster["alice"]
    with pytest.raises(AccessDenied):
        await alice.rpc.call(d.REGISTER_DATANODE, d.RegisterRequest("mine", "x:1", storage))
    with pytest.raises(AccessDenied):
        await alice.rpc.call(d.HEARTBEAT, d.HeartbeatRequest(datanodes[0].node_id, storage))
    # the register reply carries the cluster's identity and settings
    reply = await datanodes[0].register()
    status = await cluster.root.status()
    assert (reply.cluster_id, reply.namespace_id) == (status.cluster_id, status.namespace_id)
    assert reply.block_report_batch_max == batch_max
    assert reply.block_keys and reply.block_keys == (await datanodes[0].heartbeat()).block_keys
    # a user may report a bad replica only with a token for its block (issue 17 item 10)
    with pytest.raises(AccessDenied):
        await alice.rpc.call(
            p.REPORT_BAD_REPLICAS, d.BadReplicasRequest([d.BadReplica(1, "x:1")])
        )


async def test_restart_waits_in_safe_mode_for_block_reports(
    minicluster: MiniCluster, fake_datanodes: StartDataNodes
) -> None:
    config = nn_config(safe_mode_extension_s=0.2, safe_mode_check_interval_s=0.05)
    nn = await minicluster.start_namenode(config=config)
    old = await fake_datanodes(nn)
    async with connect(nn, ROOT, ROOT_PW) as root:
        assert not (await root.safe_mode("get")).on
        await write_file(root, "/a", [10, 20])
        await write_file(root, "/b", [30], replication=3)
    held = [dict(node.held) for node in old.nodes]
    await old.close()
    await minicluster.stop_namenode(nn)

    nn = await minicluster.start_namenode(format_dirs=False, config=config)
    async with connect(nn, ROOT, ROOT_PW) as root:
        token = await root.login(ROOT, ROOT_PW)  # logins work in safe mode
        assert token.token
        status = await root.safe_mode("get")
        assert status.on
        assert status.reason == (
            "waiting for block reports: 0 of 3 blocks have 1 replica(s) (need 99.9%); "
            "0 live DataNode(s)"
        )
        with pytest.raises(SafeModeError, match="waiting for block reports"):
            await root.mkdirs("/x")
        assert (await root.status()).safe_mode
        # the DataNodes come back with their replicas
        new = await fake_datanodes(nn, beat=False)
        for node, replicas in zip(new.nodes[:2], held[:2], strict=True):
            node.held = replicas
            await node.full_report()

        async def left() -> bool:
            return not (await root.safe_mode("get")).on

        await eventually(left)
        await root.mkdirs("/x")
        report = await root.rpc.call(p.DATANODE_REPORT, Empty())
        assert not report.safe_mode and report.missing_blocks == 0
