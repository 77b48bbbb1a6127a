"""Reports a standby NameNode cannot place yet (HDFS's PendingDataNodeMessages); pure.

DataNodes report to the standby as to the active, but the standby learns of blocks only
by tailing the journal, a little behind the active: a DataNode can report a replica of a
block whose allocation (or whose new generation stamp, after an append or a recovery) the
standby has not tailed yet. Taken as is, such a replica would look like an orphan or a
corrupt one. The standby queues the report instead, keyed by block id and node, and
offers it again after each tailed batch (and once more at ``transition_to_active``, after
the final catch-up): :meth:`PendingMessages.take_ready` hands back those the namespace
can now judge, in arrival order.

The newest news of a replica wins: a later report about the same (block, node) replaces
the queued one, a deletion drops it, and a node that registers again or dies loses all its
queued messages (its next full report says everything again).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

from xdfs.protocol.blocks import BlockRecord


class PendingMessage(NamedTuple):
    node_id: str
    record: BlockRecord
    rbw: bool  # True: a replica in state rbw; False: a finalized one


class PendingMessages:
    def __init__(self) -> None:
        # block id -> node id -> message; dicts keep arrival order (a replaced message
        # moves to the end: it is the newest news)
        self._by_block: dict[int, dict[str, PendingMessage]] = {}

    def __len__(self) -> int:
        return sum(len(messages) for messages in self._by_block.values())

    def queue(self, node_id: str, record: BlockRecord, *, rbw: bool = False) -> None:
        messages = self._by_block.setdefault(record.block_id, {})
        messages.pop(node_id, None)
        messages[node_id] = PendingMessage(node_id, record, rbw)

    def forget(self, node_id: str, block_id: int) -> None:
        """The node deleted its replica: whatever was queued about it is obsolete."""
        messages = self._by_block.get(block_id)
        if messages is not None:
            messages.pop(node_id, None)
            if not messages:
                del self._by_block[block_id]

    def forget_node(self, node_id: str, keep: Iterable[int] | None = None) -> None:
        """Drop the node's messages (``keep``: except about these block ids, the ones its
        latest full report still lists)."""
        kept = set(keep) if keep is not None else set()
        for block_id in list(self._by_block):
            if block_id not in kept:
                self.forget(node_id, block_id)

    def take_ready(self, ready: Callable[[BlockRecord], bool]) -> list[PendingMessage]:
        """Remove and return the messages whose record ``ready`` accepts, oldest block
        first; the others stay queued."""
        taken: list[PendingMessage] = []
        for block_id in list(self._by_block):
            messages = self._by_block[block_id]
            for node_id, message in list(messages.items()):
                if ready(message.record):
                    taken.append(message)
                    del messages[node_id]
            if not messages:
                del self._by_block[block_id]
        return taken

    def block_ids(self) -> list[int]:
        return list(self._by_block)
