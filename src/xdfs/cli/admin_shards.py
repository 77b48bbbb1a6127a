"""``xdfs admin -shards``: the slot map as a table."""

from __future__ import annotations

from xdfs.client.shards import slot_map_of
from xdfs.protocol.sharding import SlotMapResponse
from xdfs.sharding.slots import SLOT_COUNT


def shard_rows(answers: list[SlotMapResponse]) -> list[str]:
    """One line per shard (shard, address, state, slot ranges, slots, inodes), after a
    line naming the map's epoch; an unsharded NameNode says so."""
    first = answers[0]
    if not first.shard:
        return [f"not sharded: one NameNode holds the whole namespace ({first.inodes} inodes)"]
    slot_map = slot_map_of(first)
    inodes = {answer.shard: answer.inodes for answer in answers}
    ranges: dict[str, list[str]] = {}
    for r in slot_map.ranges:
        ranges.setdefault(r.shard, []).append(f"{r.first}-{r.last}")
    lines = [f"slot map epoch {slot_map.epoch}: {SLOT_COUNT} slots over "
             f"{len(slot_map.shards())} shards (partition depth {first.partition_depth})",
             f"{'shard':<6} {'address':<22} {'state':<5} {'slots':>6} {'inodes':>9}  ranges"]
    for info in first.shards:
        shown = str(inodes[info.shard]) if info.shard in inodes else "?"
        lines.append(f"{info.shard:<6} {info.address:<22} {'up' if info.live else 'down':<5} "
                     f"{info.slots:>6} {shown:>9}  {','.join(ranges.get(info.shard, []))}")
    return lines
