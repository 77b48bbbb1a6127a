"""Startup recovery, checkpoints and retention of the NameNode's storage directories.

Startup (:func:`load_namespace`):

1. Every dir's ``VERSION`` must agree (namespace and cluster id, this layout version).
2. The newest image whose md5 matches is loaded (across all dirs); a corrupt newest image is
   skipped with a warning and the next older one is used.
3. Each dir's edits after the image are validated (headers, CRCs, txid continuity, names). The
   last in-progress segment may end in a *torn* record (a write cut by a crash: short length,
   short payload, or a bad final record reaching the end of the file, or NUL fill): it is
   truncated away (truncate + fsync) and recovery goes on. Anything else -- a bad record
   followed by more data, a gap in txids, a bad finalized segment -- makes that dir's log
   invalid, with a StorageError naming the file and byte offset.
4. The valid dir with the longest log is replayed; a dir that is shorter or invalid gets the
   chosen dir's segments copied over its own (logged), so every dir continues identically.
   With no valid dir, startup stops with the error. The log must reach ``seen_txid``: edits
   that were once durable must not silently disappear.
5. The caller then opens the edits log at ``last_txid + 1``; the in-progress segment a crash
   left is finalized by :meth:`~xdfs.namenode.editlog.EditLog.open_for_write`.

Checkpoints (:func:`save_checkpoint`) write the image to every dir; :func:`purge` keeps the
newest ``retained_images`` images and every segment needed to replay from the oldest of them,
and deletes the rest (older images and their md5, ``.ckpt`` leftovers, older segments).
"""

from __future__ import annotations

import filecmp
import functools
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

from xdfs.common.faults import fault_point
from xdfs.common.files import datasync, fsync_dir, write_all
from xdfs.common.images import parse_image_name
from xdfs.editlog.segments import (
    SegmentInfo,
    scan_segment,
    segment_index,
    tail_log_level,
    truncate_segment,
)
from xdfs.errors import StorageError, XdfsError
from xdfs.namenode.editlog.editlog import read_dir_edits
from xdfs.namenode.image.fsimage import ImageSource, load_image, save_image
from xdfs.namenode.image.storage import StorageDirectory, VersionInfo, read_seen_txid
from xdfs.namenode.namespace.ops import (
    LAYOUT_VERSION,
    ImageHeader,
    InodeRecord,
    Op,
    TokenKeyRecord,
    UserRecord,
)

log = logging.getLogger("xdfs.namenode.image.recovery")


class ReplayTarget(Protocol):
    """What replay needs of a namespace."""

    def apply(self, op: Op) -> tuple[int, ...]: ...


class CheckpointSource(Protocol):
    """What a checkpoint needs of a namespace."""

    next_inode_id: int
    next_block_id: int
    next_genstamp: int
    epoch: int
    superuser: str
    supergroup: str
    next_generation: int
    datanode_secret: bytes

    def inode_count(self) -> int: ...

    def iter_inode_records(self) -> Iterable[InodeRecord]: ...

    def user_records(self) -> Iterable[UserRecord]: ...

    def token_key_records(self) -> Iterable[TokenKeyRecord]: ...


N = TypeVar("N", bound=ReplayTarget)
N_co = TypeVar("N_co", covariant=True)


class NamespaceFactory(Protocol[N_co]):
    """The namespace class itself (``from_image`` is its classmethod)."""

    def from_image(
        self,
        header: ImageHeader,
        inodes: Iterator[InodeRecord],
        users: list[UserRecord],
        token_keys: list[TokenKeyRecord],
    ) -> N_co: ...


# --- startup -----------------------------------------------------------------------------


