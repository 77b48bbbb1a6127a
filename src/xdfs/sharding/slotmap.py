"""The slot map: which shard owns each slot, at which epoch (pure).

A :class:`SlotMap` is immutable: sorted, non-overlapping ranges ``(first, last, shard)``
covering every slot exactly once, with an epoch that every change raises by one. It is
validated whole on construction and on decode (:class:`~xdfs.errors.SlotMapInvalid`), so a
half-written or hand-edited map is never used. Adjacent ranges of one shard are merged, so
two maps with the same owners compare equal.

The planner moves the fewest slots: :func:`plan_rebalance` gives every shard its even share
(``SLOT_COUNT // n``, the ``SLOT_COUNT % n`` largest holders keeping one more) and moves
only the surplus, from the top of each surplus shard's ranges, never ``slot % n``.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import msgspec

from xdfs.errors import ShardingError, SlotMapInvalid
from xdfs.sharding.slots import SLOT_COUNT


class SlotRange(msgspec.Struct, frozen=True, array_like=True):
    first: int
    last: int  # inclusive
    shard: str

    @property
    def count(self) -> int:
        return self.last - self.first + 1


class _Wire(msgspec.Struct, frozen=True):
    """The map as stored in ZooKeeper (JSON, readable with ``zkCli get``)."""

    epoch: int
    ranges: list[SlotRange]


@dataclass(frozen=True)
class SlotMove:
    """Slots ``first..last`` (inclusive) go from ``source`` to ``target``."""

    first: int
    last: int
    source: str
    target: str

    @property
    def count(self) -> int:
        return self.last - self.first + 1


class SlotMap:
    __slots__ = ("_firsts", "epoch", "ranges")

    def __init__(self, epoch: int, ranges: Iterable[SlotRange]) -> None:
        self.epoch = epoch
        self.ranges: tuple[SlotRange, ...] = _merged(_validated(epoch, list(ranges)))
        self._firsts = [r.first for r in self.ranges]

    def owner(self, slot: int) -> str:
        if not 0 <= slot < SLOT_COUNT:
            raise ShardingError(f"slot {slot} is outside 0..{SLOT_COUNT - 1}")
        return self.ranges[bisect.bisect_right(self._firsts, slot) - 1].shard

    def shards(self) -> list[str]:
        return sorted({r.shard for r in self.ranges})

    def counts(self) -> dict[str, int]:
        """Slots held per shard."""
        held: dict[str, int] = {}
        for r in self.ranges:
            held[r.shard] = held.get(r.shard, 0) + r.count
        return held

    def with_moves(self, moves: Iterable[SlotMove]) -> SlotMap:
        """The map after ``moves``, at epoch + 1. ShardingError when a move's source does not
        own all its slots (a plan made on another map)."""
        owners = self._owners()
        for move in moves:
            if not 0 <= move.first <= move.last < SLOT_COUNT or not move.target:
                raise ShardingError(f"bad slot move {move}")
            for slot in range(move.first, move.last + 1):
                if owners[slot] != move.source:
                    raise ShardingError(
                        f"slot {slot} is owned by {owners[slot]}, not {move.source} "
                        f"(map epoch {self.epoch})")
                owners[slot] = move.target
        return SlotMap(self.epoch + 1, _ranges_of(owners))

    def _owners(self) -> list[str]:
        owners: list[str] = []
        for r in self.ranges:
            owners.extend([r.shard] * r.count)
        return owners

    def encode(self) -> bytes:
        return msgspec.json.encode(_Wire(self.epoch, list(self.ranges)))

    @classmethod
    def decode(cls, data: bytes) -> SlotMap:
        try:
            wire = msgspec.json.decode(data, type=_Wire)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            raise SlotMapInvalid(f"slot map does not decode: {e}") from None
        return cls(wire.epoch, wire.ranges)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SlotMap):
            return NotImplemented
        return self.epoch == other.epoch and self.ranges == other.ranges

    def __hash__(self) -> int:
        return hash((self.epoch, self.ranges))

    def __repr__(self) -> str:
        return f"SlotMap(epoch={self.epoch}, ranges={len(self.ranges)}, counts={self.counts()})"


def _validated(epoch: int, ranges: list[SlotRange]) -> list[SlotRange]:
    if epoch < 0:
        raise SlotMapInvalid(f"slot map epoch {epoch} is negative")
    if not ranges:
        raise SlotMapInvalid("slot map has no ranges")
    expected = 0
    for r in ranges:
        if not r.shard:
            raise SlotMapInvalid(f"slot range {r.first}-{r.last} has no shard")
        if r.first != expected or r.last < r.first:
            raise SlotMapInvalid(
                f"slot range {r.first}-{r.last} does not continue at slot {expected} "
                "(ranges must be sorted, non-overlapping and cover every slot)")
        expected = r.last + 1
    if expected != SLOT_COUNT:
        raise SlotMapInvalid(f"slot map ends at slot {expected - 1}, not {SLOT_COUNT - 1}")
    return ranges


def _merged(ranges: list[SlotRange]) -> tuple[SlotRange, ...]:
    out: list[SlotRange] = []
    for r in ranges:
        if out and out[-1].shard == r.shard:
            out[-1] = SlotRange(out[-1].first, r.last, r.shard)
        else:
            out.append(r)
    return tuple(out)


def _ranges_of(owners: Sequence[str]) -> list[SlotRange]:
    ranges: list[SlotRange] = []
    start = 0
    for slot in range(1, len(owners) + 1):
        if slot == len(owners) or owners[slot] != owners[start]:
            ranges.append(SlotRange(start, slot - 1, owners[start]))
            start = slot
    return ranges


def _checked_ids(shard_ids: Sequence[str]) -> list[str]:
    ids = list(shard_ids)
    if not ids:
        raise ShardingError("a slot map needs at least one shard")
    if len(set(ids)) != len(ids) or not all(ids):
        raise ShardingError(f"shard ids must be distinct and non-empty: {ids}")
    if len(ids) > SLOT_COUNT:
        raise ShardingError(f"more shards ({len(ids)}) than slots ({SLOT_COUNT})")
    return ids


def initial_map(shard_ids: Sequence[str]) -> SlotMap:
    """Contiguous, even ranges in the order given, at epoch 1."""
    ids = _checked_ids(shard_ids)
    base, extra = divmod(SLOT_COUNT, len(ids))
    ranges = []
    first = 0
    for i, shard in enumerate(ids):
        count = base + (1 if i < extra else 0)
        ranges.append(SlotRange(first, first + count - 1, shard))
        first += count
    return SlotMap(1, ranges)


def even_targets(held: dict[str, int], shard_ids: Sequence[str]) -> dict[str, int]:
    """Each shard's share: ``SLOT_COUNT // n``, one more for the ``SLOT_COUNT % n`` shards
    holding the most now (so the fewest slots move); shards not in ``shard_ids``: 0."""
    ids = _checked_ids(shard_ids)
    base, extra = divmod(SLOT_COUNT, len(ids))
    by_load = sorted(ids, key=lambda s: (-held.get(s, 0), s))
    targets = {s: 0 for s in held}
    targets.update({s: base + (1 if i < extra else 0) for i, s in enumerate(by_load)})
    return targets


def plan_rebalance(slot_map: SlotMap, shard_ids: Sequence[str]) -> list[SlotMove]:
    """The fewest slot moves that leave every shard of ``shard_ids`` within one slot of
    even and every other shard (leaving) with none: the sum of the surpluses."""
    held = slot_map.counts()
    targets = even_targets(held, shard_ids)
    surplus = {s: held.get(s, 0) - t for s, t in targets.items() if held.get(s, 0) > t}
    wanting = [(s, t - held.get(s, 0)) for s, t in sorted(targets.items())
               if held.get(s, 0) < t]
    moves: list[SlotMove] = []
    for r in reversed(slot_map.ranges):  # give away from the top of each surplus shard
        last = r.last
        while surplus.get(r.shard, 0) > 0 and last >= r.first:
            target, wanted = wanting[-1]
            n = min(surplus[r.shard], wanted, last - r.first + 1)
            moves.append(SlotMove(last - n + 1, last, r.shard, target))
            last -= n
            surplus[r.shard] -= n
            if wanted == n:
                wanting.pop()
            else:
                wanting[-1] = (target, wanted - n)
    return moves
