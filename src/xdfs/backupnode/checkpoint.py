"""Checkpoints: by time or txn count (:func:`.replay.checkpoint_due`), replay pauses only
while the image writer is forked (it writes a copy-on-write copy of the namespace:
:mod:`xdfs.namenode.image.background`), then the image is uploaded in chunks (head, bodies,
tail) and the NameNode installs it; old local images and edits are purged."""

from __future__ import annotations

import asyncio
import logging

from xdfs.backupnode.local import Local
from xdfs.common.faults import FAULTS, fault_point
from xdfs.errors import XdfsError
from xdfs.namenode.editlog.replay import checkpoint_due
from xdfs.namenode.image.background import finish_checkpoint, start_checkpoint
from xdfs.namenode.image.recovery import purge
from xdfs.namenode.image.upload import upload_checkpoint

log = logging.getLogger(__name__)

FAULTS.register("backup.checkpoint_saved", "the backup saved its image, not yet uploaded")


class Checkpointer:
    def __init__(self, local: Local) -> None:
        self.local = local
        self._lock = asyncio.Lock()

    async def run(self) -> None:
        local = self.local
        cfg = local.config.backupnode
        while True:
            await asyncio.sleep(cfg.checkpoint_check_interval_s)
            due = checkpoint_due(
                now_s=local.clock(), last_checkpoint_s=local.last_checkpoint_s,
                synced_txid=local.synced_txid, image_txid=local.image_txid,
                period_s=cfg.checkpoint_period_s, txns=cfg.checkpoint_txns,
            )
            if due or local.image_txid > local.uploaded_txid:
                try:
                    await self.checkpoint()
                except XdfsError as exc:
                    log.warning("checkpoint: %s", exc.message)

    async def checkpoint(self) -> int:
        """Save an image of the namespace at the synced txid and upload it; returns its
        txid. Replay pauses only while the image writer is forked."""
        local = self.local
        async with self._lock:
            async with local.replay_lock:  # replay pauses only for the fork
                assert local.namespace is not None
                txid = local.synced_txid
                checkpoint = (start_checkpoint(
                    [local.dir], local.namespace, txid,
                    local.config.namenode.image_writer_timeout_s,
                ) if txid > local.image_txid else None)
            if checkpoint is not None:
                await finish_checkpoint(checkpoint)
                local.image_txid = txid
                fault_point("backup.checkpoint_saved")
            local.last_checkpoint_s = local.clock()
            if local.image_txid > local.uploaded_txid:
                await self._upload(local.image_txid)
            await asyncio.to_thread(purge, [local.dir], local.config.backupnode.images_retained)
            return local.image_txid

    async def _upload(self, txid: int) -> None:
        local = self.local
        if await upload_checkpoint(local.namenode, local.dir.image_path(txid), txid):
            local.checkpoints_uploaded += 1
        local.uploaded_txid = txid
