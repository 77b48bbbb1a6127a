"""Helpers of the DataNode tests: a scriptable stub NameNode and block read/write calls.

The stub serves what a NameNode serves to DataNodes (``DATANODE_PROTOCOL``) plus
``report_bad_replicas``, records every call, mints block tokens with its own key, and
hands out whatever commands a test queues for a node's next heartbeat.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from xdfs.common.tokens import BlockKey, TokenBody, block_scope, issue_token
from xdfs.config import XdfsConfig
from xdfs.datanode.server import DataNode
from xdfs.errors import UnknownDataNode, XdfsError
from xdfs.protocol.blocks import BlockRecord
from xdfs.protocol.datanode import (
    DATANODE_PROTOCOL,
    READ_BLOCK,
    WRITE_BLOCK,
    BadReplica,
    BadReplicasRequest,
    BlockReportRequest,
    CommitBlockSyncRequest,
    HeartbeatRequest,
    HeartbeatResponse,
    IncrementalReportRequest,
    ReadBlockHead,
    ReadBlockRequest,
    RegisterRequest,
    RegisterResponse,
    WriteBlockRequest,
    WriteBlockResponse,
)
from xdfs.protocol.namenode import REPORT_BAD_REPLICAS
from xdfs.rpc.client import RpcClient
from xdfs.rpc.handling import CallContext
from xdfs.rpc.messages import PROTOCOL_VERSION, Empty, Hello
from xdfs.rpc.secret_auth import SecretAuthenticator
from xdfs.rpc.server import RpcServer
from xdfs.rpc.service import Service
from xdfs.testing.minicluster import MiniCluster
from xdfs.testing.poll import eventually

#: Hang guard of every wait in these tests (never a timing assertion).
GUARD_S = 30.0
STUB_BAD_REPLICAS = Service("stub", (REPORT_BAD_REPLICAS,))


def now_ms() -> int:
    return int(time.time() * 1000)


def new_key(key_id: int = 1, lifetime_s: float = 3600.0) -> BlockKey:
    return BlockKey(key_id, os.urandom(32), now_ms() + int(lifetime_s * 1000))


def make_token(
    key: BlockKey, block_id: int, mode: str = "w", *, lifetime_s: float = 600.0
) -> str:
    issued = now_ms()
    expires = issued + int(lifetime_s * 1000)
    scope = block_scope(block_id, mode)
    body = TokenBody("block", "root", key.key_id, issued, expires, scope=scope)
    return issue_token(body, key)


@dataclass
class StubNameNode:
    cluster_id: str = "CID-stub"
    heartbeat_interval_s: float = 0.05
    block_report_batch_max: int = 100
    full_report_interval_s: float = 3600.0
    key: BlockKey = field(default_factory=new_key)
    registrations: list[RegisterRequest] = field(default_factory=list)
    reports: list[BlockReportRequest] = field(default_factory=list)
    heartbeats: list[HeartbeatRequest] = field(default_factory=list)
    incremental: list[IncrementalReportRequest] = field(default_factory=list)
    bad: list[BadReplica] = field(default_factory=list)
    commits: list[CommitBlockSyncRequest] = field(default_factory=list)
    #: node id -> responses its next heartbeats get (then empty ones).
    commands: dict[str, list[HeartbeatResponse]] = field(default_factory=dict)
    #: Errors the next calls of a method raise (method name -> errors, consumed in order).
    failures: dict[str, list[XdfsError]] = field(default_factory=dict)
    known: set[str] = field(default_factory=set)
    server: RpcServer | None = None
    #: While cleared, incremental reports wait (answered once it is set).
    incremental_gate: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.incremental_gate.set()

    @property
    def address(self) -> str:
        assert self.server is not None
        return self.server.address

    def token(self, block_id: int, mode: str = "w", **kwargs: Any) -> str:
        return make_token(self.key, block_id, mode, **kwargs)

    def _maybe_fail(self, method: str) -> None:
        queued = self.failures.get(method)
        if queued:
            raise queued.pop(0)

    def _known(self, node_id: str) -> None:
        if node_id not in self.known:
            raise UnknownDataNode(f"no DataNode {node_id}")

    # -- the DATANODE_PROTOCOL handlers -------------------------------------------------

    def register_datanode(self, ctx: CallContext, request: RegisterRequest) -> RegisterResponse:
        self._maybe_fail("register_datanode")
        self.registrations.append(request)
        self.known.add(request.node_id)
        return RegisterResponse(
            self.cluster_id, 42, self.heartbeat_interval_s, self.block_report_batch_max,
            self.full_report_interval_s, [self.key],
        )

    def block_report(self, ctx: CallContext, request: BlockReportRequest) -> Empty:
        self._maybe_fail("block_report")
        self._known(request.node_id)
        self.reports.append(request)
        return Empty()

    def heartbeat(self, ctx: CallContext, request: HeartbeatRequest) -> HeartbeatResponse:
        self._maybe_fail("heartbeat")
        self._known(request.node_id)
        self.heartbeats.append(request)
        queued = self.commands.get(request.node_id)
        return queued.pop(0) if queued else HeartbeatResponse()

    async def incremental_report(
        self, ctx: CallContext, request: IncrementalReportRequest
    ) -> Empty:
        self._maybe_fail("incremental_report")
        self._known(request.node_id)
        self.incremental.append(request)
        await self.incremental_gate.wait()
        return Empty()

    def report_bad_replicas(self, ctx: CallContext, request: BadReplicasRequest) -> Empty:
        self.bad.extend(request.replicas)
        return Empty()

    def commit_block_synchronization(
        self, ctx: CallContext, request: CommitBlockSyncRequest
    ) -> Empty:
        self._maybe_fail("commit_block_synchronization")
        self.commits.append(request)
        return Empty()

    # -- views for assertions -----------------------------------------------------------

    def forget(self, node_id: str) -> None:
        """As a restarted NameNode: the node's next call gets UnknownDataNode."""
        self.known.discard(node_id)

    def last_full_report(self, node_id: str) -> list[BlockReportRequest] | None:
        """The batches of the newest complete full report of ``node_id``."""
        mine = [r for r in self.reports if r.node_id == node_id]
        for last in reversed(mine):
            batches = [r for r in mine if r.report_id == last.report_id]
            if len(batches) == last.batch_count:
                return batches
        return None

    def reported_blocks(self, node_id: str) -> list[BlockRecord] | None:
        batches = self.last_full_report(node_id)
        if batches is None:
            return None
        return [block for batch in batches for block in batch.blocks]

    def received(self, node_id: str) -> list[BlockRecord]:
        return [b for r in self.incremental if r.node_id == node_id for b in r.received]

    def deleted(self, node_id: str) -> list[int]:
        return [b for r in self.incremental if r.node_id == node_id for b in r.deleted]

    def rbw(self, node_id: str) -> list[BlockRecord]:
        """Replicas reported kept in state rbw (incremental reports)."""
        return [b for r in self.incremental if r.node_id == node_id for b in r.rbw]


