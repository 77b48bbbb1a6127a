"""The block manager in HA (pure core): a standby's warm map, and the first moments after
a failover (docs/architecture.md, "HA").

DataNodes report to the standby as to the active, so its block map is warm when it takes
over. While **standby** it builds the map and decides nothing: reports about blocks it
has not tailed yet wait in :class:`~.pending_messages.PendingMessages`, its heartbeat
answers carry no command (whatever the replication monitor queued is dropped), and every
deletion decision is postponed (``ReplicationMonitor.deletions_held``).

Just **after becoming active** its map may still be stale: a DataNode may have deleted a
replica at the old active's command and its report of that may not have reached us. A
NameNode never deletes a replica it cannot prove obsolete, so the decisions that delete
(excess, corrupt, orphan and left-over replicas) stay postponed until every DataNode that
was live at the failover has sent a heartbeat to us since (a DataNode sends its queued
incremental reports before each heartbeat), as HDFS postpones its "misreplicated blocks"
until each DataNode has heartbeated after a failover. Copies of under-replicated blocks are
not held back: an extra copy destroys nothing.
"""

from __future__ import annotations

from xdfs.namenode.blocks.block_state import block_state, from_the_future
from xdfs.namenode.blocks.datanodes import DataNode, DataNodeManager
from xdfs.namenode.blocks.pending_messages import PendingMessage, PendingMessages
from xdfs.namenode.blocks.replication import ReplicationMonitor
from xdfs.namenode.namespace.tree import Namespace
from xdfs.protocol.blocks import BlockRecord


def ahead_of(ns: Namespace, record: BlockRecord) -> bool:
    """A replica the namespace cannot judge yet: its block, or its generation stamp, is
    newer than what was tailed."""
    if from_the_future(ns, record):
        return True
    state = block_state(ns, record.block_id)
    return state is not None and record.genstamp > state.record.genstamp


class HaView:
    def __init__(self, replication: ReplicationMonitor) -> None:
        self.replication = replication
        self.standby = False
        self.pending = PendingMessages()
        self._stale: set[str] = set()  # live at the failover, no heartbeat to us since

    def stale_nodes(self) -> list[str]:
        return sorted(self._stale)

    def hold(self, ns: Namespace, node: DataNode, record: BlockRecord, *,
             rbw: bool = False) -> bool:
        """A standby queues a report it cannot judge yet (True: queued)."""
        if not self.standby or not ahead_of(ns, record):
            return False
        self.pending.queue(node.node_id, record, rbw=rbw)
        return True

    def ready(self, ns: Namespace) -> list[PendingMessage]:
        """Queued reports to process now (all of them once active)."""
        if self.standby:
            return self.pending.take_ready(lambda record: not ahead_of(ns, record))
        return self.pending.take_ready(lambda record: True)

    def heartbeat(self, node: DataNode) -> bool:
        """A node heartbeated; True when the answer must carry no command (standby)."""
        if self.standby:
            _drop_commands(node)
            return True
        self._stale.discard(node.node_id)
        self.replication.deletions_held = bool(self._stale)
        return False

    def node_dead(self, node_id: str) -> None:
        self.pending.forget_node(node_id)
        if not self.standby:
            self._stale.discard(node_id)
            self.replication.deletions_held = bool(self._stale)

    def become_standby(self, datanodes: DataNodeManager) -> None:
        self.standby = True
        self.replication.deletions_held = True
        self._stale.clear()
        for node in datanodes:
            _drop_commands(node)

    def become_active(self, datanodes: DataNodeManager) -> None:
        self.standby = False
        for node in datanodes:
            _drop_commands(node)  # computed on a standby's view
        self._stale = {node.node_id for node in datanodes.live_nodes()}
        self.replication.deletions_held = bool(self._stale)


def _drop_commands(node: DataNode) -> None:
    node.replicate.clear()
    node.deletions.clear()
    node.deleting.clear()
    node.recover.clear()

