"""Fake DataNodes for the NameNode tests: they speak DATANODE_PROTOCOL over real RPC
(register, full reports in batches, heartbeats, incremental reports) but store nothing.

A group shares one RPC connection (as the superuser, as DataNodes log in) and can heartbeat
in the background, obeying the replies like real DataNodes (delete, copy to a peer).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from dataclasses import dataclass, field

from xdfs.client.client import AsyncClient
from xdfs.common.tokens import BlockKey
from xdfs.config import XdfsConfig
from xdfs.errors import UnknownDataNode, XdfsError
from xdfs.namenode.server import NameNode
from xdfs.protocol import datanode as d
from xdfs.protocol.blocks import BlockRecord
from xdfs.protocol.namenode import LocatedBlock
from xdfs.rpc.client import RpcClient
from xdfs.rpc.messages import PROTOCOL_VERSION, Hello

SUPERUSER, SUPERUSER_PW = "root", "rootpw"

_ADDRESS_PORTS = itertools.count(41000)
#: NameNode address -> its fake DataNodes (how write_file finds them from a client).
_FAKES: dict[str, FakeDataNodes] = {}


def fake_datanodes_of(client: AsyncClient) -> FakeDataNodes:
    return _FAKES[client.addresses[0]]


class FakeDataNode:
    """A DataNode as the NameNode sees it: DATANODE_PROTOCOL over real RPC, no data.

    ``held`` is what it would have on disk. ``heartbeat`` obeys the reply like a real
    DataNode (deletes, and copies to ``peers`` for replicate commands) unless told not to,
    and keeps every reply in ``replies``."""

    def __init__(
        self, rpc: RpcClient, name: str, *, free_bytes: int = 1 << 40,
        peers: dict[str, FakeDataNode] | None = None,
        events: list[tuple[str, str, int]] | None = None,
    ) -> None:
        self.rpc = rpc
        self.node_id = f"fake-{name}"
        self.address = f"127.0.0.1:{next(_ADDRESS_PORTS)}"
        self.storage = d.StorageReport(free_bytes * 2, 0, free_bytes)
        self.held: dict[int, BlockRecord] = {}
        self.replies: list[d.HeartbeatResponse] = []
        self.keys: list[BlockKey] = []
        self.peers = peers if peers is not None else {}
        #: ("received" | "deleted", node id, block id), in order, shared by a group.
        self.events = events if events is not None else []
        #: A silent node sends no heartbeat from its group's beat task (a dead DataNode).
        self.silent = False
        self._report_ids = itertools.count(1)

    async def register(self) -> d.RegisterResponse:
        response = await self.rpc.call(
            d.REGISTER_DATANODE, d.RegisterRequest(self.node_id, self.address, self.storage)
        )
        self.keys = response.block_keys
        return response

    async def full_report(self, batch_max: int = 100) -> None:
        blocks = list(self.held.values())
        batches = [blocks[i : i + batch_max] for i in range(0, len(blocks), batch_max)] or [[]]
        report_id = next(self._report_ids)
        for index, batch in enumerate(batches):
            await self.rpc.call(d.BLOCK_REPORT, d.BlockReportRequest(
                self.node_id, report_id, index, len(batches), batch
            ))

    async def join(self) -> None:
        await self.register()
        await self.full_report()

    async def heartbeat(self, *, obey: bool = True) -> d.HeartbeatResponse:
        reply = await self.rpc.call(d.HEARTBEAT, d.HeartbeatRequest(self.node_id, self.storage))
        self.replies.append(reply)
        if reply.block_keys:
            self.keys = reply.block_keys
        if obey:
            await self.drop(*reply.delete)
            for task in reply.replicate:
                for target in task.targets:
                    if target in self.peers:
                        await self.peers[target].receive(task.block)
            if reply.send_full_report:
                await self.full_report()
        return reply

    async def receive(self, *blocks: BlockRecord) -> None:
        self.held.update((block.block_id, block) for block in blocks)
        self.events.extend(("received", self.node_id, block.block_id) for block in blocks)
        await self.rpc.call(
            d.INCREMENTAL_REPORT, d.IncrementalReportRequest(self.node_id, received=list(blocks))
        )

    async def drop(self, *block_ids: int) -> None:
        """Delete local replicas (a command, or a disk losing them) and say so."""
        present = [block_id for block_id in block_ids if self.held.pop(block_id, None)]
        self.events.extend(("deleted", self.node_id, block_id) for block_id in present)
        if present:
            await self.rpc.call(
                d.INCREMENTAL_REPORT, d.IncrementalReportRequest(self.node_id, deleted=present)
            )

    def commands(self) -> tuple[list[d.ReplicateTask], list[int]]:
        """Every replicate task and deletion received so far."""
        return (
            [task for reply in self.replies for task in reply.replicate],
            [block_id for reply in self.replies for block_id in reply.delete],
        )


@dataclass
class FakeDataNodes:
    """Fake DataNodes of one NameNode, sharing one RPC connection (as root). With
    ``beat``, a task heartbeats for each node every heartbeat interval (re-joining when
    the NameNode has forgotten it), so the nodes stay live through a long test."""

    namenode: str
    rpc: RpcClient
    nodes: list[FakeDataNode] = field(default_factory=list)
    events: list[tuple[str, str, int]] = field(default_factory=list)
    _beater: asyncio.Task[None] | None = None

    @classmethod
    async def start(
        cls, nn: NameNode, count: int = 3, *, beat: bool = True, free_bytes: int = 1 << 40
    ) -> FakeDataNodes:
        rpc = RpcClient([nn.address], XdfsConfig().rpc, hello=Hello(
            PROTOCOL_VERSION, client_name="fake-datanodes", user=SUPERUSER, password=SUPERUSER_PW,
        ))
        group = cls(nn.address, rpc)
        peers: dict[str, FakeDataNode] = {}
        for index in range(count):
            node = FakeDataNode(
                rpc, f"{nn.address}-{index}", free_bytes=free_bytes, peers=peers,
                events=group.events,
            )
            peers[node.address] = node
            group.nodes.append(node)
            await node.join()
        if beat:
            interval_s = nn.config.namenode.heartbeat_interval_s
            group._beater = asyncio.create_task(group._beat(interval_s))
        _FAKES[nn.address] = group
        return group

    def __getitem__(self, index: int) -> FakeDataNode:
        return self.nodes[index]

    def at(self, address: str) -> FakeDataNode:
        return next(node for node in self.nodes if node.address == address)

    async def store(self, located: LocatedBlock, num_bytes: int) -> BlockRecord:
        """Every target of ``located`` reports the block with ``num_bytes``."""
        block = BlockRecord(located.block.block_id, located.block.genstamp, num_bytes)
        for address in located.locations:
            await self.at(address).receive(block)
        return block

    async def _beat(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            for node in self.nodes:
                if node.silent:
                    continue
                try:
                    await node.heartbeat()
                except UnknownDataNode:
                    await node.join()
                except XdfsError:
                    pass  # the NameNode is restarting or stopping: try again next round

    async def close(self) -> None:
        if self._beater is not None:
            self._beater.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._beater
        _FAKES.pop(self.namenode, None)
        await self.rpc.close()
