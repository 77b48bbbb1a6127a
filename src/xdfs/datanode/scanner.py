"""The block scanner: re-verifies every finalized replica's checksums in the background,
so corruption is found even in blocks nobody reads (bit rot, a bad disk sector).

A pass reads every healthy replica (in block-id order) at most ``scan_bytes_per_s``; a
new pass starts ``scan_period_s`` after the previous one started (at once if a pass takes
longer: the period then cannot be met and a warning says so). A corrupt replica goes to
``on_corrupt`` (the DataNode excludes it from reads and reports it once), one whose files
are gone to ``on_missing``. Replicas in state rbw are left to block recovery. Scan progress is
not persisted: after a restart the scanner begins again with the first block.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from xdfs.config import DataNodeConfig
from xdfs.datanode.replica import Replica, ReplicaReader
from xdfs.datanode.storage import DataStorage
from xdfs.datanode.transfer import in_thread
from xdfs.errors import BlockNotFound, CorruptReplica, StorageError

log = logging.getLogger(__name__)


@dataclass
class ScanResult:
    replicas: int = 0
    bytes: int = 0
    corrupt: list[int] = field(default_factory=list)


class BlockScanner:
    def __init__(
        self,
        storage: DataStorage,
        config: DataNodeConfig,
        piece_bytes: int,
        on_corrupt: Callable[[Replica, CorruptReplica], None],
        on_missing: Callable[[Replica], None],
    ) -> None:
        self.storage = storage
        self.period_s = config.scan_period_s
        self.rate_bytes_per_s = config.scan_bytes_per_s
        self.piece_bytes = min(piece_bytes, config.scan_bytes_per_s)
        self.on_corrupt = on_corrupt
        self.on_missing = on_missing
        self.passes = 0
        #: What the pass under way (or the last one) has scanned so far (its progress).
        self.current = ScanResult()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started_s = loop.time()
            result = await self.scan_once(paced=True)
            elapsed_s = loop.time() - started_s
            if elapsed_s > self.period_s:
                log.warning("block scan of %d replicas took %.0f s, longer than "
                            "datanode.scan_period_s (%.0f s); raise scan_bytes_per_s",
                            result.replicas, elapsed_s, self.period_s)
            await asyncio.sleep(max(0.0, started_s + self.period_s - loop.time()))

    async def scan_once(self, *, paced: bool = False) -> ScanResult:
        """One pass over every healthy replica (``paced``: at most scan_bytes_per_s)."""
        loop = asyncio.get_running_loop()
        started_s = loop.time()
        result = self.current = ScanResult()
        for _block_id, replica in sorted(self.storage.replicas.items()):
            if (replica.corrupt or not replica.finalized
                    or self.storage.get(replica.block_id) is not replica):
                continue  # known bad, in rbw, or deleted/replaced since the pass began
            try:
                reader = ReplicaReader(replica, 0, replica.num_bytes, self.piece_bytes)
            except BlockNotFound:
                self.on_missing(replica)  # its files vanished: reported at once
                continue
            except CorruptReplica as exc:
                self._corrupt(replica, exc, result)
                continue
            except StorageError as exc:
                log.error("block scanner cannot open block %d: %s", replica.block_id, exc)
                continue
            try:
                while await in_thread(reader.read_piece) is not None:
                    if paced:
                        done_bytes = result.bytes + reader.bytes_read
                        due_s = started_s + done_bytes / self.rate_bytes_per_s
                        await asyncio.sleep(max(0.0, due_s - loop.time()))
            except CorruptReplica as exc:
                self._corrupt(replica, exc, result)
            except StorageError as exc:
                log.error("block scanner cannot read block %d: %s", replica.block_id, exc)
            finally:
                result.bytes += reader.bytes_read
                reader.close()
            result.replicas += 1
        self.passes += 1
        log.debug("block scan: %d replicas, %d bytes, corrupt %s",
                  result.replicas, result.bytes, result.corrupt)
        return result

    def _corrupt(self, replica: Replica, exc: CorruptReplica, result: ScanResult) -> None:
        result.corrupt.append(replica.block_id)
        self.on_corrupt(replica, exc)
