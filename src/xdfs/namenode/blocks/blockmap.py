"""Where each block's replicas are (pure core): block -> replicas, node -> blocks.

Only blocks of the namespace have entries (orphans are never recorded), and only live
DataNodes hold replicas here: a dead node's replicas are dropped at once. A replica is
*good* when its flags are 0; otherwise it is corrupt for the reasons its flags name. The
map keeps two counts up to date on every change, so safe mode and reports never scan it:
how many blocks have at least ``min_replication`` good replicas, and which blocks have a
corrupt replica.

Replicas in state *rbw* (being written, or kept by a DataNode after the writer's stream
broke) are kept apart: they are never good copies of a block, only what a block recovery
works with, or leftovers to delete once the block is complete. A node holds one replica of
a block, in one of the two states.

:class:`FullReports` assembles a node's full block report from its batches: the replicas
a node no longer has can only be known once every batch of one report has arrived.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from xdfs.errors import InvalidArgument

#: Corruption reasons (a replica's flags).
BAD_GENSTAMP = 1  # generation stamp differs from the namespace's
BAD_LENGTH = 2  # length differs from the committed length of a complete block
REPORTED_BAD = 4  # a reader or the DataNode's scanner found a checksum error


class Replica:
    __slots__ = ("flags", "genstamp", "node_id", "num_bytes")

    def __init__(self, node_id: str, num_bytes: int, genstamp: int, flags: int) -> None:
        self.node_id = node_id
        self.num_bytes = num_bytes
        self.genstamp = genstamp
        self.flags = flags

    @property
    def corrupt(self) -> bool:
        return self.flags != 0

    def __repr__(self) -> str:
        return f"Replica({self.node_id!r}, {self.num_bytes}, {self.genstamp}, {self.flags})"


class BlockMap:
    def __init__(self, min_replication: int) -> None:
        self.min_replication = min_replication
        self._replicas: dict[int, list[Replica]] = {}
        self._by_node: dict[str, set[int]] = {}
        #: Blocks with at least min_replication good replicas (for safe mode).
        self.safe_blocks = 0
        #: Block -> number of its corrupt replicas (only blocks that have one).
        self._corrupt: dict[int, int] = {}
        # Replicas in state rbw (flags always 0), indexed the same way.
        self._rbw: dict[int, list[Replica]] = {}
        self._rbw_by_node: dict[str, set[int]] = {}

    # --- queries -------------------------------------------------------------------------

    def replicas(self, block_id: int) -> Sequence[Replica]:
        """The block's replicas (read-only: change them through this class)."""
        return self._replicas.get(block_id, ())

    def replica(self, block_id: int, node_id: str) -> Replica | None:
        for replica in self._replicas.get(block_id, ()):
            if replica.node_id == node_id:
                return replica
        return None

    def good_count(self, block_id: int) -> int:
        return sum(1 for r in self._replicas.get(block_id, ()) if not r.flags)

    def node_blocks(self, node_id: str) -> set[int]:
        """A copy of the block ids ``node_id`` holds (finalized)."""
        return set(self._by_node.get(node_id, ()))

    def rbw_replicas(self, block_id: int) -> Sequence[Replica]:
        """The block's replicas in state rbw (read-only)."""
        return self._rbw.get(block_id, ())

    def node_rbw_blocks(self, node_id: str) -> set[int]:
        """A copy of the block ids ``node_id`` holds in state rbw."""
        return set(self._rbw_by_node.get(node_id, ()))

    def node_block_count(self, node_id: str) -> int:
        return len(self._by_node.get(node_id, ()))

    def corrupt_block_count(self) -> int:
        return len(self._corrupt)

    def __contains__(self, block_id: int) -> bool:
        return block_id in self._replicas

    # --- changes -------------------------------------------------------------------------

    def put(self, block_id: int, node_id: str, num_bytes: int, genstamp: int, flags: int) -> None:
        """Record (or replace) ``node_id``'s replica. A checksum failure reported for the
        same replica (same genstamp and length) stays recorded: reporting it again does
        not make it good."""
        before = self._summary(block_id)
        replicas = self._replicas.setdefault(block_id, [])
        for index, old in enumerate(replicas):
            if old.node_id == node_id:
                if (old.genstamp, old.num_bytes) == (genstamp, num_bytes):
                    flags |= old.flags & REPORTED_BAD
                replicas[index] = Replica(node_id, num_bytes, genstamp, flags)
                break
        else:
            replicas.append(Replica(node_id, num_bytes, genstamp, flags))
            self._by_node.setdefault(node_id, set()).add(block_id)
        self._changed(block_id, before)
        self.remove_rbw(block_id, node_id)  # one replica per node: it is finalized now

    def set_flags(self, block_id: int, node_id: str, flags: int) -> bool:
        """Change one replica's flags; False when the node holds no replica of the block."""
        replica = self.replica(block_id, node_id)
        if replica is None:
            return False
        before = self._summary(block_id)
        replica.flags = flags
        self._changed(block_id, before)
        return True

    def remove(self, block_id: int, node_id: str) -> Replica | None:
        """Forget ``node_id``'s finalized replica of the block (None: it had none)."""
        before = self._summary(block_id)
        replica = _take(self._replicas, self._by_node, block_id, node_id)
        if replica is not None:
            self._changed(block_id, before)
        return replica

    def put_rbw(self, block_id: int, node_id: str, num_bytes: int, genstamp: int) -> None:
        """Record ``node_id``'s replica in state rbw (the caller removed any finalized one)."""
        _take(self._rbw, self._rbw_by_node, block_id, node_id)
        self._rbw.setdefault(block_id, []).append(Replica(node_id, num_bytes, genstamp, 0))
        self._rbw_by_node.setdefault(node_id, set()).add(block_id)

    def remove_rbw(self, block_id: int, node_id: str) -> Replica | None:
        return _take(self._rbw, self._rbw_by_node, block_id, node_id)

    def drop_block(self, block_id: int) -> list[Replica]:
        """Forget the block (it left the namespace); returns the replicas it had, rbw ones
        included."""
        before = self._summary(block_id)
        replicas = self._replicas.pop(block_id, [])
        for replica in replicas:
            _forget_on_node(self._by_node, replica.node_id, block_id)
        self._changed(block_id, before)
        rbw = self._rbw.pop(block_id, [])
        for replica in rbw:
            _forget_on_node(self._rbw_by_node, replica.node_id, block_id)
        return replicas + rbw

    def drop_node(self, node_id: str) -> list[int]:
        """Forget every replica of ``node_id``; returns the blocks that lost a finalized
        one."""
        for block_id in list(self._rbw_by_node.get(node_id, ())):
            self.remove_rbw(block_id, node_id)
        block_ids = list(self._by_node.get(node_id, ()))
        for block_id in block_ids:
            self.remove(block_id, node_id)
        self._by_node.pop(node_id, None)
        return block_ids

    # --- bookkeeping ---------------------------------------------------------------------

    def _summary(self, block_id: int) -> tuple[bool, int]:
        replicas = self._replicas.get(block_id, ())
        good = sum(1 for r in replicas if not r.flags)
        return good >= self.min_replication, len(replicas) - good

    def _changed(self, block_id: int, before: tuple[bool, int]) -> None:
        was_safe, _ = before
        is_safe, corrupt = self._summary(block_id)
        self.safe_blocks += int(is_safe) - int(was_safe)
        if corrupt:
            self._corrupt[block_id] = corrupt
        else:
            self._corrupt.pop(block_id, None)
        assert self.safe_blocks >= 0


