"""Handlers of the ``datanode`` service: block writes (upload), reads (download), info.

Every block access needs a block token the NameNode issued for that block (a write token
also reads). A write is acknowledged only after the replica is finalized (fsynced, in
``finalized/``) and, within ``report_timeout_s``, reported to the NameNode, whose
``complete`` waits for those reports (seed 003).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from xdfs.datanode.replica import ReplicaReader
from xdfs.datanode.transfer import PieceStream, receive_replica
from xdfs.errors import BlockNotFound, CorruptReplica, InvalidArgument
from xdfs.protocol.datanode import (
    DataNodeInfoResponse,
    ReadBlockHead,
    ReadBlockRequest,
    WriteBlockRequest,
    WriteBlockResponse,
)
from xdfs.rpc.messages import Empty
from xdfs.rpc.server import CallContext, Download
from xdfs.rpc.streams import StreamReceiver

if TYPE_CHECKING:
    from xdfs.datanode.server import DataNode

log = logging.getLogger(__name__)


class DataNodeHandlers:
    def __init__(self, node: DataNode) -> None:
        self.node = node

    async def write_block(
        self, ctx: CallContext, request: WriteBlockRequest, chunks: StreamReceiver
    ) -> WriteBlockResponse:
        node = self.node
        block = request.block
        node.check_token(request.token, block.block_id, "w")
        existing = node.storage.get(block.block_id)
        if existing is not None and not existing.corrupt:
            if existing.genstamp == block.genstamp and not node.storage.is_busy(block.block_id):
                # A repeated copy (replication retried, or a writer's retry): same bytes.
                async for _data in chunks:
                    pass
                return WriteBlockResponse(existing.record, node.address)
            if existing.genstamp > block.genstamp:
                raise InvalidArgument(
                    f"block {block.block_id}: genstamp {block.genstamp} is older than the "
                    f"stored replica's {existing.genstamp}"
                )
        node.storage.claim(block.block_id)
        try:
            with node.transfers.track():
                replica = await receive_replica(
                    node.storage, block.block_id, block.genstamp, chunks
                )
        finally:
            node.storage.release(block.block_id)
        log.debug("stored %s from %s (%s)", replica.record, request.client or "?", ctx.peer)
        assert node.actor is not None
        await node.actor.report_received(replica.record)
        return WriteBlockResponse(replica.record, node.address)

    def read_block(self, ctx: CallContext, request: ReadBlockRequest) -> Download:
        node = self.node
        block = request.block
        node.check_token(request.token, block.block_id, "r")
        replica = node.storage.get(block.block_id)
        if replica is None or replica.corrupt or replica.genstamp != block.genstamp:
            raise BlockNotFound(f"no replica of block {block.block_id} genstamp "
                                f"{block.genstamp} here")
        offset = request.offset
        length = replica.num_bytes - offset if request.length == -1 else request.length
        if not (0 <= offset <= replica.num_bytes and 0 <= length <= replica.num_bytes - offset):
            raise InvalidArgument(
                f"block {block.block_id} has {replica.num_bytes} bytes: cannot read "
                f"{request.length} from offset {offset}"
            )
        try:
            reader = ReplicaReader(replica, offset, length, node.config.rpc.stream_chunk_bytes)
        except CorruptReplica as exc:
            node.on_corrupt(replica, exc)
            raise
        stream = PieceStream(reader, node.on_corrupt, node.transfers)
        return Download(ReadBlockHead(replica.record, offset, length), stream)

    def datanode_info(self, ctx: CallContext, request: Empty) -> DataNodeInfoResponse:
        return self.node.info()
