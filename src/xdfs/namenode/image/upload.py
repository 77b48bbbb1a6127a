"""Uploading a checkpoint to the active NameNode (a BackupNode's or a standby's image): the
active installs it and purges what it no longer needs, so it need not pause to write
images itself (seed 003)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from xdfs.common.images import image_chunks
from xdfs.errors import InvalidArgument
from xdfs.namenode.image.fsimage import image_head
from xdfs.protocol import namenode as nn_protocol
from xdfs.protocol.backup import UPLOAD_IMAGE
from xdfs.rpc.client import RpcClient
from xdfs.rpc.messages import Empty

log = logging.getLogger(__name__)


async def upload_checkpoint(rpc: RpcClient, path: Path, txid: int) -> bool:
    """Upload the image at ``path`` (of ``txid``) unless the NameNode holds it or a newer
    one; True when it was installed."""
    status = await rpc.call(nn_protocol.STATUS, Empty())
    if status.image_txid >= txid:
        return False
    head = await asyncio.to_thread(image_head, path, txid)
    try:
        answer = await rpc.upload(UPLOAD_IMAGE, head, image_chunks(path))
    except InvalidArgument as exc:
        if "stale" not in exc.message:
            raise
        log.info("checkpoint %d not needed by the NameNode: %s", txid, exc.message)
        return False
    log.info("checkpoint %d uploaded (%d bytes); the NameNode purged %d files",
             txid, head.size_bytes, answer.purged_files)
    return True