def check_versions(dirs: Sequence[StorageDirectory]) -> VersionInfo:
    """All dirs formatted, for the same namespace and cluster, at this layout version."""
    if not dirs:
        raise StorageError("no name directories configured")
    first: VersionInfo | None = None
    for d in dirs:
        info = d.read_version()
        if info.layout_version != LAYOUT_VERSION:
            raise StorageError(f"{d.root} has layout version {info.layout_version}; this "
                               f"build reads {LAYOUT_VERSION} (no upgrade path)")
        if first is None:
            first = info
        elif (info.namespace_id, info.cluster_id) != (first.namespace_id, first.cluster_id):
            raise StorageError(
                f"{d.root} belongs to namespace {info.namespace_id} of cluster "
                f"{info.cluster_id}, {dirs[0].root} to {first.namespace_id} of "
                f"{first.cluster_id}"
            )
    assert first is not None
    return first


@dataclass
class DirLog:
    """One dir's edits after the image, as validated (nothing changed yet)."""

    storage: StorageDirectory
    image_txid: int
    segments: list[SegmentInfo] = field(default_factory=list)
    last_txid: int = 0
    #: (segment, truncation offset, description) of a torn tail of the last segment
    torn: tuple[SegmentInfo, int, str] | None = None
    error: StorageError | None = None


def analyze_dir_log(storage: StorageDirectory, image_txid: int) -> DirLog:
    """Validate a dir's segments that hold txids after ``image_txid``."""
    result = DirLog(storage, image_txid, last_txid=image_txid)
    try:
        segments = [s for s in segment_index(storage.current)
                    if s.end is None or s.end > image_txid]
        expected = image_txid + 1
        for i, seg in enumerate(segments):
            first = i == 0
            if (first and seg.start > expected) or (not first and seg.start != expected):
                what = "missing" if seg.start > expected else "overlapping"
                raise StorageError(
                    f"edits txids {min(expected, seg.start)}..{max(expected, seg.start) - 1} "
                    f"are {what} before {seg.path}"
                )
            last = i == len(segments) - 1
            reader = scan_segment(seg, layout_version=LAYOUT_VERSION,
                                  torn_tail="allow" if seg.in_progress and last else "error")
            if reader.torn is not None:
                result.torn = (seg, reader.valid_bytes, reader.torn)
            result.segments.append(seg)
            result.last_txid = max(result.last_txid, reader.last_txid)
            expected = result.last_txid + 1
    except StorageError as exc:
        result.error = exc
    return result


def load_namespace(
    storage_dirs: Sequence[StorageDirectory],
    namespace_factory: NamespaceFactory[N],
    on_applied: Callable[[N, int, Op], None] | None = None,
) -> tuple[N, int]:
    """Load the newest valid image and replay the edits after it; returns the namespace and
    the last txid applied. Repairs what a crash may leave (torn tail, lagging dir).
    ``on_applied(namespace, txid, op)`` is called after each replayed op (the retry cache
    is rebuilt that way)."""
    version = check_versions(storage_dirs)
    candidates = sorted(
        ((txid, i, d) for i, d in enumerate(storage_dirs) for txid in d.images()),
        key=lambda c: (-c[0], c[1]),
    )
    if not candidates:
        raise StorageError("no fsimage in " + ", ".join(str(d.root) for d in storage_dirs))
    problems: list[str] = []
    for txid, _, d in candidates:
        path = d.image_path(txid)
        try:
            header, namespace = load_image(path, namespace_factory.from_image)
            if (header.namespace_id, header.cluster_id) != (version.namespace_id,
                                                            version.cluster_id):
                raise StorageError(f"image {path} belongs to namespace {header.namespace_id} "
                                   f"of cluster {header.cluster_id}")
            if header.txid != txid:
                raise StorageError(f"image {path} says txid {header.txid}")
        except StorageError as exc:
            log.warning("skipping image %s: %s", path, exc)
            problems.append(str(exc))
            continue
        log.info("loaded image %s (%d inodes)", path, header.inode_count)
        last = _replay_after(
            storage_dirs, namespace, txid,
            None if on_applied is None else functools.partial(on_applied, namespace),
        )
        return namespace, last
    raise StorageError("no usable fsimage: " + "; ".join(problems))


