"""Handlers of the ``datanode`` service: block writes (upload), reads (download), info,
and the two steps of a block recovery (``block_recovery.py``).

Every block access needs a block token the NameNode issued for that block (a write token
also reads). A write is acknowledged only after the replica is finalized (fsynced, in
``finalized/``) and, within ``report_timeout_s``, reported to the NameNode, whose
``complete`` waits for those reports (seed 003). A write whose stream breaks leaves its
bytes in state rbw, reported as such. A read that finds the replica's files gone reports
the replica deleted at once (the reader moves on to the next replica).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Protocol

from xdfs.datanode.replica import Replica
from xdfs.datanode.transfer import PieceStream, in_thread, receive_replica
from xdfs.errors import BlockNotFound, InvalidArgument, Unavailable
from xdfs.protocol.datanode import (
    DataNodeInfoResponse,
    InitReplicaRecoveryRequest,
    ReadBlockHead,
    ReadBlockRequest,
    ReplicaRecoveryInfo,
    UpdateReplicaRequest,
    WriteBlockRequest,
    WriteBlockResponse,
)
from xdfs.rpc.handling import CallContext, Download
from xdfs.rpc.messages import Empty
from xdfs.rpc.streams import StreamReceiver

if TYPE_CHECKING:
    from xdfs.common.aio import KernelSyncs
    from xdfs.datanode.block_recovery import BlockRecovery
    from xdfs.datanode.offer import NameNodeOffer
    from xdfs.datanode.replica import ReplicaReader
    from xdfs.datanode.storage import DataStorage
    from xdfs.datanode.transfer import Transfers
    from xdfs.errors import CorruptReplica

log = logging.getLogger(__name__)


class ServedNode(Protocol):
    """What the handlers reach through their DataNode (``server.DataNode`` is one; this
    module never imports it). ``offer_of`` names the actors of a block's shard."""

    storage: DataStorage
    transfers: Transfers
    syncs: KernelSyncs | None
    block_recovery: BlockRecovery
    #: Block id -> the call writing it now.
    writers: dict[int, asyncio.Task[Any]]
    bytes_read: int
    bytes_written: int

    def offer_of(self, block_id: int) -> NameNodeOffer: ...
    @property
    def address(self) -> str: ...
    async def check_token(self, token: str, block_id: int, mode: str) -> None: ...
    def open_replica(self, replica: Replica, offset: int, length: int) -> ReplicaReader: ...
    def on_corrupt(self, replica: Replica, error: CorruptReplica) -> None: ...
    def on_kept(self, replica: Replica) -> None: ...
    def info(self) -> DataNodeInfoResponse: ...