#: The credentials MiniCluster DataNodes log in with when no NameNode was started there.
STUB_USER, STUB_PASSWORD = "root", "rootpw"


def stub_authenticator() -> SecretAuthenticator:
    """What a stub NameNode's server admits: the DataNodes' login, proven by SCRAM."""
    return SecretAuthenticator(STUB_USER, STUB_PASSWORD)


async def start_stub(
    minicluster: MiniCluster, *, server_cluster_id: str | None = None, **fields: Any
) -> StubNameNode:
    """A stub NameNode served on 127.0.0.1 (its RPC server's cluster id defaults to the
    stub's, so DataNodes of other clusters fail the handshake). It admits the login a
    MiniCluster DataNode without a NameNode makes (``root``, ``rootpw``) by SCRAM, as a
    NameNode does: the DataNode accepts only a server that proves it knows the password."""
    stub = StubNameNode(**fields)
    cluster = stub.cluster_id if server_cluster_id is None else server_cluster_id
    stub.server = await minicluster.start_server(
        "stub-namenode", [(DATANODE_PROTOCOL, stub), (STUB_BAD_REPLICAS, stub)],
        role="namenode", cluster_id=cluster, diagnostics=False,
        authenticator=stub_authenticator(),
    )
    return stub


def dn_config(**datanode: Any) -> XdfsConfig:
    base = XdfsConfig()
    return replace(base, datanode=replace(base.datanode, **datanode))


async def start_registered(
    minicluster: MiniCluster, stub: StubNameNode, name: str = "dn0", **kwargs: Any
) -> DataNode:
    """A DataNode that has registered with ``stub`` and sent its first full report."""
    node = await minicluster.start_datanode(name, stub.address, **kwargs)
    await eventually(lambda: stub.last_full_report(node.storage.node_id) is not None
                     and node.block_keys)
    return node


def dn_client(minicluster: MiniCluster, node: DataNode, cluster_id: str = "") -> RpcClient:
    return minicluster.client(
        node.address, hello=Hello(PROTOCOL_VERSION, cluster_id=cluster_id, client_name="test")
    )


def pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


async def write_block(
    client: RpcClient, block: BlockRecord, data: bytes, token: str, piece_bytes: int = 1 << 20
) -> WriteBlockResponse:
    request = WriteBlockRequest(block, token, client="test")
    return await client.upload(WRITE_BLOCK, request, pieces(data, piece_bytes))


async def read_block(
    client: RpcClient, block: BlockRecord, token: str, offset: int = 0, length: int = -1
) -> tuple[ReadBlockHead, bytes]:
    stream = await client.download(READ_BLOCK, ReadBlockRequest(block, token, offset, length))
    return stream.head, await stream.read_all()


def replica_files(data_dir: Path) -> dict[str, list[str]]:
    """Every file under rbw/ and finalized/ (relative names), for leak checks."""
    current = data_dir / "current"
    return {
        area: sorted(str(p.relative_to(current / area)) for p in (current / area).rglob("*")
                     if p.is_file())
        for area in ("rbw", "finalized")
    }


def flip_byte(path: Path, offset: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ 0xFF]))
