"""Following: ``fetch_edits(synced_txid)`` in a loop (long-polled at the NameNode), each
batch checked, applied to the namespace and appended to the local edits log, then synced:
the next fetch's ``synced_txid`` -- the backup's acknowledgement -- never passes what is
durable here. When the NameNode no longer has the next txid (purged), the backup
re-bootstraps from its image. Unreachable NameNode: exponential backoff.

With a quorum journal (``namenode.shared_edits`` in the backup's configuration too) the
backup follows the journal instead: it reads the records a majority committed (the same
long-polled tailing as a standby NameNode), so what it holds never includes an edit the
NameNode could still lose, and it keeps following while the NameNode is down."""

from __future__ import annotations

import asyncio
import logging

from xdfs.backupnode.bootstrap import bootstrap
from xdfs.backupnode.local import Local
from xdfs.common.faults import FAULTS, fault_point
from xdfs.errors import EditsPurged, InvalidArgument, RpcError, StorageError, Unavailable
from xdfs.namenode.editlog.replay import Backoff, apply_batch, decode_batch
from xdfs.protocol.backup import FETCH_EDITS, FetchEditsRequest
from xdfs.quorum.reader import JournalTailer

log = logging.getLogger(__name__)

FAULTS.register("backup.replayed_not_synced",
                "a fetched batch is applied and buffered in the backup's edits, not synced")


class Follower:
    def __init__(self, local: Local, address: str, tailer: JournalTailer | None = None
                 ) -> None:
        self.local = local
        self.address = address  # the backup's own, told to the NameNode with each fetch
        self.tailer = tailer  # set: follow the quorum journal rather than the NameNode

    async def run(self) -> None:
        local = self.local
        cfg = local.config.backupnode
        failures = Backoff(0.05, cfg.fetch_retry_max_s)
        idle = Backoff(0.01, max(cfg.fetch_wait_s, 0.01))
        while True:
            try:
                count = await self.fetch_once()
            except EditsPurged as exc:
                log.warning("%s", exc.message)
                await self._rebootstrap(failures)
                continue
            except (RpcError, InvalidArgument) as exc:
                delay = failures.next_s()
                log.warning("fetching edits from %s: %s (next try in %.2f s)",
                            local.namenodes[0], exc, delay)
                await asyncio.sleep(delay)
                continue
            except StorageError as exc:
                local.go_fatal(exc)
                return
            failures.reset()
            if count:
                idle.reset()
            elif not cfg.fetch_wait_s:
                await asyncio.sleep(idle.next_s())  # no long poll configured: back off

    async def _rebootstrap(self, failures: Backoff) -> None:
        try:
            async with self.local.replay_lock:
                await bootstrap(self.local)
        except (RpcError, InvalidArgument) as exc:
            delay = failures.next_s()
            log.warning("bootstrap from %s failed: %s (next try in %.2f s)",
                        self.local.namenodes[0], exc, delay)
            await asyncio.sleep(delay)

    async def fetch_once(self) -> int:
        """One fetch: apply and make durable what came; returns how many edits."""
        local = self.local
        first, count, data = await (self._from_journal() if self.tailer
                                    else self._from_namenode())
        local.last_fetch_ms = local.now_ms()
        if not count:
            return 0
        if first != local.synced_txid + 1:
            raise InvalidArgument(f"asked for txid {local.synced_txid + 1}, got {first}")
        records = decode_batch(first, count, data)
        async with local.replay_lock:
            if local.synced_txid + 1 != first:
                return 0  # a bootstrap moved us meanwhile
            assert local.namespace is not None and local.edits is not None
            last = apply_batch(records, local.namespace, local.edits)
            fault_point("backup.replayed_not_synced")
            await local.edits.sync(last)  # durable here before it is acknowledged
            local.synced_txid = last
        return count

    async def _from_namenode(self) -> tuple[int, int, bytes]:
        local = self.local
        cfg = local.config.backupnode
        request = FetchEditsRequest(local.synced_txid, cfg.fetch_batch_max, cfg.fetch_wait_s,
                                    self.address)
        answer = await local.namenode.call(
            FETCH_EDITS, request, timeout_s=local.config.rpc.call_timeout_s + cfg.fetch_wait_s
        )
        local.namenode_synced_txid = answer.namenode_synced_txid
        local.namenode_pid = answer.namenode_pid
        return answer.first_txid, answer.count, answer.records

    async def _from_journal(self) -> tuple[int, int, bytes]:
        """Committed records after the synced txid (no JournalNode answering: RpcError,
        retried with backoff like an unreachable NameNode)."""
        assert self.tailer is not None
        local = self.local
        try:
            answer = await self.tailer.next(local.synced_txid,
                                            local.config.backupnode.fetch_batch_max)
        except StorageError as exc:
            raise Unavailable(exc.message) from None
        local.namenode_synced_txid = max(local.namenode_synced_txid, answer.committed_txid)
        return answer.first_txid, answer.count, answer.records
