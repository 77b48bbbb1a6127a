"""Network topology (pure core): which rack each DataNode is in, as HDFS's net.topology.

A rack is a path such as ``/dc1/rack7``. The mapping comes from a topology file (one
``HOST[:PORT] /rack`` per line, ``#`` starts a comment; an entry with a port names one
DataNode, one without names every DataNode of that host) or a topology script (given the
addresses, it prints one rack per address); an address neither names is on
``/default-rack``. The file is parsed here; the script is run by the driver
(:mod:`xdfs.namenode.hosts`), which hands in a resolver. Racks are resolved once per
address and cached, as HDFS caches its script's answers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from xdfs.errors import HostsFileError

DEFAULT_RACK = "/default-rack"

#: Turns addresses into racks (one per address, in order); may raise HostsFileError.
Resolver = Callable[[Sequence[str]], list[str]]


def host_of(address: str) -> str:
    """``host`` of ``host:port`` (an address without a port is a host)."""
    host, sep, port = address.rpartition(":")
    return host if sep and port.isdigit() else address


def check_rack(rack: str, where: str) -> str:
    rack = rack.strip().rstrip("/") or "/"
    if not rack.startswith("/") or rack == "/" or any(c.isspace() for c in rack):
        raise HostsFileError(f"{where}: a rack is a path such as /dc1/rack1, not {rack!r}")
    return rack


def pairs_of(text: str, source: str, shape: str) -> Iterator[tuple[str, str, str]]:
    """(entry, value, where) of each ``ENTRY VALUE`` line (``#`` comments, blank lines
    skipped); HostsFileError naming the line otherwise."""
    for number, raw in enumerate(text.splitlines(), 1):
        words = raw.split("#", 1)[0].split()
        where = f"{source} line {number}"
        if len(words) == 2:
            yield words[0], words[1], where
        elif words:
            raise HostsFileError(f"{where}: expected '{shape}', got {raw.strip()!r}")


def parse_topology(text: str, source: str = "topology file") -> dict[str, str]:
    """``HOST[:PORT] /rack`` lines -> {entry: rack}."""
    mapping: dict[str, str] = {}
    for entry, rack, where in pairs_of(text, source, "HOST[:PORT] /rack"):
        mapping[entry] = check_rack(rack, where)
    return mapping


class Topology:
    def __init__(
        self, mapping: Mapping[str, str] | None = None, resolver: Resolver | None = None
    ) -> None:
        self._mapping = dict(mapping or {})
        self._resolver = resolver
        self._cache: dict[str, str] = {}

    def rack_of(self, address: str) -> str:
        """The rack of the DataNode serving at ``address`` (exact entry, then its host,
        then the script; /default-rack when none knows it)."""
        rack = self._mapping.get(address) or self._mapping.get(host_of(address))
        if rack is not None:
            return rack
        cached = self._cache.get(address)
        if cached is not None:
            return cached
        rack = DEFAULT_RACK
        if self._resolver is not None:
            (answer,) = self._resolver([address])
            rack = check_rack(answer, f"topology script for {address}")
        self._cache[address] = rack
        return rack
