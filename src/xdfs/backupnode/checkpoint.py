"""Checkpoints: by time or txn count (:func:`.replay.checkpoint_due`), replay pauses while
the image is written (in a thread), then the image is uploaded in chunks (head, bodies,
tail) and the NameNode installs it; old local images and edits are purged."""

from __future__ import annotations

import asyncio
import logging

from xdfs.backupnode.local import Local
from xdfs.common.faults import FAULTS, fault_point
from xdfs.common.images import image_chunks
from xdfs.errors import InvalidArgument, XdfsError
from xdfs.namenode.editlog.replay import checkpoint_due
from xdfs.namenode.image.fsimage import image_head
from xdfs.namenode.image.recovery import purge, save_checkpoint
from xdfs.protocol import namenode as nn_protocol
from xdfs.protocol.backup import UPLOAD_IMAGE
from xdfs.rpc.messages import Empty

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
        txid. Replay pauses only while the image is written."""
        local = self.local
        async with self._lock:
            async with local.replay_lock:
                assert local.namespace is not None
                txid = local.synced_txid
                if txid > local.image_txid:
                    await asyncio.to_thread(save_checkpoint, [local.dir], local.namespace, txid)
                    local.image_txid = txid
                    fault_point("backup.checkpoint_saved")
            local.last_checkpoint_s = local.clock()
            if local.image_txid > local.uploaded_txid:
                await self._upload(local.image_txid)
            await asyncio.to_thread(purge, [local.dir], local.config.backupnode.images_retained)
            return local.image_txid

    async def _upload(self, txid: int) -> None:
        local = self.local
        status = await local.namenode.call(nn_protocol.STATUS, Empty())
        if status.image_txid >= txid:
            local.uploaded_txid = txid  # it has this image (or a newer one) already
            return
        path = local.dir.image_path(txid)
        head = await asyncio.to_thread(image_head, path, txid)
        try:
            answer = await local.namenode.upload(UPLOAD_IMAGE, head, image_chunks(path))
        except InvalidArgument as exc:
            if "stale" not in exc.message:
                raise
            log.info("checkpoint %d not needed by the NameNode: %s", txid, exc.message)
        else:
            local.checkpoints_uploaded += 1
            log.info("checkpoint %d uploaded (%d bytes); the NameNode purged %d files",
                     txid, head.size_bytes, answer.purged_files)
        local.uploaded_txid = txid
