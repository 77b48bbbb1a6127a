"""The slot of a path (pure).

A path's slot is Redis Cluster's CRC16 (CRC16-CCITT/XMODEM: polynomial 0x1021, initial
value 0) of its *partition root*, mod :data:`SLOT_COUNT`. The partition root is the
normalised path cut to ``depth`` components (default 2: ``/user/alice/x`` ->
``/user/alice``); a per-prefix override (``{"/data": 3}``) lets one tree partition deeper
or shallower, the longest matching prefix winning. Paths above the cut (``/``, ``/user``)
are the *top layer*: they exist on every shard and have no slot.

The stdlib's ``binascii.crc_hqx`` is that CRC in C (``crc_hqx(b"123456789", 0) ==
0x31C3``), so no table or dependency is needed.
"""

from __future__ import annotations

import binascii
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from xdfs.common.paths import join, split_path
from xdfs.errors import ConfigError

SLOT_COUNT: Final = 16384
DEFAULT_DEPTH: Final = 2
#: An upload's temporary name (``xdfs dfs -put`` writes ``<dst>._COPYING_``, then renames it
#: to ``<dst>``): a partition root with it hashes as the root without it, so the temporary
#: file lives on its destination's shard and the final rename stays within one shard.
TEMPORARY_SUFFIX: Final = "._COPYING_"


def crc16(data: bytes) -> int:
    """Redis Cluster's CRC16 of ``data`` (``CLUSTER KEYSLOT`` is this mod 16384)."""
    return binascii.crc_hqx(data, 0)


def key_slot(key: bytes) -> int:
    return crc16(key) % SLOT_COUNT


@dataclass(frozen=True)
class Partitioning:
    """Where paths are cut into partitions: a default depth and per-prefix overrides.

    An override's prefix must be at or above the cut its ancestors' rule makes (it may not
    reach inside another partition), and its depth at least the prefix's own length (the
    prefix is then the top layer or a partition root itself). Violations are a ConfigError.
    """

    depth: int = DEFAULT_DEPTH
    overrides: Mapping[str, int] = field(default_factory=dict)
    #: the overrides as (components, depth), longest prefix first
    _rules: tuple[tuple[tuple[str, ...], int], ...] = field(init=False, repr=False,
                                                            compare=False)

    def __post_init__(self) -> None:
        if self.depth < 1:
            raise ConfigError(f"sharding.partition_depth must be at least 1, not {self.depth}")
        rules = sorted(((self._prefix(p), d) for p, d in self.overrides.items()),
                       key=lambda rule: -len(rule[0]))
        object.__setattr__(self, "_rules", tuple(rules))
        for parts, depth in rules:
            inherited = self._depth_above(parts)
            if len(parts) > inherited or depth < len(parts):
                raise ConfigError(
                    f"partition override {join(parts)}={depth} cuts inside a partition "
                    f"(prefix depth {len(parts)}, enclosing depth {inherited})")

    @staticmethod
    def _prefix(path: str) -> tuple[str, ...]:
        parts = split_path(path)
        if not parts:
            raise ConfigError("a partition override for / is the default depth itself")
        return parts

    def _depth_above(self, parts: tuple[str, ...]) -> int:
        """The depth of the longest override strictly above ``parts`` (or the default)."""
        for prefix, depth in self._rules:
            if len(prefix) < len(parts) and parts[:len(prefix)] == prefix:
                return depth
        return self.depth

    def depth_for(self, parts: tuple[str, ...]) -> int:
        for prefix, depth in self._rules:
            if parts[:len(prefix)] == prefix:
                return depth
        return self.depth

    def root_of(self, path: str) -> str | None:
        """The partition root of ``path``, None when the path is in the top layer.
        Raises InvalidPath for a path the NameNode would refuse."""
        parts = split_path(path)
        depth = self.depth_for(parts)
        return None if len(parts) < depth else join(parts[:depth])

    def is_top_layer(self, path: str) -> bool:
        return self.root_of(path) is None

    def slot_of(self, path: str) -> int | None:
        """The slot that owns ``path``; None for the top layer (every shard has it)."""
        root = self.root_of(path)
        if root is None:
            return None
        if root.endswith(TEMPORARY_SUFFIX) and not root.endswith("/" + TEMPORARY_SUFFIX):
            root = root[: -len(TEMPORARY_SUFFIX)]
        return key_slot(root.encode("utf-8"))


DEFAULT: Final = Partitioning()


def partition_root(path: str, depth: int = DEFAULT_DEPTH,
                   overrides: Mapping[str, int] | None = None) -> str | None:
    return _partitioning(depth, overrides).root_of(path)


def is_top_layer(path: str, depth: int = DEFAULT_DEPTH,
                 overrides: Mapping[str, int] | None = None) -> bool:
    return _partitioning(depth, overrides).is_top_layer(path)


def slot_of(path: str, depth: int = DEFAULT_DEPTH,
            overrides: Mapping[str, int] | None = None) -> int | None:
    return _partitioning(depth, overrides).slot_of(path)


def _partitioning(depth: int, overrides: Mapping[str, int] | None) -> Partitioning:
    if depth == DEFAULT_DEPTH and not overrides:
        return DEFAULT
    return Partitioning(depth, dict(overrides or {}))
