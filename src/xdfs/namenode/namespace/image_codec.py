"""A :class:`~xdfs.namenode.namespace.tree.Namespace` to and from fsimage records (pure).

Split from ``namespace.py`` to keep that module about the live tree. Loading is the hot loop
of startup (aim: >= 1M inodes/s), so it fills the namespace's private indexes directly
instead of going through ``apply``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from xdfs.errors import StorageError
from xdfs.namenode.namespace import permissions as perm
from xdfs.namenode.namespace import quota
from xdfs.namenode.namespace.inodes import FIRST_INODE_ID, ROOT_ID, DirInode, FileInode, Inode
from xdfs.namenode.namespace.ops import ImageHeader, InodeRecord, TokenKeyRecord, UserRecord
from xdfs.namenode.security.passwords import converted_record

if TYPE_CHECKING:
    # The namespace's state without its live-tree methods: tree.Namespace uses this module.
    from xdfs.namenode.namespace.tree_users import UserOps


def corrupt(detail: str) -> StorageError:
    return StorageError(f"corrupt image: {detail}")


def load_into(
    ns: UserOps,
    header: ImageHeader,
    inodes: Iterable[InodeRecord],
    users: Iterable[UserRecord],
    token_keys: Iterable[TokenKeyRecord],
) -> None:
    """Fill the empty ``ns`` exactly from image records; StorageError("corrupt image ...")
    when the records do not form a tree that matches the header."""
    records = iter(inodes)
    limited: list[DirInode] = []
    _load_root(ns, next(records, None), limited)
    count = _load_inodes(ns, records, header.next_inode_id, limited)
    if count != header.inode_count:
        raise corrupt(f"{count} inodes, header says {header.inode_count}")
    ns._inode_count = count
    # (an older image's scrypt hashes become SCRAM credentials: the next image has none)
    ns.users = {record.name: converted_record(record) for record in users}
    ns.token_keys = {record.key_id: record for record in token_keys}
    if (len(ns.users), len(ns.token_keys)) != (header.user_count, header.token_key_count):
        raise corrupt("user or token key count differs from the header")
    ns.next_inode_id = header.next_inode_id
    ns.next_block_id = header.next_block_id
    ns.next_genstamp = header.next_genstamp
    ns.epoch = header.epoch
    ns.next_generation = max(
        [header.next_generation, *(record.generation + 1 for record in ns.users.values())]
    )
    ns.datanode_secret = header.datanode_secret
    _count_quota_usage(ns, limited)


def _count_quota_usage(ns: UserOps, limited: list[DirInode]) -> None:
    """The usage of every directory with a quota, deepest first (records come parents
    first), so each counts a nested quota's tree from that quota's usage."""
    for node in reversed(limited):
        names, space = quota.usage(node, ns._quotas, ns._uc)
        found = ns._quotas[node.id]
        found.names, found.space = names, space


def _load_root(ns: UserOps, record: InodeRecord | None, limited: list[DirInode]) -> None:
    if record is None:
        raise corrupt("no root inode")
    if (record.inode_id, record.parent_id, record.name, record.is_dir) != (
        ROOT_ID, 0, "", True,
    ):
        raise corrupt(f"first record is not the root: {record!r}")
    root = ns._root
    root.mode = ns._shared_int(record.mode & perm.MODE_MASK)
    root.owner = sys.intern(record.owner)
    root.group = sys.intern(record.group)
    root.mtime_ms = record.mtime_ms
    root.atime_ms = record.atime_ms
    _load_quota(ns, record, root, limited)


def _load_quota(
    ns: UserOps, rec: InodeRecord, node: DirInode, limited: list[DirInode]
) -> None:
    if rec.ns_quota != quota.NO_QUOTA or rec.ds_quota != quota.NO_QUOTA:
        if min(rec.ns_quota, rec.ds_quota) < quota.NO_QUOTA:
            raise corrupt(f"negative quota on inode {rec.inode_id}")
        ns._quotas[rec.inode_id] = quota.Quota(rec.ns_quota, rec.ds_quota)
        limited.append(node)


def _load_inodes(
    ns: UserOps, records: Iterator[InodeRecord], next_inode_id: int, limited: list[DirInode]
) -> int:
    """Records come parents first, mostly grouped by parent, so the parent lookup is
    cached; mode, block size, owner and group are shared across inodes; atime shares
    mtime's int when equal. Every block is indexed to its file as it is seen; directories
    with a quota are added to ``limited`` (their usage is counted once all are loaded)."""
    dirs = ns._dirs
    uc = ns._uc
    ints = ns._ints
    block_index = ns._blocks
    intern = sys.intern
    parent = ns._root
    parent_id = ROOT_ID
    children = parent.children
    count = 1
    for rec in records:
        if rec.parent_id != parent_id:
            found = dirs.get(rec.parent_id)
            if found is None:
                raise corrupt(f"inode {rec.inode_id} comes before its parent {rec.parent_id}")
            parent, parent_id, children = found, rec.parent_id, found.children
        name = rec.name
        inode_id = rec.inode_id
        if name in children or inode_id in dirs or not name:
            raise corrupt(f"duplicate name or id: {name!r} in {parent_id}, id {inode_id}")
        if not FIRST_INODE_ID <= inode_id < next_inode_id:
            raise corrupt(f"inode id {inode_id} outside [2, next_inode_id)")
        mtime = rec.mtime_ms
        atime = mtime if rec.atime_ms == mtime else rec.atime_ms
        mode = rec.mode & 0o7777
        node: Inode
        if rec.is_dir:
            node = DirInode(
                inode_id, parent.id, name, ints.setdefault(mode, mode), intern(rec.owner),
                intern(rec.group), mtime, atime, {},
            )
            dirs[inode_id] = node
            if rec.ns_quota != rec.ds_quota or rec.ns_quota != quota.NO_QUOTA:
                _load_quota(ns, rec, node, limited)
        else:
            size = rec.block_size
            node = FileInode(
                inode_id, parent.id, name, ints.setdefault(mode, mode), intern(rec.owner),
                intern(rec.group), mtime, atime, rec.replication, ints.setdefault(size, size),
                rec.blocks,
            )
            for block in rec.blocks:
                if block_index.setdefault(block.block_id, node) is not node:
                    raise corrupt(f"block {block.block_id} belongs to two files")
            if rec.client:
                uc[node] = rec.client
            if rec.truncating:
                ns._truncating.add(node)
        children[name] = node
        count += 1
    return count


def inode_records(ns: UserOps) -> Iterator[InodeRecord]:
    """Every inode, root first, parents before children (a directory's children are
    emitted together, after the directory itself). Siblings come in dict order: a
    checkpoint must not pay for sorting every directory."""
    uc = ns._uc
    quotas = ns._quotas
    stack: list[DirInode] = [ns._root]
    truncating = ns._truncating
    yield _record(ns._root, uc, truncating, quotas)
    while stack:
        directory = stack.pop()
        for child in directory.children.values():
            yield _record(child, uc, truncating, quotas)
            if isinstance(child, DirInode):
                stack.append(child)


def _record(node: Inode, uc: dict[FileInode, str], truncating: set[FileInode],
            quotas: dict[int, quota.Quota]) -> InodeRecord:
    if isinstance(node, FileInode):
        return InodeRecord(
            node.id, node.parent, node.name, False, node.mode, node.owner, node.group,
            node.mtime_ms, node.atime_ms, node.replication, node.block_size, node.blocks,
            uc.get(node, ""), node in truncating,
        )
    limits = quotas.get(node.id)
    if limits is None:
        return InodeRecord(
            node.id, node.parent, node.name, True, node.mode, node.owner, node.group,
            node.mtime_ms, node.atime_ms,
        )
    return InodeRecord(
        node.id, node.parent, node.name, True, node.mode, node.owner, node.group,
        node.mtime_ms, node.atime_ms, ns_quota=limits.ns_quota, ds_quota=limits.ds_quota,
    )


def canonical_dump(
    ns: UserOps, walked: Iterable[tuple[str, Inode]]
) -> list[tuple[object, ...]]:
    """See :meth:`Namespace.canonical_dump`; ``walked``: its whole tree, sorted."""
    dump: list[tuple[object, ...]] = [(
        "namespace", ns.superuser, ns.supergroup, ns.next_inode_id,
        ns.next_block_id, ns.next_genstamp, ns._inode_count, ns.epoch, ns.next_generation,
        ns.datanode_secret,
    )]
    for path, node in walked:
        if isinstance(node, FileInode):
            blocks = tuple((b.block_id, b.genstamp, b.num_bytes) for b in node.blocks)
            extra: tuple[object, ...] = (
                node.replication, node.block_size, blocks, ns._uc.get(node, ""),
                node in ns._truncating,
            )
        else:
            extra = ()
        dump.append((
            "inode", path, node.id, node.parent, isinstance(node, DirInode), node.mode,
            node.owner, node.group, node.mtime_ms, node.atime_ms, *extra,
        ))
        limits = ns._quotas.get(node.id)
        if limits is not None:  # usage too: replay and image must count alike
            dump.append(("quota", path, limits.ns_quota, limits.ds_quota, limits.names,
                         limits.space))
    for user in ns.user_records():
        dump.append((
            "user", user.name, user.password_hash, user.salt, tuple(user.groups),
            user.created_ms, user.generation, user.stored_key, user.server_key,
            user.iterations,
        ))
    for key in ns.token_key_records():
        dump.append(("token_key", key.key_id, key.secret, key.expires_ms))
    return dump
