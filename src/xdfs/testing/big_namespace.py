"""Large namespaces built fast, for tests and benchmarks of whole-namespace walks.

:func:`grow_image` rewrites the ``fsimage_0`` of freshly formatted name dirs with a tree of
``dirs`` directories of ``files_per_dir`` empty closed files each added under ``/<top>``,
straight through the image writer (about a million inodes in a few seconds, where creating
them through RPC would take many minutes). Start a NameNode on the dirs afterwards
(``MiniCluster.start_namenode(format_dirs=False)`` or ``xdfs namenode``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import msgspec

from xdfs.common.images import md5_name
from xdfs.namenode.image.fsimage import load_image, save_image
from xdfs.namenode.image.storage import StorageDirectory
from xdfs.namenode.namespace.inodes import ROOT_ID
from xdfs.namenode.namespace.ops import ImageHeader, InodeRecord, TokenKeyRecord, UserRecord

_Loaded = tuple[list[InodeRecord], list[UserRecord], list[TokenKeyRecord]]


def grow_image(name_dirs: list[Path], top: str, dirs: int, files_per_dir: int, *,
               owner: str = "") -> int:
    """Add ``/<top>/dNNNNNN/fNNNNNN`` to the ``fsimage_0`` of formatted ``name_dirs`` (no
    edits yet); returns the number of inodes added. Owned by ``owner`` (default: the
    superuser) and the supergroup, mode 755/644."""
    storage = [StorageDirectory(d) for d in name_dirs]
    header, (records, users, keys) = load_image(storage[0].image_path(0), _keep)
    added = 1 + dirs * (1 + files_per_dir)
    grown = msgspec.structs.replace(
        header, inode_count=header.inode_count + added,
        next_inode_id=header.next_inode_id + added,
    )
    for d in storage:
        d.image_path(0).unlink()
        (d.current / md5_name(0)).unlink()
    tree = _tree(header, top, dirs, files_per_dir, owner or header.superuser)
    save_image(storage, grown, _Source([*records], tree, users, keys))
    return added


def _keep(header: ImageHeader, inodes: Iterator[InodeRecord], users: list[UserRecord],
          keys: list[TokenKeyRecord]) -> _Loaded:
    return list(inodes), users, keys


def _tree(header: ImageHeader, top: str, dirs: int, files_per_dir: int,
          owner: str) -> Iterator[InodeRecord]:
    """Parents first, as the loader wants them."""
    group = header.supergroup
    now_ms = int(time.time() * 1000)
    top_id = header.next_inode_id
    yield InodeRecord(top_id, ROOT_ID, top, True, 0o755, owner, group, now_ms, now_ms)
    next_id = top_id + 1
    for d in range(dirs):
        dir_id = next_id
        yield InodeRecord(dir_id, top_id, f"d{d:06d}", True, 0o755, owner, group, now_ms, now_ms)
        for f in range(files_per_dir):
            yield InodeRecord(dir_id + 1 + f, dir_id, f"f{f:06d}", False, 0o644, owner, group,
                              now_ms, now_ms, replication=1, block_size=128 * 1024 * 1024)
        next_id = dir_id + 1 + files_per_dir


class _Source:
    def __init__(self, records: list[InodeRecord], tree: Iterator[InodeRecord],
                 users: list[UserRecord], keys: list[TokenKeyRecord]) -> None:
        self._records, self._tree, self._users, self._keys = records, tree, users, keys

    def iter_inode_records(self) -> Iterator[InodeRecord]:
        yield from self._records
        yield from self._tree

    def user_records(self) -> list[UserRecord]:
        return self._users

    def token_key_records(self) -> list[TokenKeyRecord]:
        return self._keys
