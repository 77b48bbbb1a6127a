"""Bootstrap: the BackupNode's local state from the NameNode's newest image, on first
start (an empty name dir, formatted with the NameNode's ids) and whenever the NameNode has
purged edits the backup still needs."""

from __future__ import annotations

import asyncio
import logging

from xdfs.backupnode.local import BackupState, Local
from xdfs.common.files import fsync_dir
from xdfs.common.images import md5_name, receive_image
from xdfs.editlog.segments import segment_index
from xdfs.errors import StorageError
from xdfs.namenode.image.fsimage import header_check
from xdfs.namenode.image.storage import StorageDirectory
from xdfs.protocol import namenode as nn_protocol
from xdfs.protocol.backup import FETCH_IMAGE
from xdfs.rpc.messages import Empty

log = logging.getLogger(__name__)


async def open_storage(local: Local) -> None:
    """The local state at start: loaded from the name dir, or bootstrapped when it has no
    image yet."""
    if not local.dir.is_formatted() or not local.dir.images():
        await bootstrap(local)
        return
    await local.load()


async def bootstrap(local: Local) -> None:
    """Replace the local state with the NameNode's newest image."""
    previous, local.state = local.state, BackupState.BOOTSTRAPPING
    rpc = local.namenode
    status = await rpc.call(nn_protocol.STATUS, Empty())
    directory = local.dir
    if not directory.is_formatted():
        await asyncio.to_thread(directory.format, status.cluster_id, status.namespace_id,
                                local.now_ms())
    version = directory.read_version()
    ids = (version.namespace_id, version.cluster_id)
    if (status.namespace_id, status.cluster_id) != ids:
        raise StorageError(
            f"{directory.root} holds namespace {ids[0]} of cluster {ids[1]}; the NameNode "
            f"at {rpc.current_address} serves {status.namespace_id} of {status.cluster_id}"
        )
    if local.edits is not None:
        await local.edits.close()
        local.edits = None
    async with await rpc.download(FETCH_IMAGE, Empty()) as stream:
        path = await receive_image(stream.head, stream, directory.current,
                                   check=header_check(stream.head, ids))
        txid = stream.head.txid
    await asyncio.to_thread(_drop_local_state_before, directory, txid)
    log.info("bootstrapped from the NameNode's image %s", path.name)
    local.bootstraps += 1
    await local.load()
    local.uploaded_txid = txid  # the NameNode has this one
    local.state = previous


def _drop_local_state_before(directory: StorageDirectory, txid: int) -> None:
    """After installing the NameNode's image at ``txid``: older images and every segment
    ending before it are useless (a gap follows them), so they go."""
    current = directory.current
    for old in directory.images():
        if old < txid:
            directory.image_path(old).unlink(missing_ok=True)
            (current / md5_name(old)).unlink(missing_ok=True)
    for seg in segment_index(current):
        if seg.start <= txid:
            seg.path.unlink(missing_ok=True)
    directory.write_seen_txid(txid)
    fsync_dir(current)
