"""The headline findings of an ``xdfs analyze`` report: the few facts an operator should read
first, most urgent first (top of the HTML, ``headlines`` in summary.json, the CLI output).

Pure: computed from the JSON summary alone. Urgency: unreadable data (missing blocks), then
data at risk (corrupt replicas, under-replication) and capacity running out, then the
shape of the namespace (small files, the largest user); a healthy block map is said too.
"""

from __future__ import annotations

from typing import Any

from xdfs.analytics.charts import human_bytes

#: How many findings a report leads with.
HEADLINES_MAX = 5
#: Beyond this many months, "full in N months" is said as "more than N/12 years".
LONG_TERM_MONTHS = 120
#: A small-file share above this is a problem rather than a fact.
SMALL_SHARE_PROBLEM = 0.5

_URGENT, _AT_RISK, _CAPACITY, _SHAPE, _FINE = range(5)


def headlines(summary: dict[str, Any], most: int = HEADLINES_MAX) -> list[str]:
    found = [
        *_replication(summary.get("replication")),
        *_capacity(summary.get("capacity")),
        *_small_files(summary.get("small_files")),
        *_top_user(summary.get("usage"), summary.get("namespace")),
    ]
    return [text for _rank, text in sorted(found, key=lambda item: item[0])][:most]


def _replication(rows: dict[str, Any] | None) -> list[tuple[int, str]]:
    if not rows:
        return [(_FINE, "Replication was not checked: no block map (--blocks DIR, or --fs).")]
    blocks = rows.get("blocks") or 0
    missing = rows.get("missing") or 0
    under = rows.get("under_replicated") or 0
    corrupt = rows.get("blocks_with_corrupt") or 0
    out: list[tuple[int, str]] = []
    if missing:
        out.append((_URGENT, f"{missing:,} of {blocks:,} blocks are missing (no live replica): "
                             "their files cannot be read (see replication_problems)."))
    if under or corrupt:
        out.append((_AT_RISK, f"{under:,} blocks are under-replicated and {corrupt:,} have "
                              f"corrupt replicas, of {blocks:,}."))
    if not (missing or under or corrupt):
        out.append((_FINE, f"All {blocks:,} blocks have their expected live replicas."))
    orphans = rows.get("orphan_blocks") or 0
    if orphans:
        out.append((_SHAPE, f"{orphans:,} blocks on DataNodes belong to no file of this "
                            "namespace (newer than the image, or being deleted)."))
    return out


def _capacity(capacity: dict[str, Any] | None) -> list[tuple[int, str]]:
    if not capacity:
        return []
    result, plan = capacity["forecast"], capacity["planning"]
    horizon = plan["horizon_months"]
    namenodes = result["namenodes_needed"]
    text = (f"In {horizon} months (x{plan['growth_factor']:g} growth) the namespace needs "
            f"{human_bytes(result['projected_namenode_memory_with_growth_bytes'])} of "
            f"NameNode memory ({namenodes} NameNode(s)) and "
            f"{result['datanodes_needed']} DataNode(s)")
    months = result.get("months_until_full")
    if months is not None and months <= LONG_TERM_MONTHS:
        text += f"; the DataNodes are full in {months:.1f} months at the measured growth"
    elif months is not None:
        text += (f"; the DataNodes last more than {LONG_TERM_MONTHS // 12} years at the "
                 "measured growth")
    urgent = namenodes > 1 or (months is not None and months <= horizon)
    return [(_CAPACITY if urgent else _SHAPE, text + ".")]


def _small_files(small: dict[str, Any] | None) -> list[tuple[int, str]]:
    if not small or not small.get("files"):
        return []
    share = small.get("small_share") or 0.0
    text = (f"{small['small_files']:,} of {small['files']:,} files ({share:.0%}) are smaller "
            f"than {human_bytes(small['threshold_bytes'])}")
    top = small.get("top_dirs") or []
    if top:
        text += (f"; compact {top[0]['path']} first ({top[0]['direct_small_files']:,} small "
                 "files directly inside)")
    return [(_CAPACITY if share > SMALL_SHARE_PROBLEM else _SHAPE, text + ".")]


def _top_user(usage: dict[str, Any] | None, namespace: dict[str, Any] | None
              ) -> list[tuple[int, str]]:
    users = (usage or {}).get("by_user") or []
    if not users:
        return []
    top = users[0]
    total = (namespace or {}).get("bytes") or 0
    share = f" ({(top.get('bytes') or 0) / total:.0%} of all bytes)" if total else ""
    return [(_SHAPE, f"Top user: {top['owner']} with {human_bytes(top.get('bytes') or 0)} in "
                     f"{top.get('files') or 0:,} files{share}.")]
