"""DataNode directory layout and ``VERSION`` file (pure: names and text, no I/O)::

    DATA_DIR/
        in_use.lock                       flock'ed while a DataNode runs on the dir
        current/
            VERSION                       key=value lines (below)
            rbw/                          replicas being written: blk_<id>, blk_<id>_<gs>.meta
            spares/spare_<n>              empty files kept for new replicas' files (spares.py)
            finalized/subdir<a>/subdir<b>/
                blk_<id>                  block data
                blk_<id>_<gs>.meta        checksums (xdfs.datanode.checksums)

``a = (block_id >> 16) & 0xFF`` and ``b = (block_id >> 8) & 0xFF`` (HDFS's order): the
two-level 256 x 256 tree of seed 003, so no directory grows huge, and 256 consecutive block
ids share a leaf, so a node makes one leaf directory per 256 block ids (block ids are
allocated in sequence: consecutive replicas land in one directory). Layout version 1 put a
block in ``a = (block_id >> 8) & 0xFF``, ``b = block_id & 0xFF``; a data dir of version 1
is taken as is (its ``VERSION`` rewritten to 2) and a replica found where version 1 put it
stays there (:func:`homes`): nothing moves at startup.

Block pools (metadata sharding): a DataNode serves replicas of every shard it is configured
for (``datanode.shards``), each shard's in its own pool. Shard 0's pool is the tree above
(``current/rbw``, ``current/finalized``: a data dir of an unsharded cluster is shard 0's pool
as it is, nothing moves); shard ``k > 0``'s is ``current/BP-<k>/`` with its own ``rbw/``,
``finalized/`` (the same two levels) and ``active_epoch``. The pool of a replica is the shard
of its block id (:func:`xdfs.sharding.ids.shard_of_id`): no pool field on the wire.

``VERSION``: ``storageType=DATA_NODE``, ``layoutVersion``, ``nodeID`` (uuid4 hex, created
once: the node's identity across restarts), ``clusterID`` (empty until the first
registration), ``cTime`` (creation, ms).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import PurePath

from xdfs.common.files import parse_key_values
from xdfs.errors import StorageError
from xdfs.sharding.ids import ID_SHARD_SHIFT

STORAGE_TYPE = "DATA_NODE"
LAYOUT_VERSION = 2
#: Layout versions this DataNode opens (1: the leaves of ``legacy_subdirs``).
READABLE_LAYOUT_VERSIONS = (1, 2)
CURRENT = "current"
VERSION_FILE = "VERSION"
FINALIZED = "finalized"
RBW = "rbw"
SPARES = "spares"
#: ``current/BP-<k>``: the block pool of shard ``k > 0``.
POOL_PREFIX = "BP-"

_DATA_RE = re.compile(r"^blk_(-?\d+)$")
_META_RE = re.compile(r"^blk_(-?\d+)_(\d+)\.meta$")


#: The names of the directories of each level.
SUBDIR_NAMES = tuple(f"subdir{index}" for index in range(256))


def subdirs(block_id: int) -> tuple[str, str]:
    """The two directory levels under ``finalized/`` that hold ``block_id``."""
    return SUBDIR_NAMES[(block_id >> 16) & 0xFF], SUBDIR_NAMES[(block_id >> 8) & 0xFF]


def leaf_key(block_id: int) -> int:
    """The leaf of ``block_id`` as a number (``shard << 16 | a << 8 | b``: the pool's leaf;
    shard 0's keys are ``a << 8 | b``): 256 consecutive ids share it."""
    return (block_id >> ID_SHARD_SHIFT) << 16 | (block_id >> 8) & 0xFFFF


def pool_dir(current: PurePath, shard: int) -> PurePath:
    """The ``current/`` of shard ``shard``'s block pool: ``current`` itself for shard 0."""
    return current / f"{POOL_PREFIX}{shard}" if shard else current


def parse_pool_name(name: str) -> int | None:
    """The shard of a ``BP-<k>`` directory name (k > 0), or None for any other name."""
    rest = name.removeprefix(POOL_PREFIX)
    if rest == name or not rest.isdigit() or rest != str(int(rest)) or int(rest) == 0:
        return None
    return int(rest)


def legacy_subdirs(block_id: int) -> tuple[str, str]:
    """Where layout version 1 put ``block_id`` (replicas written before the upgrade)."""
    return SUBDIR_NAMES[(block_id >> 8) & 0xFF], SUBDIR_NAMES[block_id & 0xFF]


def data_name(block_id: int) -> str:
    return f"blk_{block_id}"


def meta_name(block_id: int, genstamp: int) -> str:
    return f"blk_{block_id}_{genstamp}.meta"


def finalized_dir(finalized_root: PurePath, block_id: int) -> PurePath:
    first, second = subdirs(block_id)
    return finalized_root / first / second


def homes(finalized_root: PurePath, block_id: int) -> tuple[PurePath, PurePath]:
    """The directories a replica of ``block_id`` may be found in: where it is written now
    and where layout version 1 wrote it (kept there: a replica is never moved to upgrade)."""
    first, second = legacy_subdirs(block_id)
    return finalized_dir(finalized_root, block_id), finalized_root / first / second


def parse_data_name(name: str) -> int | None:
    """The block id of a data file name, or None for any other name."""
    match = _DATA_RE.match(name)
    return int(match.group(1)) if match else None


def parse_meta_name(name: str) -> tuple[int, int] | None:
    """(block id, genstamp) of a meta file name, or None for any other name."""
    match = _META_RE.match(name)
    return (int(match.group(1)), int(match.group(2))) if match else None


@dataclass(frozen=True)
class DataNodeVersion:
    node_id: str
    cluster_id: str
    ctime_ms: int
    layout_version: int = LAYOUT_VERSION
    storage_type: str = STORAGE_TYPE

    def with_cluster(self, cluster_id: str) -> DataNodeVersion:
        return replace(self, cluster_id=cluster_id)


_VERSION_KEYS = ("storageType", "layoutVersion", "nodeID", "clusterID", "cTime")


def format_version(info: DataNodeVersion) -> str:
    return (
        "#xdfs DataNode storage\n"
        f"storageType={info.storage_type}\n"
        f"layoutVersion={info.layout_version}\n"
        f"nodeID={info.node_id}\n"
        f"clusterID={info.cluster_id}\n"
        f"cTime={info.ctime_ms}\n"
    )


def parse_version(text: str, source: str = VERSION_FILE) -> DataNodeVersion:
    """Parse VERSION text; unknown keys are ignored, missing or malformed ones are errors."""
    values = parse_key_values(text, source)
    storage_type = values.get("storageType", STORAGE_TYPE)
    if storage_type != STORAGE_TYPE:
        raise StorageError(
            f"{source}: storageType is {storage_type}, not {STORAGE_TYPE} "
            "(is this another role's directory?)"
        )
    missing = [key for key in _VERSION_KEYS if key not in values]
    if missing:
        raise StorageError(f"{source}: missing {', '.join(missing)}")
    try:
        info = DataNodeVersion(
            node_id=values["nodeID"],
            cluster_id=values["clusterID"],
            ctime_ms=int(values["cTime"]),
            layout_version=int(values["layoutVersion"]),
        )
    except ValueError as exc:
        raise StorageError(f"{source}: bad number: {exc}") from None
    if info.layout_version not in READABLE_LAYOUT_VERSIONS:
        raise StorageError(
            f"{source}: layoutVersion {info.layout_version} is not supported "
            f"(this DataNode writes {LAYOUT_VERSION})"
        )
    if not re.fullmatch(r"[0-9a-f]{32}", info.node_id):
        raise StorageError(f"{source}: nodeID {info.node_id!r} is not a uuid4 hex")
    return info
