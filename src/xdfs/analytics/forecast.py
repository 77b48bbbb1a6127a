"""Capacity forecast (seed 003's capacity planning, with measured numbers).

Seed 003 plans the NameNode from "10k small files take 1 MB" (about 100 B per file), a
growth of 50k files a day kept online for 6 months, times 3 for business growth, at most
1 GB per NameNode; and the DataNodes from the average file size times the replication over
the same horizon against the disk of one node (500 GB); like the seed, the growth factor
applies to the NameNode's memory, the DataNodes are sized on the measured rate. Here every
input is measured: the bytes per inode of this NameNode's own in-memory namespace, files
and bytes per day from the edits (or the image), the average replication and the
DataNodes' capacity from the block map; the planning constants (horizon, growth factor,
heap and disk per node) are options.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

DAYS_PER_MONTH = 30  # the seed's month


@dataclass(frozen=True)
class PlanningOptions:
    horizon_months: int = 6
    growth_factor: float = 3.0
    namenode_heap_bytes: int = 1 << 30  # seed 003: at most 1 GB per NameNode
    datanode_disk_bytes: int = 500 * 10**9  # seed 003: 500 GB; the block map's wins


@dataclass(frozen=True)
class CurrentState:
    inodes: int
    files: int
    bytes: int  # logical file bytes
    replicated_bytes: int  # bytes x each file's replication
    bytes_per_inode: float
    files_per_day: float
    inodes_per_day: float
    bytes_per_day: float  # logical, net
    history_days: int
    growth_basis: str  # "edits" or "image"
    raw_used_bytes: int  # DataNodes' used bytes (block map), else replicated_bytes
    raw_capacity_bytes: int  # DataNodes' total capacity, 0 when unknown
    datanodes: int  # live DataNodes in the block map, 0 when unknown


@dataclass(frozen=True)
class Forecast:
    avg_replication: float
    raw_bytes_per_day: float
    namenode_memory_bytes: int  # now
    projected_inodes: int  # at the horizon
    projected_namenode_memory_bytes: int
    projected_namenode_memory_with_growth_bytes: int
    namenodes_needed: int
    projected_raw_bytes: int
    datanode_disk_bytes: int
    datanodes_needed: int
    months_until_full: float | None  # None: no capacity known, or no growth

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def forecast(now: CurrentState, plan: PlanningOptions) -> Forecast:
    avg_replication = now.replicated_bytes / now.bytes if now.bytes else 0.0
    raw_per_day = now.bytes_per_day * avg_replication
    days = plan.horizon_months * DAYS_PER_MONTH
    inodes = now.inodes + max(0.0, now.inodes_per_day) * days
    memory = inodes * now.bytes_per_inode
    memory_grown = memory * plan.growth_factor
    raw = now.raw_used_bytes + max(0.0, raw_per_day) * days
    disk = (now.raw_capacity_bytes // now.datanodes if now.datanodes and now.raw_capacity_bytes
            else plan.datanode_disk_bytes)
    free = now.raw_capacity_bytes - now.raw_used_bytes
    months_until_full = (
        free / (raw_per_day * DAYS_PER_MONTH)
        if now.raw_capacity_bytes and raw_per_day > 0 else None
    )
    return Forecast(
        avg_replication=avg_replication,
        raw_bytes_per_day=raw_per_day,
        namenode_memory_bytes=round(now.inodes * now.bytes_per_inode),
        projected_inodes=round(inodes),
        projected_namenode_memory_bytes=round(memory),
        projected_namenode_memory_with_growth_bytes=round(memory_grown),
        namenodes_needed=max(1, math.ceil(memory_grown / plan.namenode_heap_bytes)),
        projected_raw_bytes=round(raw),
        datanode_disk_bytes=disk,
        datanodes_needed=max(1, math.ceil(raw / disk)) if disk else 0,
        months_until_full=months_until_full,
    )


def monthly(now: CurrentState, plan: PlanningOptions) -> list[dict[str, object]]:
    """Month 0..horizon: inodes, NameNode memory, raw disk (without the growth factor)."""
    avg_replication = now.replicated_bytes / now.bytes if now.bytes else 0.0
    out: list[dict[str, object]] = []
    for month in range(plan.horizon_months + 1):
        days = month * DAYS_PER_MONTH
        inodes = now.inodes + max(0.0, now.inodes_per_day) * days
        raw = now.raw_used_bytes + max(0.0, now.bytes_per_day * avg_replication) * days
        out.append({
            "month": month,
            "inodes": round(inodes),
            "namenode_memory_bytes": round(inodes * now.bytes_per_inode),
            "raw_bytes": round(raw),
            "raw_capacity_bytes": now.raw_capacity_bytes,
        })
    return out
