"""``xdfs namenode -format``: create the storage layout and the initial namespace.

The initial namespace holds the superuser (the formatting user, in the supergroup), a
token-signing key, the DataNode secret, ``/user`` and a world-writable sticky ``/tmp``; it
is saved as
``fsimage_0`` so the first edit is txid 1.
"""

from __future__ import annotations

import os
import secrets
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from xdfs.common.files import make_dirs
from xdfs.config import NameNodeConfig
from xdfs.namenode.image.recovery import save_checkpoint
from xdfs.namenode.image.storage import StorageDirectory
from xdfs.namenode.namespace.inodes import FIRST_INODE_ID
from xdfs.namenode.namespace.ops import AddTokenKeyOp, AddUserOp, MkdirOp, SetDataNodeSecretOp
from xdfs.namenode.namespace.tree import Namespace
from xdfs.namenode.namespace.tree_base import FIRST_BLOCK_ID
from xdfs.namenode.security import passwords
from xdfs.sharding.ids import first_id


@dataclass(frozen=True)
class Formatted:
    cluster_id: str
    namespace_id: int
    superuser: str
    #: Set only when the password was generated (print it once; it is stored hashed).
    generated_password: str


def format_namenode(
    name_dirs: list[Path],
    config: NameNodeConfig,
    *,
    superuser: str,
    password: str = "",
    cluster_id: str = "",
    force: bool = False,
    shard: int = 0,
    datanode_secret: bytes = b"",
) -> Formatted:
    """Format ``name_dirs``; ``shard`` > 0 makes the namespace metadata shard ``shard``:
    its inode and block ids start at ``sharding.ids.first_id(shard, ...)`` (0: an
    unsharded NameNode's ids, which are shard 0's). ``datanode_secret``: the cluster's
    DataNode secret (another shard's), else a new one."""
    generated = "" if password else secrets.token_urlsafe(12)
    password = password or generated
    cluster_id = cluster_id or f"CID-{uuid.uuid4()}"
    namespace_id = secrets.randbelow(2**31 - 1) + 1
    now_ms = int(time.time() * 1000)
    dirs = [StorageDirectory(d) for d in name_dirs]
    try:
        for d in dirs:
            make_dirs(Path(d.root))
            d.format(cluster_id, namespace_id, now_ms, force=force)
        namespace = initial_namespace(config, superuser, password, now_ms, shard=shard,
                                      datanode_secret=datanode_secret)
        save_checkpoint(dirs, namespace, 0)
    finally:
        for d in dirs:
            d.unlock()
    return Formatted(cluster_id, namespace_id, superuser, generated)


def initial_namespace(
    config: NameNodeConfig, superuser: str, password: str, now_ms: int, *, shard: int = 0,
    datanode_secret: bytes = b"",
) -> Namespace:
    ns = Namespace(superuser, config.supergroup, root_mtime_ms=now_ms)
    # The shard's id counters (saved in fsimage_0 with the rest): unique across shards.
    ns.next_inode_id = first_id(shard, FIRST_INODE_ID)
    ns.next_block_id = first_id(shard, FIRST_BLOCK_ID)
    salt = os.urandom(passwords.SALT_BYTES)
    made = passwords.new_credentials(password, salt)
    ns.apply(AddUserOp(superuser, b"", salt, (config.supergroup,), now_ms,
                       made.stored_key, made.server_key, made.iterations))
    key_expiry_ms = now_ms + int((config.token_key_rotation_s + config.token_lifetime_s) * 1000)
    ns.apply(AddTokenKeyOp(1, os.urandom(32), key_expiry_ms))
    secret = datanode_secret or os.urandom(passwords.DATANODE_SECRET_BYTES)
    ns.apply(SetDataNodeSecretOp(secret))
    ns.apply(MkdirOp("/user", ns.allocate_inode_id(), 0o755, superuser, config.supergroup, now_ms))
    ns.apply(MkdirOp("/tmp", ns.allocate_inode_id(), 0o1777, superuser, config.supergroup, now_ms))
    return ns
