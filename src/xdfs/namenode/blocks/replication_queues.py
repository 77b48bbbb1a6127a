"""The replication monitor's queues (pure core; the monitor is in replication.py).

* :class:`NeededReplications`: blocks with fewer live good replicas than their file wants,
  by priority: the fewer live replicas, the sooner (1 left, 2 left, more). Events put
  blocks in and take them out (node death, replicas added or lost, setrep, file
  completion), so a tick never scans the namespace. A block the scheduler cannot serve now
  goes back to the end of its level: every block gets its turn.
* :class:`PendingReplications`: copies asked of a source DataNode and not yet reported by
  their target; each ends when the target reports the replica, or times out and the block
  is looked at again.

Blocks with no live good replica at all are *missing*: nothing can copy them, so the block
manager counts them apart rather than queueing them here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple

#: Priority levels: index = live good replicas - 1, the last level takes every count above.
LEVELS = 3


class NeededReplications:
    def __init__(self) -> None:
        # dicts as ordered sets: O(1) add/remove, iteration in insertion order
        self._levels: list[dict[int, None]] = [{} for _ in range(LEVELS)]
        self._level_of: dict[int, int] = {}

    def add(self, block_id: int, live_replicas: int) -> None:
        """Queue (or re-prioritise) a block that has ``live_replicas`` >= 1 good replicas."""
        assert live_replicas >= 1, "a block without a live replica cannot be copied"
        level = min(live_replicas, LEVELS) - 1
        old = self._level_of.get(block_id)
        if old == level:
            return
        if old is not None:
            del self._levels[old][block_id]
        self._levels[level][block_id] = None
        self._level_of[block_id] = level

    def remove(self, block_id: int) -> None:
        level = self._level_of.pop(block_id, None)
        if level is not None:
            del self._levels[level][block_id]

    def pop_batch(self, limit: int) -> list[int]:
        """Take up to ``limit`` blocks, highest priority first (the caller queues again
        the ones it could not serve: they go to the end of their level)."""
        taken: list[int] = []
        for level in self._levels:
            while level and len(taken) < limit:
                block_id = next(iter(level))
                del level[block_id]
                del self._level_of[block_id]
                taken.append(block_id)
        return taken

    def level_sizes(self) -> list[int]:
        return [len(level) for level in self._levels]

    def __contains__(self, block_id: int) -> bool:
        return block_id in self._level_of

    def __len__(self) -> int:
        return len(self._level_of)

    def __iter__(self) -> Iterator[int]:
        return iter(list(self._level_of))


class PendingTask(NamedTuple):
    block_id: int
    source: str  # node ids
    target: str
    deadline_s: float


class PendingReplications:
    def __init__(self) -> None:
        self._by_block: dict[int, list[PendingTask]] = {}
        self._count = 0

    def add(self, block_id: int, source: str, targets: tuple[str, ...], deadline_s: float) -> None:
        tasks = self._by_block.setdefault(block_id, [])
        for target in targets:
            tasks.append(PendingTask(block_id, source, target, deadline_s))
        self._count += len(targets)

    def count(self, block_id: int) -> int:
        return len(self._by_block.get(block_id, ()))

    def targets(self, block_id: int) -> list[str]:
        return [task.target for task in self._by_block.get(block_id, ())]

    def resolve(self, block_id: int, target: str) -> PendingTask | None:
        """The target reported its replica: that copy is done (None: nothing pending)."""
        taken = self._take(block_id, lambda task: task.target == target)
        return taken[0] if taken else None

    def expire(self, now_s: float) -> list[PendingTask]:
        """Tasks past their deadline (removed). Pending work is bounded by the nodes'
        stream limits, so walking all of it is cheap."""
        expired: list[PendingTask] = []
        for block_id in list(self._by_block):
            expired.extend(self._take(block_id, lambda task: task.deadline_s <= now_s))
        return expired

    def drop_block(self, block_id: int) -> list[PendingTask]:
        return self._take(block_id, lambda task: True)

    def drop_node(self, node_id: str) -> list[PendingTask]:
        """Tasks with ``node_id`` as source or target (it died: they will never finish)."""
        dropped: list[PendingTask] = []
        for block_id in list(self._by_block):
            dropped.extend(
                self._take(block_id, lambda task: node_id in (task.source, task.target))
            )
        return dropped

    def blocks(self) -> list[int]:
        return list(self._by_block)

    def __len__(self) -> int:
        return self._count

    def _take(self, block_id: int, match: Callable[[PendingTask], bool]) -> list[PendingTask]:
        tasks = self._by_block.get(block_id)
        if not tasks:
            return []
        taken = [task for task in tasks if match(task)]
        if taken:
            kept = [task for task in tasks if not match(task)]
            if kept:
                self._by_block[block_id] = kept
            else:
                del self._by_block[block_id]
            self._count -= len(taken)
        return taken
