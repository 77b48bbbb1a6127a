"""A BackupNode's figures for /metrics and its status page (read when asked)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from xdfs.metrics import Family, gauge

if TYPE_CHECKING:
    from xdfs.backupnode.server import BackupNode


def families(node: BackupNode) -> Iterator[Family]:
    local = node.local
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


def status_facts(node: BackupNode) -> list[tuple[str, object]]:
    status = node.status()
    return [(name.replace("_", " "), getattr(status, name))
            for name in status.__struct_fields__]
