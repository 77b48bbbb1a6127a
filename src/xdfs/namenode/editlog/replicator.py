"""The NameNode's edits replicator: answers a BackupNode's ``fetch_edits`` (seed 000).

Where the records come from, in the order seed 000 draws it:

1. **its currently cached batch** -- the records the last read loaded, kept for the next
   fetch (a backup retrying, or asking for the rest of a segment);
2. **a finalized segment read from disk** -- looked up in the edits log's finalized-segment
   index, a copy-on-write tuple the syncer replaces on every roll, so reading it never
   locks against the group commit; the whole segment is loaded (in a worker thread) and
   becomes the cached batch;
3. **the live double buffer** -- the synced batches the edits log keeps in memory, copied
   into the cached batch.

Records the in-memory cache no longer holds but the in-progress segment does are read from
that file up to the synced txid. Only *synced* edits are ever served: a backup never holds
an edit its NameNode could still lose. Reading never blocks the NameNode's own commits: disk
reads run in threads, and the rest is slicing bytes on the event loop.

Caught up, a fetch is a long poll: it waits (``wait_s``, capped) for the next flush, so a
following backup neither spins nor lags by a polling interval.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from xdfs.editlog.framing import record_bounds
from xdfs.editlog.segments import read_segment_records
from xdfs.errors import EditsPurged, InvalidArgument, StorageError
from xdfs.namenode.editlog.editlog import EditLog, NameDir
from xdfs.namenode.namespace.ops import LAYOUT_VERSION
from xdfs.protocol.backup import FetchEditsRequest, FetchEditsResponse
from xdfs.protocol.namenode import BackupInfo

log = logging.getLogger(__name__)


@dataclass
class CachedEdits:
    """Consecutive framed records ``first_txid..last_txid`` and where each one starts.

    ``bounds`` may be left None with ``count`` given: the record walk is then done only if
    the batch is ever sliced (most batches copied from the live buffer are answered whole
    and never looked at again)."""

    first_txid: int
    data: bytes
    bounds: list[int] | None  # record i spans data[bounds[i]:bounds[i+1]]
    source: str
    count: int = -1

    def __post_init__(self) -> None:
        if self.count < 0:
            assert self.bounds is not None, "CachedEdits needs bounds or a count"
            self.count = len(self.bounds) - 1

    @property
    def last_txid(self) -> int:
        return self.first_txid + self.count - 1

    def holds(self, txid: int) -> bool:
        return self.first_txid <= txid <= self.last_txid

    def slice(self, from_txid: int, max_count: int, max_bytes: int) -> tuple[int, bytes]:
        """At least one record from ``from_txid``, then up to the limits."""
        if self.bounds is None:
            self.bounds = record_bounds(self.data)
        bounds = self.bounds
        first = from_txid - self.first_txid
        limit = min(len(bounds) - 1, first + max_count)
        last = first + 1
        while last < limit and bounds[last + 1] - bounds[first] <= max_bytes:
            last += 1
        return last - first, self.data[bounds[first] : bounds[last]]


@dataclass
class _Follower:
    synced_txid: int
    last_fetch_ms: int


@dataclass
class EditsReplicator:
    edits: EditLog
    dirs: Sequence[NameDir]
    fetch_bytes_max: int
    wait_max_s: float
    clock: Callable[[], float]
    cached: CachedEdits | None = None
    followers: dict[str, _Follower] = field(default_factory=dict)
    served: dict[str, int] = field(default_factory=dict)  # records per source, for tests

    async def fetch(self, request: FetchEditsRequest, peer: str) -> FetchEditsResponse:
        if request.max_count < 1:
            raise InvalidArgument(f"max_count must be >= 1, got {request.max_count}")
        if not 0 <= request.wait_s <= 3600:
            raise InvalidArgument(f"wait_s must be in [0, 3600], got {request.wait_s}")
        synced = self.edits.synced_txid
        if request.synced_txid > synced or request.synced_txid < 0:
            raise InvalidArgument(
                f"fetch_edits from txid {request.synced_txid + 1}: this NameNode's log ends "
                f"at txid {synced} (a txid from the future: is the backup following another "
                f"namespace?)"
            )
        self._track(request.backup_address or peer, request.synced_txid)
        if request.synced_txid == synced and request.wait_s > 0:
            await self.edits.wait_synced_beyond(synced, min(request.wait_s, self.wait_max_s))
        from_txid = request.synced_txid + 1
        count, data, source = await self._read(from_txid, request.max_count)
        self.served[source] = self.served.get(source, 0) + count
        return FetchEditsResponse(from_txid, count, data, self.edits.synced_txid, source)

    async def _read(self, from_txid: int, max_count: int) -> tuple[int, bytes, str]:
        if from_txid > self.edits.synced_txid:
            return 0, b"", "buffer"
        limit = self.fetch_bytes_max
        cached = self.cached
        if cached is not None and cached.holds(from_txid):
            return (*cached.slice(from_txid, max_count, limit), "cache")
        for start, end in self.edits.finalized_segments:  # a snapshot: never locked
            if start <= from_txid <= end:
                cached = await self._load(from_txid, start, end, "segment")
                return (*cached.slice(from_txid, max_count, limit), "segment")
        live = self.edits.read_cached_frames(from_txid, max_count, limit)
        if live is not None:
            count, data = live
            self.cached = CachedEdits(from_txid, data, None, "buffer", count)
            return count, data, "buffer"
        start = self.edits.current_segment_start
        if from_txid >= start:  # in the open segment, no longer in memory
            cached = await self._load(from_txid, start, self.edits.synced_txid, "segment")
            return (*cached.slice(from_txid, max_count, limit), "segment")
        raise self._purged(from_txid)

    async def _load(self, from_txid: int, start: int, end: int, source: str) -> CachedEdits:
        errors: list[str] = []
        for d in self.dirs:
            try:
                data, bounds = await asyncio.to_thread(
                    functools.partial(read_segment_records, layout_version=LAYOUT_VERSION),
                    d.current, start, end,
                )
            except StorageError as exc:
                errors.append(str(exc))
                continue
            cached = CachedEdits(start, data, bounds, source)
            if cached.holds(from_txid):
                self.cached = cached
                return cached
            errors.append(f"{d.current}: segment from {start} ends at {cached.last_txid}")
        oldest = self.oldest_txid()
        if from_txid < oldest:
            raise self._purged(from_txid)
        raise StorageError(f"cannot read edits from txid {from_txid}: {'; '.join(errors)}")

    def oldest_txid(self) -> int:
        finalized = self.edits.finalized_segments
        return finalized[0][0] if finalized else self.edits.current_segment_start

    def _purged(self, from_txid: int) -> EditsPurged:
        return EditsPurged(
            f"txid {from_txid} is no longer in this NameNode's edits (the oldest kept is "
            f"{self.oldest_txid()}): bootstrap from its newest image"
        )

    # -- who follows ----------------------------------------------------------------------

    def _track(self, address: str, synced_txid: int) -> None:
        self.followers[address] = _Follower(synced_txid, int(self.clock() * 1000))

    def backup_infos(self, forget_after_s: float) -> list[BackupInfo]:
        now_ms = int(self.clock() * 1000)
        synced = self.edits.synced_txid
        for address in [a for a, f in self.followers.items()
                        if now_ms - f.last_fetch_ms > forget_after_s * 1000]:
            del self.followers[address]
        return [
            BackupInfo(address, f.synced_txid, max(synced - f.synced_txid, 0), f.last_fetch_ms)
            for address, f in sorted(self.followers.items())
        ]

    def followed_within(self, window_s: float) -> bool:
        """Whether some backup fetched in the last ``window_s`` (it checkpoints for us)."""
        now_ms = int(self.clock() * 1000)
        return any(now_ms - f.last_fetch_ms <= window_s * 1000 for f in self.followers.values())
