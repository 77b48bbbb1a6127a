"""Which shard a request belongs to (pure): shared by the shards' guard and the client's
router so both read a request's paths, and decide, the same way.

A request names its paths in the fields :data:`PATH_FIELDS` (``path``, a rename's ``src``
and ``dst``, a concat's ``target`` and ``sources``, a restore's ``trash_path``); the first
one routes it. A path in the top layer (``/``, ``/user``) has no slot: every shard holds it,
so a read of it is served by any shard, and a change of it needs every shard
(:class:`~xdfs.errors.TopLayerChange` until the controller's two-phase commit does it).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from xdfs.errors import CrossShardRename, NoSlotMap, TopLayerChange, WrongShard
from xdfs.sharding.slotmap import SlotMap
from xdfs.sharding.slots import Partitioning

#: The request fields that hold a path, in routing order.
PATH_FIELDS = ("path", "src", "target", "trash_path", "dst", "sources")

#: Client calls that only read: served by any shard for a top-layer path.
READS = frozenset({"stat", "list", "content_summary", "access", "block_locations", "fsck"})


def request_paths(request: object) -> Iterator[str]:
    """Every path a request names, the routing one first (empty fields are none)."""
    for name in PATH_FIELDS:
        value = getattr(request, name, None)
        if isinstance(value, str) and value:
            yield value
        elif isinstance(value, list):
            yield from (v for v in value if isinstance(v, str))


def routing_path(request: object) -> str | None:
    """The path a request is routed by; None for a call that names none (login, status)."""
    return next(request_paths(request), None)


@dataclass(frozen=True)
class Routing:
    """A slot map with the partitioning it is read with."""

    partitioning: Partitioning
    slot_map: SlotMap

    def owner_of(self, path: str) -> str | None:
        """The shard owning ``path``'s slot; None for the top layer (every shard)."""
        slot = self.partitioning.slot_of(path)
        return None if slot is None else self.slot_map.owner(slot)

    def check(self, shard: str, method: str, request: object) -> None:
        """Refuse, with one typed error, a request shard ``shard`` may not serve: a path of
        another shard's slot (WrongShard, naming the owner of the routing path), a change of
        the top layer (TopLayerChange), a second path on another shard (CrossShardRename)."""
        paths = list(request_paths(request))
        if not paths:
            return
        first = self.partitioning.slot_of(paths[0])
        if first is None:
            if method not in READS:
                raise TopLayerChange(
                    f"{method} {paths[0]}: {paths[0]} is a top-layer directory (above "
                    f"partition depth {self.partitioning.depth}, held by every shard); "
                    "changing it needs the controller's two-phase commit over all shards, "
                    "which this version does not offer yet")
            return
        owner = self.slot_map.owner(first)
        if owner != shard:
            raise WrongShard.of(first, owner, self.slot_map.epoch)
        for other in paths[1:]:
            slot = self.partitioning.slot_of(other)
            if slot is None:
                raise TopLayerChange(f"{method}: {other} is a top-layer directory, held by "
                                     "every shard; it cannot be the target of one shard's "
                                     "change")
            if self.slot_map.owner(slot) != shard:
                raise CrossShardRename(
                    f"{method} {paths[0]} -> {other}: the paths lie in partitions of "
                    f"different shards ({shard} and {self.slot_map.owner(slot)}); a "
                    "cross-shard rename needs the two-phase rename, not offered yet")


def check_trash(routing: Routing, shard: str, path: str, trash: str) -> None:
    """A delete of ``path`` to the trash at ``trash`` (the user's ``/user/<u>/.Trash``) on
    shard ``shard``: refused with CrossShardRename when the trash is another shard's (the
    move to the trash is a rename; a trash inside each partition is the next step)."""
    owner = routing.owner_of(trash)
    if owner is not None and owner != shard and not path.startswith(trash + "/"):
        raise CrossShardRename(
            f"delete {path}: its trash {trash} is on shard {owner}, this path on shard "
            f"{shard}; delete it with skip_trash (-skipTrash), the trash cannot cross "
            "shards yet")


def require_map(slot_map: SlotMap | None) -> SlotMap:
    if slot_map is None:
        raise NoSlotMap("this shard has no slot map yet: the cluster's shards have not all "
                        "registered, or the initial map is not written (xdfs admin -shards)")
    return slot_map


def slot_ranges(slot_map: SlotMap) -> Mapping[str, list[tuple[int, int]]]:
    """Shard -> its ranges (first, last inclusive), for reports."""
    held: dict[str, list[tuple[int, int]]] = {}
    for r in slot_map.ranges:
        held.setdefault(r.shard, []).append((r.first, r.last))
    return held
