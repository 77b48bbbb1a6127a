"""The BackupNode's protocols (seed 000, seed 003's checkpoint upload).

``NAMENODE_BACKUP_PROTOCOL`` is served by the NameNode to its backup (superuser only):

* ``fetch_edits``: synced edits after ``synced_txid`` as raw framed records (the edits
  segment record format, CRC32C per record), at most ``max_count``; a long poll: when
  nothing is synced beyond ``synced_txid`` the NameNode waits up to ``wait_s`` for more.
  :class:`~xdfs.errors.EditsPurged` when the NameNode no longer has the next txid (the
  backup then bootstraps from ``fetch_image``); InvalidArgument for a txid from the future.
* ``fetch_image``: download of the NameNode's newest ``fsimage_<txid>`` (head: txid, size,
  md5); also used by ``xdfs admin -fetchImage``.
* ``upload_image``: a checkpoint as a chunked upload (head with txid, size and md5, N chunks,
  tail); the NameNode verifies size and md5 and installs ``fsimage_<txid>`` atomically.

``BACKUP_SERVICE`` is served by the BackupNode: its status, and ``transition_to_active``.
"""

from __future__ import annotations

import msgspec

from xdfs.rpc.messages import Empty
from xdfs.rpc.service import Method, MethodKind, Service


class FetchEditsRequest(msgspec.Struct):
    synced_txid: int  # the last txid the backup holds durably: its acknowledgement
    max_count: int
    wait_s: float = 0.0  # long poll: how long to wait when nothing is newer
    backup_address: str = ""  # where the backup serves (shown by admin -report)


class FetchEditsResponse(msgspec.Struct):
    first_txid: int  # of the first record in ``records`` (synced_txid + 1)
    count: int
    records: bytes  # ``count`` framed edit records, back to back
    namenode_synced_txid: int  # how far the NameNode is durable (for the backup's lag)
    source: str = ""  # "cache", "segment" or "buffer": where the replicator found them
    namenode_pid: int = 0  # the NameNode's process id (a fencing method's $target_pid)


class ImageHead(msgspec.Struct):
    txid: int
    size_bytes: int
    md5: str  # hex


class UploadImageResponse(msgspec.Struct):
    installed: bool  # False: the NameNode already had an image at least as new
    image_txid: int  # the NameNode's newest image after the upload
    purged_files: int = 0


class BackupStatus(msgspec.Struct):
    state: str  # "starting", "bootstrapping", "following", "fencing", "promoting", "active"
    address: str
    namenode: list[str]
    synced_txid: int  # the last txid replayed and durable on the backup
    namenode_synced_txid: int  # as of the last fetch
    last_fetch_ms: int  # wall clock of the last successful fetch (0: none yet)
    image_txid: int  # the backup's newest local image
    last_checkpoint_ms: int
    checkpoints_uploaded: int
    bootstraps: int  # times the backup (re)loaded the NameNode's image
    inodes: int


class TakeoverResponse(msgspec.Struct):
    address: str
    last_txid: int  # the last txid of the namespace now served (its NewEpochOp)
    took_s: float
    epoch: int = 0  # the active epoch the promotion raised
    fenced_by: str = ""  # the fencing method that succeeded


FETCH_EDITS = Method(
    "fetch_edits", FetchEditsRequest, FetchEditsResponse, idempotent=True,
    doc="Synced edits after synced_txid (at most max_count), long-polled up to wait_s.",
)
FETCH_IMAGE = Method(
    "fetch_image", Empty, ImageHead, idempotent=True, kind=MethodKind.DOWNLOAD,
    doc="Download the newest fsimage (head: txid, size, md5).",
)
UPLOAD_IMAGE = Method(
    "upload_image", ImageHead, UploadImageResponse, idempotent=False,
    kind=MethodKind.UPLOAD,
    doc="Install a checkpoint image sent in chunks; md5 and size are verified.",
)
NAMENODE_BACKUP_PROTOCOL = Service(
    "namenode.backup", (FETCH_EDITS, FETCH_IMAGE, UPLOAD_IMAGE)
)

BACKUP_STATUS = Method(
    "backup_status", Empty, BackupStatus, idempotent=True,
    doc="The BackupNode's replay position, lag and checkpoints.",
)
TRANSITION_TO_ACTIVE = Method(
    "transition_to_active", Empty, TakeoverResponse, idempotent=False,
    doc="Fence the NameNode, then promote the backup (refused while the NameNode answers "
        "or when no fencing method succeeds).",
)
BACKUP_SERVICE = Service("backupnode", (BACKUP_STATUS, TRANSITION_TO_ACTIVE))
