"""The DataNode's conversation with a (stub) NameNode: registration, batched full reports,
heartbeats and their commands, re-registration, restarts and fatal errors."""

from __future__ import annotations

import asyncio
import os
import socket
import threading

import pytest

from tests.integration.dn_helpers import (
    StubNameNode,
    dn_client,
    dn_config,
    make_token,
    new_key,
    read_block,
    replica_files,
    start_registered,
    start_stub,
    stub_authenticator,
    write_block,
)
from xdfs.datanode import layout
from xdfs.datanode.server import DataNode
from xdfs.datanode.storage import DataStorage
from xdfs.errors import AccessDenied, AuthenticationFailed, StorageError, Unavailable, WrongCluster
from xdfs.protocol.blocks import BlockRecord
from xdfs.protocol.datanode import DATANODE_PROTOCOL, HeartbeatResponse, ReplicateTask
from xdfs.rpc.server import RpcServer
from xdfs.testing.minicluster import MiniCluster
from xdfs.testing.poll import eventually


async def put_blocks(
    minicluster: MiniCluster, stub: StubNameNode, node: DataNode, ids: list[int]
) -> list[BlockRecord]:
    client = dn_client(minicluster, node)
    records = []
    for block_id in ids:
        data = block_id.to_bytes(4, "big") * (block_id % 5 + 1)
        response = await write_block(client, BlockRecord(block_id, 1, 0), data,
                                     stub.token(block_id))
        records.append(response.block)
    return records


def version_of(node: DataNode) -> layout.DataNodeVersion:
    return layout.parse_version((node.data_dir / "current" / "VERSION").read_text())


async def test_registration_stores_the_cluster_and_sends_an_empty_report(
    minicluster: MiniCluster,
) -> None:
    stub = await start_stub(minicluster, server_cluster_id="")
    node = await start_registered(minicluster, stub)
    [registration] = stub.registrations
    assert registration.node_id == node.storage.node_id == version_of(node).node_id
    assert registration.address == node.address
    assert registration.storage.capacity_bytes > 0
    assert version_of(node).cluster_id == "CID-stub"
    batches = stub.last_full_report(node.storage.node_id)
    assert batches is not None
    assert [(b.batch_index, b.batch_count, b.blocks) for b in batches] == [(0, 1, [])]
    await eventually(lambda: len(stub.heartbeats) >= 3)  # every heartbeat_interval_s
    beat = stub.heartbeats[-1]
    assert beat.node_id == node.storage.node_id and beat.transfers_in_progress == 0


async def test_full_report_goes_in_batches_of_the_configured_size(
    minicluster: MiniCluster,
) -> None:
    stub = await start_stub(minicluster, block_report_batch_max=3)
    node = await start_registered(minicluster, stub)
    records = await put_blocks(minicluster, stub, node, [5, 3, 9, 1, 7, 2, 8])
    await minicluster.stop_datanode(node)
    stub.reports.clear()
    again = await start_registered(minicluster, stub)
    assert again.storage.node_id == node.storage.node_id  # the same node after a restart
    assert len(stub.registrations) == 2
    batches = stub.last_full_report(node.storage.node_id)
    assert batches is not None
    assert [len(b.blocks) for b in batches] == [3, 3, 1]
    assert {b.report_id for b in batches} == {batches[0].report_id}
    assert [(b.batch_index, b.batch_count) for b in batches] == [(0, 3), (1, 3), (2, 3)]
    reported = [r for b in batches for r in b.blocks]
    assert sorted(reported, key=lambda r: r.block_id) == sorted(records, key=lambda r: r.block_id)
    # And the data is still there.
    client = dn_client(minicluster, again)
    assert (await read_block(client, records[0], stub.token(5, "r")))[1] == (5).to_bytes(4, "big")


async def test_unknown_datanode_on_heartbeat_means_register_and_report_again(
    minicluster: MiniCluster,
) -> None:
    stub = await start_stub(minicluster)
    node = await start_registered(minicluster, stub)
    records = await put_blocks(minicluster, stub, node, [11, 12])
    node_id = node.storage.node_id
    stub.reports.clear()
    stub.forget(node_id)  # as a restarted NameNode
    await eventually(lambda: stub.last_full_report(node_id) is not None)
    assert len(stub.registrations) == 2
    assert stub.reported_blocks(node_id) == records
    heartbeats = len(stub.heartbeats)
    await eventually(lambda: len(stub.heartbeats) > heartbeats)  # and carries on