class DataNodeHandlers:
    def __init__(self, node: ServedNode) -> None:
        self.node = node

    async def write_block(
        self, ctx: CallContext, request: WriteBlockRequest, chunks: StreamReceiver
    ) -> WriteBlockResponse:
        node = self.node
        block = request.block
        await node.check_token(request.token, block.block_id, "w")
        existing = node.storage.get(block.block_id)
        if request.append_to is not None:
            return await self._receive(ctx, request, chunks, self._appendable(request))
        if existing is not None and not existing.corrupt:
            if existing.recovery_genstamp:
                raise Unavailable(f"block {block.block_id} is being recovered")
            if (existing.finalized and existing.genstamp == block.genstamp
                    and not node.storage.is_busy(block.block_id)):
                # A repeated copy (replication retried, or a writer's retry): same bytes.
                async for _data in chunks:
                    pass
                return WriteBlockResponse(existing.record, node.address)
            if existing.genstamp > block.genstamp:
                raise InvalidArgument(
                    f"block {block.block_id}: genstamp {block.genstamp} is older than the "
                    f"stored replica's {existing.genstamp}"
                )
        return await self._receive(ctx, request, chunks, None)

    def _appendable(self, request: WriteBlockRequest) -> Replica:
        """The finalized replica an append continues: exactly the one the writer names
        (a replica that moved on, or is being written or recovered, is not continued)."""
        node = self.node
        expected = request.append_to
        assert expected is not None
        if expected.block_id != request.block.block_id:  # the token is for request.block
            raise InvalidArgument(f"append_to {expected} is not block {request.block.block_id}")
        replica = node.storage.get(expected.block_id)
        if (replica is None or replica.corrupt or not replica.finalized
                or replica.record != expected):
            have = "none" if replica is None else str(replica.record)
            raise BlockNotFound(f"cannot append: no finalized replica {expected} here ({have})")
        if replica.recovery_genstamp or node.storage.is_busy(expected.block_id):
            raise Unavailable(f"block {expected.block_id} is being written or recovered here")
        if request.block.genstamp < expected.genstamp:
            raise InvalidArgument(f"block {expected.block_id}: append with an older genstamp")
        return replica

    async def _receive(
        self, ctx: CallContext, request: WriteBlockRequest, chunks: StreamReceiver,
        append_to: Replica | None,
    ) -> WriteBlockResponse:
        node = self.node
        block = request.block
        node.storage.claim(block.block_id)
        had_bytes = append_to.num_bytes if append_to is not None else 0
        this_call = asyncio.current_task()
        assert this_call is not None
        node.writers[block.block_id] = this_call
        transfers = node.transfers
        transfers.count += 1  # (Transfers.track inline: one generator less per block)
        try:
            if append_to is None and node.storage.get(block.block_id) is not None:
                await self._drop_rbw(block.block_id)
            replica = await receive_replica(
                node.storage, block.block_id, block.genstamp, chunks, node.on_kept,
                append_to, node.syncs,
            )
        finally:
            transfers.count -= 1
            node.writers.pop(block.block_id, None)
            node.storage.release(block.block_id)
        node.bytes_written += replica.num_bytes - had_bytes
        log.debug("stored %s from %s (%s)", replica.record, request.client or "?", ctx.peer)
        await node.offer_of(block.block_id).report_received(replica.record)
        return WriteBlockResponse(replica.record, node.address)

    async def _drop_rbw(self, block_id: int) -> None:
        """A new write of a block this node holds in state rbw (claimed by the caller):
        the partial replica goes first (its data file has the writer's name)."""
        storage = self.node.storage
        replica = storage.get(block_id)
        if replica is not None and not replica.finalized:
            storage.take(block_id)
            await in_thread(storage.delete_files, [replica])

    async def read_block(self, ctx: CallContext, request: ReadBlockRequest) -> Download:
        node = self.node
        block = request.block
        await node.check_token(request.token, block.block_id, "r")
        replica = node.storage.get(block.block_id)
        if (replica is None or replica.corrupt
                or not (replica.finalized or replica.appending)
                or replica.genstamp != block.genstamp):
            raise BlockNotFound(f"no replica of block {block.block_id} genstamp "
                                f"{block.genstamp} here")
        offset = request.offset
        length = replica.num_bytes - offset if request.length == -1 else request.length
        if not (0 <= offset <= replica.num_bytes and 0 <= length <= replica.num_bytes - offset):
            raise InvalidArgument(
                f"block {block.block_id} has {replica.num_bytes} bytes: cannot read "
                f"{request.length} from offset {offset}"
            )
        reader = node.open_replica(replica, offset, length)
        node.bytes_read += length  # (xdfs_datanode_read_bytes: served by block reads)
        stream = PieceStream(reader, node.on_corrupt, node.transfers, node.syncs)
        return Download(ReadBlockHead(replica.record, offset, length), stream)

    async def init_replica_recovery(
        self, ctx: CallContext, request: InitReplicaRecoveryRequest
    ) -> ReplicaRecoveryInfo:
        await self.node.check_token(request.token, request.block.block_id, "w")
        return await self.node.block_recovery.init_replica(
            request.block, request.recovery_genstamp
        )

    async def update_replica_under_recovery(
        self, ctx: CallContext, request: UpdateReplicaRequest
    ) -> WriteBlockResponse:
        await self.node.check_token(request.token, request.block_id, "w")
        replica: Replica = await self.node.block_recovery.update_replica(
            request.block_id, request.recovery_genstamp, request.length
        )
        return WriteBlockResponse(replica.record, self.node.address)

    def datanode_info(self, ctx: CallContext, request: Empty) -> DataNodeInfoResponse:
        return self.node.info()