def _replay_after(
    dirs: Sequence[StorageDirectory],
    namespace: ReplayTarget,
    txid: int,
    on_applied: Callable[[int, Op], None] | None = None,
) -> int:
    logs = [analyze_dir_log(d, txid) for d in dirs]
    valid = [dl for dl in logs if dl.error is None]
    if not valid:
        first = logs[0].error
        assert first is not None
        for dl in logs[1:]:
            log.error("edits in %s: %s", dl.storage.root, dl.error)
        raise first
    best = max(valid, key=lambda dl: dl.last_txid)  # max keeps the first of equals
    seen = max(read_seen_txid(d.current) for d in dirs)
    if best.last_txid < seen:
        raise StorageError(
            f"edits end at txid {best.last_txid} (in {best.storage.root}) but seen_txid "
            f"says txids up to {seen} were written: edits have been lost"
        )
    if best.torn is not None:
        seg, offset, what = best.torn
        log.log(tail_log_level(what), "truncating the tail of %s at byte %d: %s", seg.path,
                offset, what)
        truncate_segment(seg.path, offset)
    for dl in logs:
        if dl is not best and (dl.error is not None or dl.torn is not None
                               or dl.last_txid != best.last_txid):
            _copy_log(best, dl)
    applied = txid
    for applied_txid, op, path, offset in read_dir_edits(best.storage.current, txid + 1):
        try:
            namespace.apply(op)
        except XdfsError as exc:
            raise StorageError(
                f"replaying txid {applied_txid} ({op.NAME}) from {path} at byte offset "
                f"{offset} failed: {exc}"
            ) from exc
        if on_applied is not None:
            on_applied(applied_txid, op)
        applied = applied_txid
    if applied != best.last_txid:
        raise StorageError(f"replay of {best.storage.current} stopped at txid {applied}, "
                           f"validation saw {best.last_txid}")
    log.info("replayed txids %d..%d from %s", txid + 1, applied, best.storage.current)
    return applied


def _copy_log(source: DirLog, target: DirLog) -> None:
    """Make ``target``'s segments after the image those of ``source``."""
    reason = target.error or (
        f"torn tail: {target.torn[2]}" if target.torn else f"ends at txid {target.last_txid}"
    )
    log.warning("edits in %s differ from %s (%s): replacing them with a copy",
                target.storage.root, source.storage.root, reason)
    sources = {seg.name: seg.path for seg in source.segments if seg.path.exists()}
    current = target.storage.current
    for seg in segment_index(current):
        if seg.end is not None and seg.end <= target.image_txid:
            continue
        twin = sources.get(seg.name)
        same = twin is not None and _size(twin) == _size(seg.path) and (
            target.error is None or filecmp.cmp(twin, seg.path, shallow=False))
        if not same:
            log.warning("removing %s", seg.path)
            seg.path.unlink()
    for seg in source.segments:
        dst = current / seg.name
        if seg.path.exists() and not dst.exists():
            _copy_file(seg.path, dst)
    fsync_dir(current)


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return None


def _copy_file(src: Path, dst: Path) -> None:
    tmp = dst.with_name(dst.name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            with open(src, "rb") as f:
                while chunk := f.read(1024 * 1024):
                    write_all(fd, chunk, tmp)
            datasync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, dst)
    except OSError as exc:
        raise StorageError(f"cannot copy {src} to {dst}: {exc}") from exc


# --- checkpoints and retention -----------------------------------------------------------


def make_image_header(version: VersionInfo, namespace: CheckpointSource, txid: int,
                      user_count: int, token_key_count: int) -> ImageHeader:
    return ImageHeader(
        layout_version=LAYOUT_VERSION,
        namespace_id=version.namespace_id,
        cluster_id=version.cluster_id,
        txid=txid,
        next_inode_id=namespace.next_inode_id,
        next_block_id=namespace.next_block_id,
        next_genstamp=namespace.next_genstamp,
        inode_count=namespace.inode_count(),
        user_count=user_count,
        token_key_count=token_key_count,
        superuser=namespace.superuser,
        supergroup=namespace.supergroup,
        epoch=namespace.epoch,
        next_generation=namespace.next_generation,
        datanode_secret=namespace.datanode_secret,
    )


