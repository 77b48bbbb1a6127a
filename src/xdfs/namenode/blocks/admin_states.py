"""DataNode admin states (pure core): include/exclude/maintenance lists, decommissioning.

As HDFS: an empty include list lets every DataNode register, a non-empty one only those it
names; a DataNode in the exclude list is *decommissioning*: it keeps serving reads, takes
no new replicas, its replicas stop counting toward their blocks' replication (they are
copied elsewhere, with it as a possible source) and once every block it holds has its full
replication on other nodes it is *decommissioned* (safe to stop). A DataNode in the
maintenance list (with an expiry time) is *entering maintenance* until each of its blocks
has ``maintenance_min_replicas`` replicas on other nodes, then *in maintenance*: its
replicas keep counting (nothing is copied because of it, even while it is stopped) until
the expiry, when it is back to normal (and, if still down, its replicas stop counting).

Entries are ``HOST`` (every DataNode of the host) or ``HOST:PORT`` (the DataNode serving
there). Lists are parsed here; the driver (:mod:`xdfs.namenode.hosts`) reads the files.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from xdfs.errors import HostsFileError
from xdfs.namenode.blocks.topology import host_of, pairs_of

NORMAL = "normal"
DECOMMISSIONING = "decommissioning"
DECOMMISSIONED = "decommissioned"
ENTERING_MAINTENANCE = "entering_maintenance"
IN_MAINTENANCE = "in_maintenance"
#: States whose replicas do not count toward replication (they are copied elsewhere).
DECOMMISSION_STATES = (DECOMMISSIONING, DECOMMISSIONED)
MAINTENANCE_STATES = (ENTERING_MAINTENANCE, IN_MAINTENANCE)


@dataclass(frozen=True)
class HostLists:
    include: frozenset[str] = frozenset()
    exclude: frozenset[str] = frozenset()
    #: entry -> end of its maintenance (seconds since the epoch)
    maintenance: Mapping[str, float] = field(default_factory=dict)

    def allowed(self, address: str) -> bool:
        return not self.include or _named(self.include, address)

    def wanted(self, address: str, now_s: float) -> tuple[str, float]:
        """(NORMAL | DECOMMISSIONING | ENTERING_MAINTENANCE, maintenance expiry) for the
        DataNode at ``address``; exclusion wins over maintenance, as in HDFS."""
        if _named(self.exclude, address):
            return DECOMMISSIONING, 0.0
        expiry = self.maintenance.get(address, self.maintenance.get(host_of(address)))
        if expiry is not None and expiry > now_s:
            return ENTERING_MAINTENANCE, expiry
        return NORMAL, 0.0


def _named(entries: Iterable[str], address: str) -> bool:
    entries = set(entries)
    return address in entries or host_of(address) in entries


def parse_hosts(text: str) -> frozenset[str]:
    """An include or exclude file: entries separated by blanks or lines, ``#`` comments."""
    return frozenset(
        word for line in text.splitlines() for word in line.split("#", 1)[0].split()
    )


def parse_maintenance(text: str, source: str = "maintenance file") -> dict[str, float]:
    """``HOST[:PORT] UNTIL`` lines; UNTIL is seconds since the epoch or an ISO 8601 time
    with its zone (``2026-11-24T06:00:00Z``)."""
    entries: dict[str, float] = {}
    for entry, until, where in pairs_of(text, source, "HOST[:PORT] UNTIL"):
        entries[entry] = _parse_time(until, where)
    return entries


def _parse_time(word: str, where: str) -> float:
    try:
        return float(word)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(word)
    except ValueError:
        raise HostsFileError(
            f"{where}: {word!r} is neither epoch seconds nor ISO 8601"
        ) from None
    if moment.tzinfo is None:
        raise HostsFileError(f"{where}: {word!r} needs a time zone (e.g. Z)")
    return moment.timestamp()
