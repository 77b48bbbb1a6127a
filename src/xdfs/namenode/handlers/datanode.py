"""RPC handlers of the ``namenode.datanode`` service (xdfs.protocol.datanode).

DataNodes authenticate as ``dn/<node id>`` with the cluster's DataNode secret (a superuser
may call this service too; no other user can).
Every handler but ``commit_block_synchronization`` (which logs the file's close and waits
for it to be durable) is a plain function: it runs inline on the event loop and calls the
block manager's pure core, with nothing to wait for. The NameNode answers with commands only
(replicate, delete, fresh block keys, a full report wanted); an unknown or dead node gets
UnknownDataNode and registers and reports again.

A standby NameNode serves this service too (its block map stays warm for a failover,
namenode/blocks/failover.py): its answers say ``ha_state`` "standby" and carry no command
and no block key, it does not end its safe mode from the reports, and it refuses
``commit_block_synchronization`` (Standby: only the active closes files).
"""

from __future__ import annotations

import logging

from xdfs.errors import Standby
from xdfs.namenode.handlers.client import caller
from xdfs.namenode.namesystem import Namesystem
from xdfs.namenode.security.auth import DataNodePrincipal, NameNodeAuth
from xdfs.protocol import datanode as d
from xdfs.protocol.ha import ROLE_ACTIVE, ROLE_STANDBY
from xdfs.rpc.handling import CallContext
from xdfs.rpc.messages import Empty
from xdfs.sharding.ids import shard_of_id

log = logging.getLogger(__name__)


class DataNodeHandlers:
    def __init__(
        self, namesystem: Namesystem, auth: NameNodeAuth, cluster_id: str, namespace_id: int
    ) -> None:
        self.fs = namesystem
        self.blocks = namesystem.blocks
        self.auth = auth
        self.cluster_id = cluster_id
        self.namespace_id = namespace_id

    @property
    def standby(self) -> bool:
        return self.blocks.ha.standby

    @property
    def _ha_state(self) -> str:
        return ROLE_STANDBY if self.standby else ROLE_ACTIVE

    def _datanode(self, ctx: CallContext) -> None:
        if not isinstance(ctx.principal, DataNodePrincipal):
            self.auth.require_superuser(caller(ctx, self.fs), "act as a DataNode")

    def register_datanode(self, ctx: CallContext, req: d.RegisterRequest) -> d.RegisterResponse:
        self._datanode(ctx)
        node = self.blocks.register(req.node_id, req.address, req.storage)
        node.http_address = req.http_address
        log.info(
            "DataNode %s registered at %s (%d bytes free, version %s)",
            req.node_id, req.address, req.storage.free_bytes, req.software_version or "?",
        )
        config = self.fs.config
        return d.RegisterResponse(
            cluster_id=self.cluster_id,
            namespace_id=self.namespace_id,
            heartbeat_interval_s=config.heartbeat_interval_s,
            block_report_batch_max=config.block_report_batch_max,
            full_report_interval_s=config.full_report_interval_s,
            block_keys=[] if self.standby else self.blocks.block_keys(),
            epoch=self.fs.ns.epoch,
            ha_state=self._ha_state,
        )

    def block_report(self, ctx: CallContext, req: d.BlockReportRequest) -> Empty:
        self._datanode(ctx)
        done = self.blocks.block_report(
            req.node_id, req.report_id, req.batch_index, req.batch_count, req.blocks, req.rbw
        )
        if done:
            log.info(
                "full block report of DataNode %s: %d replicas",
                req.node_id, self.blocks.map.node_block_count(req.node_id),
            )
            node = self.blocks.datanodes.get(req.node_id)
            if node is not None and node.future:
                log.warning(
                    "DataNode %s holds %d replica(s) of blocks this NameNode never allocated "
                    "(from a newer NameNode?): kept, not deleted (e.g. blk_%d)",
                    req.node_id, len(node.future), min(node.future),
                )
            if node is not None and node.foreign:
                self._log_foreign(req.node_id, node.foreign)
            self.update_safe_mode()
        return Empty()

    @staticmethod
    def _log_foreign(node_id: str, block_ids: set[int]) -> None:
        log.warning("DataNode %s reported %d replica(s) of another metadata shard's blocks "
                    "(e.g. blk_%d of shard %d): ignored, not deleted (a DataNode reports "
                    "each shard's block pool to that shard only)", node_id, len(block_ids),
                    min(block_ids), shard_of_id(min(block_ids)))

    def heartbeat(self, ctx: CallContext, req: d.HeartbeatRequest) -> d.HeartbeatResponse:
        self._datanode(ctx)
        held = self.blocks.replication.deletions_held
        commands = self.blocks.heartbeat(req.node_id, req.storage, req.transfers_in_progress)
        if held and not self.blocks.replication.deletions_held:
            log.info("every DataNode has heartbeated since the failover: deletions resume")
        return d.HeartbeatResponse(
            replicate=commands.replicate,
            delete=commands.delete,
            block_keys=[] if self.standby else self.blocks.block_keys(),
            send_full_report=commands.send_full_report,
            epoch=self.fs.ns.epoch,
            recover=commands.recover,
            ha_state=self._ha_state,
        )

    def incremental_report(self, ctx: CallContext, req: d.IncrementalReportRequest) -> Empty:
        self._datanode(ctx)
        self.blocks.incremental_report(req.node_id, req.received, req.deleted, req.rbw)
        reported = {r.block_id for r in req.received} | {r.block_id for r in req.rbw}
        node = self.blocks.datanodes.get(req.node_id)
        if node is not None and reported & node.foreign:
            self._log_foreign(req.node_id, reported & node.foreign)
        if self.fs.safe_mode.startup and not self.standby:
            self.update_safe_mode()
        return Empty()

    async def commit_block_synchronization(
        self, ctx: CallContext, req: d.CommitBlockSyncRequest
    ) -> Empty:
        self._datanode(ctx)
        if self.standby:
            raise Standby("commit_block_synchronization: this NameNode is standby")
        await self.fs.commit_block_synchronization(
            req.block, req.recovery_genstamp, req.length, req.delete_block
        )
        log.info(
            "block recovery of block %d committed: genstamp %d, length %d%s (replicas on %s)",
            req.block.block_id, req.recovery_genstamp, req.length,
            ", block dropped" if req.delete_block else "", ", ".join(req.nodes) or "none",
        )
        return Empty()

    def update_safe_mode(self) -> None:
        if self.standby:  # it leaves safe mode once active (server.py)
            return
        message = self.blocks.update_safe_mode()
        if message:
            log.info("%s", message)