async def test_send_full_report_command(minicluster: MiniCluster) -> None:
    stub = await start_stub(minicluster)
    node = await start_registered(minicluster, stub)
    await put_blocks(minicluster, stub, node, [21])
    stub.reports.clear()
    stub.commands[node.storage.node_id] = [HeartbeatResponse(send_full_report=True)]
    await eventually(lambda: stub.last_full_report(node.storage.node_id) is not None)
    assert stub.reported_blocks(node.storage.node_id) == [BlockRecord(21, 1, 8)]
    assert len(stub.registrations) == 1


async def test_full_report_every_interval(minicluster: MiniCluster) -> None:
    stub = await start_stub(minicluster, full_report_interval_s=0.2)
    node = await start_registered(minicluster, stub)
    await eventually(lambda: len({r.report_id for r in stub.reports}) >= 3)
    assert len(stub.registrations) == 1
    assert node.actor is not None and node.actor.full_reports_sent >= 3


async def test_delete_command_removes_the_replica_and_reports_it(
    minicluster: MiniCluster,
) -> None:
    stub = await start_stub(minicluster)
    node = await start_registered(minicluster, stub)
    await put_blocks(minicluster, stub, node, [31, 32])
    node_id = node.storage.node_id
    used = node.storage.used_bytes
    stub.commands[node_id] = [HeartbeatResponse(delete=[31, 999])]
    await eventually(lambda: 31 in stub.deleted(node_id))
    assert sorted(stub.deleted(node_id)) == [31, 999]
    assert node.storage.get(31) is None and node.storage.get(32) is not None
    assert replica_files(node.data_dir)["finalized"] == [
        "subdir0/subdir0/blk_32", "subdir0/subdir0/blk_32_1.meta"
    ]
    assert node.storage.used_bytes == used - (31 % 5 + 1) * 4 - 16 - 4


async def test_replicate_command_copies_the_replica_to_the_target(
    minicluster: MiniCluster,
) -> None:
    stub = await start_stub(minicluster)
    source = await start_registered(minicluster, stub, "dn0")
    target = await start_registered(minicluster, stub, "dn1")
    data = os.urandom(3 * 1024 * 1024 + 5)
    client = dn_client(minicluster, source)
    record = (await write_block(client, BlockRecord(41, 7, 0), data, stub.token(41))).block
    task = ReplicateTask(record, [target.address], stub.token(41))
    stub.commands[source.storage.node_id] = [HeartbeatResponse(replicate=[task])]
    await eventually(lambda: record in stub.received(target.storage.node_id))
    head, got = await read_block(dn_client(minicluster, target), record, stub.token(41, "r"))
    assert head.block == record and got == data
    # Replicating again (the NameNode retrying) is harmless: the target answers at once.
    stub.commands[source.storage.node_id] = [HeartbeatResponse(replicate=[task])]
    await eventually(lambda: not stub.commands[source.storage.node_id])
    await eventually(lambda: source.replicator.running == 0)
    assert target.storage.get(41) is not None


async def test_failed_replication_is_logged_and_leaves_the_target_clean(
    minicluster: MiniCluster, caplog: pytest.LogCaptureFixture
) -> None:
    stub = await start_stub(minicluster)
    source = await start_registered(minicluster, stub, "dn0")
    target = await start_registered(minicluster, stub, "dn1")
    [record] = await put_blocks(minicluster, stub, source, [42])
    bad_token = make_token(new_key(), 42)
    task = ReplicateTask(record, [target.address], bad_token)
    stub.commands[source.storage.node_id] = [HeartbeatResponse(replicate=[task])]
    await eventually(lambda: "replication of block 42" in caplog.text)
    await eventually(lambda: source.replicator.running == 0)
    assert target.storage.get(42) is None
    assert replica_files(target.data_dir) == {"rbw": [], "finalized": []}


async def test_new_block_keys_from_a_heartbeat_replace_the_old_ones(
    minicluster: MiniCluster,
) -> None:
    stub = await start_stub(minicluster)
    node = await start_registered(minicluster, stub)
    [record] = await put_blocks(minicluster, stub, node, [51])
    old_token = stub.token(51, "r")
    fresh = new_key(key_id=2)
    stub.commands[node.storage.node_id] = [HeartbeatResponse(block_keys=[fresh])]
    await eventually(lambda: list(node.block_keys) == [2])
    client = dn_client(minicluster, node)
    with pytest.raises(AuthenticationFailed):
        await read_block(client, record, old_token)
    assert (await read_block(client, record, make_token(fresh, 51, "r")))[1]


