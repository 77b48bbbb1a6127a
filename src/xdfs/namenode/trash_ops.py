"""The trash's namespace operations (HDFS's TrashPolicyDefault): where a deleted entry goes,
restore, expunge and the emptier's checkpoints. Path rules are in :mod:`trash`; every
change goes through :meth:`Namesystem.mutate` like any other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xdfs.errors import AlreadyExists
from xdfs.namenode.namespace import paths, trash
from xdfs.namenode.namespace.ops import DeleteOp, MkdirOp, Op, RenameOp
from xdfs.protocol.namenode import DEFAULT_MODE, FileStatus

if TYPE_CHECKING:
    from xdfs.namenode.namesystem import Namesystem

W, X = 2, 1
_TRASH_DIR_MODE = 0o700


class TrashOps:
    def __init__(self, fs: Namesystem) -> None:
        self.fs = fs
        self.ns = fs.ns
        self.config = fs.config

    def target(self, user: str, path: str) -> str:
        """A free trash path for ``path`` (naming rules in :mod:`trash`). Where an earlier
        deletion left a *file* on the way (``/tmp/a`` trashed, then ``/tmp/a/b``), that
        component takes a fresh name, as in HDFS's TrashPolicyDefault, instead of failing
        the deletion."""
        names = paths.split_path(path)
        where = trash.current_dir(user)
        for depth, name in enumerate(names):
            if depth == len(names) - 1:
                return self._free_name(where, name)
            plain = f"{where}/{name}"
            if trash.needs_suffix(name):
                plain += trash.DIR_SUFFIX
            if self.ns.exists(plain) and not self.ns.is_dir(plain):
                plain = self._free_name(where, name)
            where = plain
        return where

    def _free_name(self, directory: str, name: str) -> str:
        target = f"{directory}/{name}"
        if not trash.needs_suffix(name) and not self.ns.exists(target):
            return target
        candidate = f"{directory}/{trash.suffixed(name, self.fs.now_ms())}"
        while self.ns.exists(candidate):
            candidate += "_"
        return candidate

    def dirs(self, user: str, directory: str) -> list[Op]:
        """Mkdir ops for a trash directory: /user (root's), the home and the trash (user's)."""
        ops: list[Op] = []
        now = self.fs.now_ms()
        for d in self.ns.missing_ancestors(directory):
            owner = self.ns.superuser if d == "/user" else user
            mode = 0o755 if d in ("/user", trash.home(user)) else _TRASH_DIR_MODE
            ops.append(
                MkdirOp(d, self.ns.allocate_inode_id(), mode, owner, self.config.supergroup, now)
            )
        # The ops above are not applied yet: missing_ancestors was computed once, correctly.
        return ops

    async def restore(self, user: str, trash_path: str) -> str:
        trash_path = paths.normalize(trash_path)
        original = trash.original_path(trash_path)

        def plan() -> list[Op]:
            self.ns.check_access(user, trash_path, parent_access=W | X, parent_owner_sticky=True)
            self.ns.stat(trash_path)  # NotFound before any op: no parents made for nothing
            if self.ns.exists(original):
                raise AlreadyExists(f"cannot restore: {original} exists again")
            parent = paths.parent_of(original)
            self.fs._check_parent_is_dir(parent)
            self.ns.check_access(user, original, ancestor_access=W | X)
            ops = self.fs._mkdir_ops(
                parent,
                user,
                self.fs._default_mode(True, DEFAULT_MODE),
                self.fs._default_mode(True, DEFAULT_MODE),
            )
            ops.append(RenameOp(trash_path, original, self.fs.now_ms()))
            return ops

        return await self.fs.mutate("restore", plan, lambda: original)

    def checkpoint_ops(self, user: str, *, immediate: bool) -> list[Op]:
        """Ops that roll ``user``'s Current into a checkpoint and delete expired checkpoints
        (``immediate``: delete the whole trash)."""
        root = trash.trash_root(user)
        if not self.ns.exists(root):
            return []
        now = self.fs.now_ms()
        names = [s.path.rsplit("/", 1)[1] for s in self._all_entries(root)]
        if immediate:
            return [DeleteOp(f"{root}/{name}", now) for name in names]
        ops: list[Op] = []
        if trash.CURRENT in names:
            # Names have a resolution of one second: a second roll within the same second
            # takes the next free second rather than leaving Current where it is.
            stamp_ms = now
            checkpoint = f"{root}/{trash.checkpoint_name(stamp_ms)}"
            while self.ns.exists(checkpoint):
                stamp_ms += 1000
                checkpoint = f"{root}/{trash.checkpoint_name(stamp_ms)}"
            ops.append(RenameOp(f"{root}/{trash.CURRENT}", checkpoint, now))
        for name in trash.expired_checkpoints(names, now, self.config.trash_interval_s):
            ops.append(DeleteOp(f"{root}/{name}", now))
        return ops

    def _all_entries(self, directory: str) -> list[FileStatus]:
        entries: list[FileStatus] = []
        start = ""
        while True:
            page, remaining = self.ns.list_dir(directory, start, self.config.list_limit_max)
            entries.extend(page)
            if not remaining or not page:
                return entries
            start = page[-1].path.rsplit("/", 1)[1]

    async def expunge(self, user: str, immediate: bool) -> None:
        await self.fs.mutate(
            "expunge", lambda: self.checkpoint_ops(user, immediate=immediate), lambda: None
        )

    def users(self) -> list[str]:
        """Users with a trash directory (the emptier's round)."""
        if not self.ns.exists("/user"):
            return []
        return [
            s.path.rsplit("/", 1)[1]
            for s in self._all_entries("/user")
            if s.is_dir and self.ns.exists(s.path + "/" + trash.TRASH)
        ]