def _take(
    replicas_of: dict[int, list[Replica]], by_node: dict[str, set[int]], block_id: int,
    node_id: str,
) -> Replica | None:
    """Remove ``node_id``'s replica of ``block_id`` from one of the map's two indexes."""
    replicas = replicas_of.get(block_id)
    if not replicas:
        return None
    for index, replica in enumerate(replicas):
        if replica.node_id == node_id:
            del replicas[index]
            break
    else:
        return None
    _forget_on_node(by_node, node_id, block_id)
    if not replicas:
        del replicas_of[block_id]
    return replica


def _forget_on_node(by_node: dict[str, set[int]], node_id: str, block_id: int) -> None:
    held = by_node.get(node_id)
    if held is not None:
        held.discard(block_id)
        if not held:
            del by_node[node_id]


@dataclass
class _Assembly:
    report_id: int
    batch_count: int
    received: set[int] = field(default_factory=set)
    seen: set[int] = field(default_factory=set)


class FullReports:
    """Full block reports being assembled, one per node. Batches may come in any order and
    be repeated (a retried call); a new ``report_id`` abandons the previous report."""

    def __init__(self) -> None:
        self._open: dict[str, _Assembly] = {}

    def add_batch(
        self, node_id: str, report_id: int, batch_index: int, batch_count: int,
        block_ids: Iterable[int],
    ) -> set[int] | None:
        """Every block id of the report once its last batch is in, else None."""
        if batch_count < 1 or not 0 <= batch_index < batch_count:
            raise InvalidArgument(
                f"block report batch {batch_index} of {batch_count} is out of range"
            )
        assembly = self._open.get(node_id)
        if assembly is None or (assembly.report_id, assembly.batch_count) != (
            report_id, batch_count,
        ):
            assembly = self._open[node_id] = _Assembly(report_id, batch_count)
        assembly.received.add(batch_index)
        assembly.seen.update(block_ids)
        if len(assembly.received) < batch_count:
            return None
        del self._open[node_id]
        return assembly.seen

    def note_received(self, node_id: str, block_id: int) -> None:
        """A replica reported incrementally while a full report is open: keep it when the
        report ends (the batch that would list it may have been sent before it existed)."""
        assembly = self._open.get(node_id)
        if assembly is not None:
            assembly.seen.add(block_id)

    def note_deleted(self, node_id: str, block_id: int) -> None:
        assembly = self._open.get(node_id)
        if assembly is not None:
            assembly.seen.discard(block_id)

    def forget(self, node_id: str) -> None:
        self._open.pop(node_id, None)

    def is_open(self, node_id: str) -> bool:
        return node_id in self._open
