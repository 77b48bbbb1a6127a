"""The ``namenode.sharding`` service (every NameNode): the slot map it routes by.

An unsharded NameNode answers ``shard = ""`` and no ranges: the client then sends every
call to it, as it always has."""

from __future__ import annotations

import msgspec

from xdfs.rpc.service import Method, Service


class SlotMapRequest(msgspec.Struct, frozen=True):
    #: The newest map epoch the client knows: a shard holding an older map re-reads it
    #: from ZooKeeper before answering.
    epoch: int = 0


class ShardInfo(msgspec.Struct, frozen=True):
    shard: str
    address: str
    live: bool  # registered in ZooKeeper right now
    slots: int


class SlotMapResponse(msgspec.Struct, frozen=True):
    shard: str  # the answering shard's id; "" when the NameNode is not sharded
    epoch: int
    #: (first, last inclusive, shard) sorted, covering every slot: SlotRange's wire form
    ranges: list[tuple[int, int, str]]
    shards: list[ShardInfo]
    partition_depth: int = 2
    depth_overrides: dict[str, int] = msgspec.field(default_factory=dict)
    inodes: int = 0  # the answering shard's inode count


GET_SLOT_MAP = Method(
    "get_slot_map", SlotMapRequest, SlotMapResponse, idempotent=True,
    doc="The slot map this shard routes by, the shards' addresses and the partitioning.",
)

SHARDING_SERVICE = Service("namenode.sharding", (GET_SLOT_MAP,))
