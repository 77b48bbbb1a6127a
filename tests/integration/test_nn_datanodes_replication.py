"""The replication monitor over real RPC with fake DataNodes that obey their heartbeat
replies (copy, delete): dead nodes, setrep, orphans, corrupt replicas, read locations, and
the admin numbers. Heartbeats and checks run on a sub-second scale; every wait is bounded
by a guard, never asserted."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from xdfs.client.client import AsyncClient
from xdfs.errors import AccessDenied
from xdfs.namenode.server import NameNode
from xdfs.protocol import datanode as d
from xdfs.protocol import namenode as p
from xdfs.protocol.blocks import BlockRecord
from xdfs.rpc.messages import Empty
from xdfs.testing.minicluster import MiniCluster
from xdfs.testing.poll import eventually

from .conftest import (
    ROOT,
    ROOT_PW,
    StartDataNodes,
    connect,
    nn_config,
    write_file,
)
from .fake_datanodes import FakeDataNode, FakeDataNodes

FAST = {
    "heartbeat_interval_s": 0.1,
    "heartbeat_misses_dead": 3,
    "replication_check_interval_s": 0.1,
}


@dataclass
class Fast:
    nn: NameNode
    root: AsyncClient
    datanodes: FakeDataNodes


@pytest.fixture
async def fast(minicluster: MiniCluster, fake_datanodes: StartDataNodes) -> Fast:
    nn = await minicluster.start_namenode(config=nn_config(**FAST))
    datanodes = await fake_datanodes(nn, 3)
    root = connect(nn, ROOT, ROOT_PW)
    minicluster.clients.append(root.rpc)  # closed with the cluster
    return Fast(nn, root, datanodes)


async def _block_of(root: AsyncClient, path: str) -> p.LocatedBlock:
    (located,) = (await root.block_locations(path)).blocks
    return located


def _holders(datanodes: FakeDataNodes, block_id: int) -> list[FakeDataNode]:
    return [node for node in datanodes.nodes if block_id in node.held]


async def test_a_dead_datanodes_blocks_are_copied_elsewhere(fast: Fast) -> None:
    root, datanodes = fast.root, fast.datanodes
    await write_file(root, "/f", [1000], replication=2)
    located = await _block_of(root, "/f")
    block_id = located.block.block_id
    first, second = (datanodes.at(address) for address in located.locations)
    (spare,) = [node for node in datanodes.nodes if node not in (first, second)]
    first.silent = True  # it stops heartbeating: dead after 3 missed intervals

    async def recovered() -> bool:
        now = await _block_of(root, "/f")
        return sorted(now.locations) == sorted([second.address, spare.address])

    await eventually(recovered)
    # the survivor was told to copy it to the spare node
    tasks, _ = second.commands()
    assert [(t.block.block_id, t.targets) for t in tasks] == [(block_id, [spare.address])]
    report = await root.rpc.call(p.DATANODE_REPORT, Empty())
    assert {n.node_id: n.state for n in report.nodes}[first.node_id] == "dead"
    assert (report.under_replicated, report.missing_blocks) == (0, 0)
    # it comes back: registers again, reports its replica, which is now one too many
    first.silent = False

    async def trimmed() -> bool:
        return len(_holders(datanodes, block_id)) == 2 and len(
            (await _block_of(root, "/f")).locations
        ) == 2

    await eventually(trimmed)


async def test_setrep_down_deletes_excess_replicas(fast: Fast) -> None:
    root, datanodes = fast.root, fast.datanodes
    await write_file(root, "/f", [10], replication=3)
    block_id = (await _block_of(root, "/f")).block.block_id
    assert len(_holders(datanodes, block_id)) == 3
    await root.set_replication("/f", 1)

    async def trimmed() -> bool:
        return len(_holders(datanodes, block_id)) == 1

    await eventually(trimmed)
    deletions = [node for node in datanodes.nodes if block_id in node.commands()[1]]
    assert len(deletions) == 2
    assert (await _block_of(root, "/f")).locations == [_holders(datanodes, block_id)[0].address]


async def test_an_orphan_replica_is_deleted(fast: Fast) -> None:
    node = fast.datanodes[0]
    await node.receive(BlockRecord(999_999, 1, 10))  # no file has such a block

    async def deleted() -> bool:
        return 999_999 not in node.held

    await eventually(deleted)
    assert 999_999 in node.commands()[1]


async def test_a_corrupt_replica_is_replaced_then_deleted(fast: Fast) -> None:
    root, datanodes = fast.root, fast.datanodes
    await write_file(root, "/f", [10], replication=2)
    located = await _block_of(root, "/f")
    block_id = located.block.block_id
    bad = datanodes.at(located.locations[0])
    (spare,) = [node for node in datanodes.nodes if node.address not in located.locations]
    await root.rpc.call(p.REPORT_BAD_REPLICAS, d.BadReplicasRequest(
        [d.BadReplica(block_id, bad.address)]
    ))

    async def replaced() -> bool:
        return block_id not in bad.held and block_id in spare.held

    await eventually(replaced)
    events = datanodes.events
    copied = events.index(("received", spare.node_id, block_id))
    dropped = events.index(("deleted", bad.node_id, block_id))
    assert copied < dropped  # the corrupt one stayed until a good copy existed
    assert bad.address not in (await _block_of(root, "/f")).locations


async def test_read_locations_are_shuffled_and_skip_dead_nodes(fast: Fast) -> None:
    root, datanodes = fast.root, fast.datanodes
    await write_file(root, "/f", [10], replication=3)
    orders = {tuple((await _block_of(root, "/f")).locations) for _ in range(30)}
    assert len(orders) > 1
    assert all(sorted(order) == sorted(n.address for n in datanodes.nodes) for order in orders)
    datanodes[2].silent = True

    async def skipped() -> bool:
        return datanodes[2].address not in (await _block_of(root, "/f")).locations

    await eventually(skipped)
    assert len((await _block_of(root, "/f")).locations) == 2


async def test_admin_report_and_fsck_numbers(
    minicluster: MiniCluster, fake_datanodes: StartDataNodes
) -> None:
    # no replication monitor round during the test: the numbers stay as made
    nn = await minicluster.start_namenode(config=nn_config(replication_check_interval_s=3600))
    datanodes = await fake_datanodes(nn, 3)
    async with connect(nn, ROOT, ROOT_PW) as root:
        await root.mkdirs("/data")
        await write_file(root, "/data/ok", [100, 100], replication=2)
        await write_file(root, "/data/under", [10], replication=3)
        await write_file(root, "/data/gone", [5], replication=1)
        under = (await _block_of(root, "/data/under")).block.block_id
        gone = await _block_of(root, "/data/gone")
        await datanodes[0].drop(under)  # a disk lost it
        await datanodes.at(gone.locations[0]).drop(gone.block.block_id)

        report = await root.rpc.call(p.DATANODE_REPORT, Empty())
        assert [(n.state, n.address) for n in report.nodes] == sorted(
            ("live", n.address) for n in datanodes.nodes
        )
        assert sum(n.blocks for n in report.nodes) == 2 * 2 + 2
        assert (report.blocks, report.under_replicated, report.missing_blocks,
                report.corrupt_blocks, report.safe_mode) == (4, 1, 1, 0, False)
        assert report.capacity_bytes == 3 * datanodes[0].storage.capacity_bytes

        fsck = await root.rpc.call(p.FSCK, p.FsckRequest("/data"))
        assert not fsck.healthy
        assert (fsck.files, fsck.directories, fsck.total_bytes, fsck.total_blocks) == (
            3, 1, 215, 4
        )
        assert (fsck.healthy_blocks, fsck.under_replicated_blocks, fsck.missing_blocks,
                fsck.corrupt_blocks, fsck.live_datanodes) == (2, 1, 1, 0, 3)
        assert {f.path: f.status for f in fsck.listed} == {
            "/data/under": "under_replicated", "/data/gone": "missing",
        }
        every = await root.rpc.call(p.FSCK, p.FsckRequest("/data/ok", files=True, blocks=True))
        assert every.healthy and [len(f.blocks) for f in every.listed] == [2]

    # any user may run both, fsck only where they may read
    async with connect(nn, ROOT, ROOT_PW) as root:
        await root.add_user("eve", "eve-pw")
        await root.set_permission("/data", 0o700)
    async with connect(nn, "eve", "eve-pw") as eve:
        assert len((await eve.rpc.call(p.DATANODE_REPORT, Empty())).nodes) == 3
        with pytest.raises(AccessDenied):
            await eve.rpc.call(p.FSCK, p.FsckRequest("/data"))
