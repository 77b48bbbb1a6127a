"""A BackupNode's figures for /metrics and its status page (read when asked)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from xdfs.http.ui import when
from xdfs.metrics import Family, gauge

if TYPE_CHECKING:
    from xdfs.backupnode.local import Local
    from xdfs.protocol.backup import BackupStatus


def families(local: Local) -> Iterator[Family]:
    yield gauge("xdfs_backupnode_synced_txid", "Last transaction the backup holds durably",
                local.synced_txid)
    yield gauge("xdfs_backupnode_namenode_synced_txid", "The NameNode's synced transaction "
                "as of the backup's last fetch", local.namenode_synced_txid)
    yield gauge("xdfs_backupnode_journal_lag_txns", "Transactions the backup is behind its "
                "NameNode", max(0, local.namenode_synced_txid - local.synced_txid))
    yield gauge("xdfs_backupnode_image_txid", "Transaction of its newest checkpoint",
                local.image_txid)
    yield gauge("xdfs_backupnode_checkpoints_uploaded", "Checkpoints uploaded to the NameNode",
                local.checkpoints_uploaded)


def status_facts(status: BackupStatus) -> list[tuple[str, object]]:
    return [
        ("state", status.state),
        ("RPC address", status.address),
        ("follows", ", ".join(status.namenode)),
        ("synced txid", status.synced_txid),
        ("NameNode synced txid", status.namenode_synced_txid),
        ("behind (txns)", max(0, status.namenode_synced_txid - status.synced_txid)),
        ("last fetch", when(status.last_fetch_ms / 1000)),
        ("last checkpoint", f"txid {status.image_txid} at "
                            f"{when(status.last_checkpoint_ms / 1000)}"),
        ("checkpoints uploaded", status.checkpoints_uploaded),
        ("bootstraps", status.bootstraps),
        ("files and directories", status.inodes),
    ]
