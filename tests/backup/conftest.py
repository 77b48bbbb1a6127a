"""Shared helpers of the BackupNode tests: fast settings, a canonical namespace dump, waits."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import msgspec

from xdfs.backupnode.server import BackupNode
from xdfs.client.client import AsyncClient
from xdfs.config import XdfsConfig
from xdfs.namenode.namespace.tree import Namespace
from xdfs.namenode.server import NameNode
from xdfs.testing.poll import eventually

ROOT = "root"
ROOT_PW = "rootpw"


def backup_config(**backupnode: Any) -> XdfsConfig:
    """Short long polls and a checkpointer that looks often (checkpoints stay off unless a
    test lowers ``checkpoint_txns``)."""
    base = XdfsConfig()
    settings = {"fetch_wait_s": 0.2, "checkpoint_check_interval_s": 0.2,
                "checkpoint_txns": 10**9, **backupnode}
    return replace(base, backupnode=replace(base.backupnode, **settings),
                   rpc=replace(base.rpc, retry_backoff_max_s=0.2))


def connect(*addresses: str, config: XdfsConfig | None = None, **kwargs: Any) -> AsyncClient:
    """A superuser AsyncClient of ``addresses`` (tried in order) ignoring the environment."""
    options: dict[str, Any] = {"user": ROOT, "password": ROOT_PW, "token": "", **kwargs}
    return AsyncClient("xdfs://" + ",".join(addresses), config=config or XdfsConfig(),
                       **options)


def canonical_dump(namespace: Namespace) -> list[Any]:
    """Everything an image holds, as plain data sorted by inode id: two namespaces are the
    same exactly when their dumps are equal."""
    inodes = sorted(msgspec.to_builtins(r) for r in namespace.iter_inode_records())
    users = sorted(msgspec.to_builtins(list(namespace.user_records())))
    keys = sorted(msgspec.to_builtins(list(namespace.token_key_records())))
    counters = [namespace.next_inode_id, namespace.next_block_id, namespace.next_genstamp]
    return [inodes, users, keys, counters]


async def caught_up(nn: NameNode, backup: BackupNode) -> None:
    assert nn.edits is not None
    edits = nn.edits
    await eventually(lambda: backup.synced_txid == edits.synced_txid,
                     what=f"backup caught up with the NameNode at {nn.address}")