def save_checkpoint(
    storage_dirs: Sequence[StorageDirectory], namespace: CheckpointSource, txid: int
) -> list[Path]:
    """Write ``fsimage_<txid>`` (the namespace after ``txid``) to every dir. Blocking; the
    namespace must not change meanwhile (:mod:`.background` saves without that pause)."""
    header, source = checkpoint_source(storage_dirs, namespace, txid)
    return save_image(storage_dirs, header, source)


def checkpoint_source(
    storage_dirs: Sequence[StorageDirectory], namespace: CheckpointSource, txid: int
) -> tuple[ImageHeader, ImageSource]:
    """The header of ``fsimage_<txid>`` and what writes its records (users and token keys
    copied now: they are few)."""
    version = check_versions(storage_dirs)
    users = list(namespace.user_records())
    keys = list(namespace.token_key_records())
    header = make_image_header(version, namespace, txid, len(users), len(keys))
    return header, _Snapshot(namespace, users, keys)


class _Snapshot:
    def __init__(self, namespace: CheckpointSource, users: list[UserRecord],
                 keys: list[TokenKeyRecord]) -> None:
        self._namespace = namespace
        self._users = users
        self._keys = keys

    def iter_inode_records(self) -> Iterable[InodeRecord]:
        return self._namespace.iter_inode_records()

    def user_records(self) -> list[UserRecord]:
        return self._users

    def token_key_records(self) -> list[TokenKeyRecord]:
        return self._keys


@dataclass(frozen=True)
class PurgePlan:
    images: list[int]  # image txids to delete (with their md5)
    stray: list[str]  # .ckpt leftovers, orphan .md5 and .tmp files (names)
    segments: list[SegmentInfo]


def plan_purge(
    file_names: Iterable[str], segments: Sequence[SegmentInfo], retained_images: int
) -> PurgePlan:
    """Pure retention decision for one dir. Keeps the newest ``retained_images`` complete
    images and every segment with a txid after the oldest kept one; never touches the
    in-progress segment; with no complete image deletes nothing."""
    assert retained_images >= 1, retained_images
    names = set(file_names)
    images: list[int] = []
    ckpts: list[int] = []
    md5s: list[int] = []
    for name in names:
        parsed = parse_image_name(name)
        if parsed is None:
            continue
        kind, txid = parsed
        {"image": images, "ckpt": ckpts, "md5": md5s}[kind].append(txid)
    complete = sorted((t for t in images if f"fsimage_{t:019d}.md5" in names), reverse=True)
    if not complete:
        return PurgePlan([], [], [])
    kept = complete[:retained_images]
    oldest, newest = kept[-1], kept[0]
    old_images = sorted(t for t in images if t < oldest)
    stray = sorted(
        [f"fsimage.ckpt_{t:019d}" for t in ckpts if t <= newest]
        + [f"fsimage_{t:019d}.md5" for t in md5s if t not in images and t <= newest]
        + [n for n in names if n.endswith(".tmp") and n.startswith(("fsimage", "edits_"))]
    )
    old_segments = [s for s in segments if s.end is not None and s.end <= oldest]
    return PurgePlan(old_images, stray, old_segments)


def purge(storage_dirs: Sequence[StorageDirectory], retained_images: int = 2) -> list[Path]:
    """Apply :func:`plan_purge` to every dir; returns the deleted paths."""
    deleted: list[Path] = []
    for d in storage_dirs:
        current = d.current
        plan = plan_purge(os.listdir(current), segment_index(current), retained_images)
        victims = [current / f"fsimage_{t:019d}" for t in plan.images]
        victims += [current / f"fsimage_{t:019d}.md5" for t in plan.images]
        victims += [current / name for name in plan.stray]
        victims += [seg.path for seg in plan.segments]  # images first, then their edits
        if not victims:
            continue
        fault_point("purge.before_delete")
        for path in victims:
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                raise StorageError(f"cannot delete {path}: {exc}") from exc
            deleted.append(path)
        fsync_dir(current)
        log.info("purged %d files from %s", len(victims), current)
    return deleted
