"""What every piece of the BackupNode shares (:class:`Local`): its name dir, the namespace it
keeps in memory and its own edits log, how far each goes, what it last heard from the
NameNode, and its state (:class:`BackupState`).

The pieces: :mod:`.bootstrap` (the first image, and again when the NameNode purged what
the backup needs), :mod:`.follow` (fetching, replaying, syncing edits), :mod:`.checkpoint`
(saving and uploading images), :mod:`.takeover` (fencing the NameNode and becoming one);
:mod:`.server` runs them.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from xdfs.config import XdfsConfig
from xdfs.namenode.editlog.editlog import EditLog, EditLogSettings
from xdfs.namenode.image.recovery import load_namespace
from xdfs.namenode.image.storage import StorageDirectory
from xdfs.namenode.namespace.tree import Namespace
from xdfs.rpc.client import RpcClient

log = logging.getLogger(__name__)


class BackupState(enum.StrEnum):
    STARTING = "starting"
    FOLLOWING = "following"
    BOOTSTRAPPING = "bootstrapping"
    FENCING = "fencing"
    PROMOTING = "promoting"
    ACTIVE = "active"


@dataclass(eq=False)
class Local:
    config: XdfsConfig
    dir: StorageDirectory
    namenodes: list[str]
    clock: Callable[[], float]
    state: BackupState = BackupState.STARTING
    rpc: RpcClient | None = None  # to the NameNode, from start()
    namespace: Namespace | None = None
    edits: EditLog | None = None
    synced_txid: int = 0  # applied and durable here: what the next fetch acknowledges
    image_txid: int = 0  # the newest local image
    uploaded_txid: int = 0  # the newest image the NameNode is known to hold
    bootstraps: int = 0
    checkpoints_uploaded: int = 0
    last_checkpoint_s: float = 0.0  # set to the start by __post_init__
    namenode_synced_txid: int = 0  # as the NameNode's last fetch answer said
    namenode_pid: int = 0  # ditto (for fencing)
    last_fetch_ms: int = 0
    fatal: BaseException | None = None
    stopped: asyncio.Event = field(default_factory=asyncio.Event)
    # Held while the namespace and the local edits log change together (replay, bootstrap)
    # and while an image of them is written: a checkpoint sees exactly txids <= its txid.
    replay_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def __post_init__(self) -> None:
        self.last_checkpoint_s = self.clock()

    @property
    def namenode(self) -> RpcClient:
        assert self.rpc is not None, "not started"
        return self.rpc

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def go_fatal(self, error: BaseException) -> None:
        log.critical("BackupNode stopping: %s", error)
        self.fatal = error
        self.stopped.set()

    async def load(self) -> None:
        """Load the newest local image, replay the local edits, open the edits log after
        them."""
        namespace, last_txid = await asyncio.to_thread(load_namespace, [self.dir], Namespace)
        self.namespace = namespace
        self.image_txid = max(self.dir.images(), default=0)
        self.uploaded_txid = 0  # unknown: the checkpointer asks the NameNode
        settings = EditLogSettings.from_config(self.config.namenode)
        self.edits = EditLog.for_storage([self.dir], settings, on_fatal=self.go_fatal)
        await self.edits.open_for_write(last_txid + 1)
        self.synced_txid = last_txid
        log.info("backup namespace loaded: %d inodes, txid %d",
                 namespace.inode_count(), last_txid)