async def test_a_write_placed_before_the_keys_are_installed_waits_for_them(
    minicluster: MiniCluster, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The NameNode places blocks on a DataNode once it has answered its registration; the
    node installs the keys only after making the cluster id durable. A write in between
    waits for the keys (it was refused, and a one-DataNode client failed)."""
    held = threading.Event()
    persisting = threading.Event()
    set_cluster_id = DataStorage.set_cluster_id

    def slow_set_cluster_id(storage: DataStorage, cluster_id: str) -> None:
        persisting.set()
        held.wait(10)
        set_cluster_id(storage, cluster_id)

    monkeypatch.setattr(DataStorage, "set_cluster_id", slow_set_cluster_id)
    stub = await start_stub(minicluster)
    node = await minicluster.start_datanode("dn0", stub.address)
    try:
        await eventually(lambda: persisting.is_set() and len(stub.registrations) == 1)
        assert not node.block_keys  # registration answered, keys not installed yet
        client = dn_client(minicluster, node)
        write = asyncio.create_task(write_block(client, BlockRecord(71, 1, 0), b"x" * 100,
                                                stub.token(71)))
        await asyncio.sleep(0.3)
        assert not write.done()  # waiting, not refused
        held.set()
        assert (await write).block == BlockRecord(71, 1, 100)
    finally:
        held.set()


async def test_a_write_to_a_datanode_that_cannot_register_is_refused_after_the_wait(
    minicluster: MiniCluster,
) -> None:
    stub = await start_stub(minicluster)
    stub.failures["register_datanode"] = [Unavailable("not yet")] * 100
    node = await minicluster.start_datanode("dn0", stub.address,
                                            config=dn_config(registration_wait_s=0.2))
    client = dn_client(minicluster, node)
    with pytest.raises(Unavailable, match=r"no block keys yet .* within 0\.2 s"):
        await write_block(client, BlockRecord(72, 1, 0), b"x", stub.token(72))
    with pytest.raises(Unavailable, match="no block keys yet"):
        await read_block(client, BlockRecord(72, 1, 1), stub.token(72, "r"))
    assert node.storage.get(72) is None


async def test_failed_received_report_is_retried_with_the_heartbeats(
    minicluster: MiniCluster,
) -> None:
    stub = await start_stub(minicluster)
    node = await start_registered(minicluster, stub)
    stub.failures["incremental_report"] = [Unavailable("busy")] * 1
    # The write still succeeds; its report comes later.
    [record] = await put_blocks(minicluster, stub, node, [61])
    await eventually(lambda: record in stub.received(node.storage.node_id))


async def test_replicas_finalized_during_a_report_go_together_in_the_next(
    minicluster: MiniCluster,
) -> None:
    """One report in flight at most (``reports_in_flight_max`` 1): the replicas finalized
    meanwhile wait for its answer and go together in the next."""
    stub = await start_stub(minicluster)
    node = await start_registered(minicluster, stub, config=dn_config(reports_in_flight_max=1))
    stub.incremental_gate.clear()  # the NameNode holds the reports it gets
    first = asyncio.ensure_future(put_blocks(minicluster, stub, node, [71]))
    await eventually(lambda: stub.received(node.storage.node_id), what="first report")
    rest = [asyncio.ensure_future(put_blocks(minicluster, stub, node, [72 + i]))
            for i in range(5)]
    actor = node.actor.actors[0] if node.actor is not None else None
    assert actor is not None
    await eventually(lambda: actor._received_next is not None
                     and len(actor._received_next.records) == 5, what="5 replicas waiting")
    assert not first.done() and not any(task.done() for task in rest)  # acked after
    stub.incremental_gate.set()
    await asyncio.gather(first, *rest)
    calls = [sorted(b.block_id for b in r.received) for r in stub.incremental
             if r.node_id == node.storage.node_id and r.received]
    # two calls in all: the heartbeats (every 0.05 s here) leave reports on their way alone
    assert calls == [[71], [72, 73, 74, 75, 76]]


async def test_a_replica_finalized_during_a_report_goes_in_its_own_at_once(
    minicluster: MiniCluster,
) -> None:
    """Up to ``reports_in_flight_max`` reports on their way at once: a replica finalized
    while one is held is reported in a second call without waiting for the first's
    answer; past the limit, the replicas wait together for the next free sender."""
    stub = await start_stub(minicluster)
    node = await start_registered(minicluster, stub, config=dn_config(reports_in_flight_max=2))
    actor = node.actor.actors[0] if node.actor is not None else None
    assert actor is not None
    stub.incremental_gate.clear()  # the NameNode holds the reports it gets

    def reports() -> list[list[int]]:
        return [sorted(b.block_id for b in r.received) for r in stub.incremental
                if r.node_id == node.storage.node_id and r.received]

    first = asyncio.ensure_future(put_blocks(minicluster, stub, node, [91]))
    await eventually(lambda: reports() == [[91]], what="first report")
    second = asyncio.ensure_future(put_blocks(minicluster, stub, node, [92]))
    await eventually(lambda: reports() == [[91], [92]], what="second report, the first held")
    rest = [asyncio.ensure_future(put_blocks(minicluster, stub, node, [93 + i]))
            for i in range(3)]
    await eventually(lambda: actor._received_next is not None
                     and len(actor._received_next.records) == 3, what="3 replicas waiting")
    assert actor._received_senders == 2
    assert not any(task.done() for task in [first, second, *rest])  # acked after
    stub.incremental_gate.set()
    await asyncio.gather(first, second, *rest)
    assert reports() == [[91], [92], [93, 94, 95]]
    assert actor._received_senders == 0


async def test_a_report_held_past_report_timeout_lets_the_write_answer(
    minicluster: MiniCluster,
) -> None:
    """The received-replica report's deadline (one per report) releases its writers: the
    write is answered, and the replica is reported once the NameNode answers again."""
    stub = await start_stub(minicluster)
    node = await start_registered(minicluster, stub, config=dn_config(report_timeout_s=0.2))
    stub.incremental_gate.clear()  # the NameNode holds the reports it gets
    [record] = await put_blocks(minicluster, stub, node, [81])  # answered all the same
    actor = node.actor.actors[0] if node.actor is not None else None
    assert actor is not None and actor._received_senders == 1  # the report still waits
    stub.incremental_gate.set()
    await eventually(lambda: record in stub.received(node.storage.node_id))


async def test_unreachable_namenode_is_retried_until_it_serves(
    minicluster: MiniCluster,
) -> None:
    with socket.socket() as sock:  # a port nobody serves on (yet)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    node = await minicluster.start_datanode("dn0", f"127.0.0.1:{port}")
    assert node.actor is not None
    await eventually(lambda: node.actor is not None and node.actor.failed_attempts >= 2)
    assert not node.registered
    stub = StubNameNode()
    stub.server = RpcServer("late-namenode", minicluster.config.rpc, cluster_id=stub.cluster_id,
                            authenticator=stub_authenticator())
    stub.server.add_service(DATANODE_PROTOCOL, stub)
    minicluster.servers.append(stub.server)  # closed with the cluster
    await stub.server.start("127.0.0.1", port)
    await eventually(lambda: node.registered)
    assert stub.registrations[0].node_id == node.storage.node_id
    # registered is set inside the first successful exchange; the failure count is reset
    # when that exchange (register, report, heartbeat) has finished
    await eventually(lambda: node.actor is not None and node.actor.failed_attempts == 0)
    assert node.actor.failed_attempts == 0


async def test_another_clusters_dir_is_fatal(minicluster: MiniCluster) -> None:
    stub = await start_stub(minicluster)
    node = await start_registered(minicluster, stub)
    await minicluster.stop_datanode(node)
    other = await start_stub(minicluster, cluster_id="CID-other")
    again = await minicluster.start_datanode("dn0", other.address)
    await eventually(again.stopped.is_set)
    assert isinstance(again.fatal, WrongCluster)
    assert "CID-other" in str(again.fatal) and str(again.data_dir) in str(again.fatal)
    assert other.registrations == []  # refused at the handshake


async def test_register_reply_naming_another_cluster_is_fatal(
    minicluster: MiniCluster,
) -> None:
    stub = await start_stub(minicluster)
    node = await start_registered(minicluster, stub)
    await minicluster.stop_datanode(node)
    # A NameNode whose handshake accepts anyone but whose cluster differs.
    other = await start_stub(minicluster, cluster_id="CID-other", server_cluster_id="")
    again = await minicluster.start_datanode("dn0", other.address)
    await eventually(again.stopped.is_set)
    assert isinstance(again.fatal, WrongCluster)
    assert "CID-stub" in str(again.fatal) and "CID-other" in str(again.fatal)
    assert version_of(again).cluster_id == "CID-stub"


async def test_rejected_credentials_are_fatal(minicluster: MiniCluster) -> None:
    stub = await start_stub(minicluster)
    stub.failures["register_datanode"] = [AccessDenied("superusers only")]
    node = await minicluster.start_datanode("dn0", stub.address)
    await eventually(node.stopped.is_set)
    assert isinstance(node.fatal, AccessDenied)


async def test_a_second_datanode_on_the_same_dir_refuses_to_start(
    minicluster: MiniCluster,
) -> None:
    stub = await start_stub(minicluster)
    node = await start_registered(minicluster, stub)
    twin = DataNode(minicluster.config, node.data_dir, [stub.address])
    with pytest.raises(StorageError, match="locked"):
        await twin.start()
    assert isinstance(twin.fatal, StorageError) and twin.stopped.is_set()
    await twin.stop()
    assert node.storage.get(1) is None  # the running node is unaffected
