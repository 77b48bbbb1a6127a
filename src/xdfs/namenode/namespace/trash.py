"""Trash rules and the trash's plans over the namespace (pure; HDFS's TrashPolicyDefault).

``rm`` moves ``/a/b`` to ``/user/<user>/.Trash/Current/a/b``; the emptier renames
``Current`` to a ``yyMMddHHmmss`` checkpoint (UTC) and deletes checkpoints older than the
trash interval; ``restore`` moves an entry of ``Current`` or of a checkpoint back to the
path it came from.

When a name is taken in the trash (the same path deleted twice, or a file where a later
deletion needs a directory), the new entry's name gets the time in ms appended, as in HDFS
(``b`` -> ``b1700000000123``, then ``_`` per further collision in the same ms). So that
``restore`` can always strip that suffix, a name that already ends in 13 digits (and
optional ``_``) always gets one in the trash: a deleted file ``log1700000000000`` is
``log17000000000001700000000123`` there, and a directory of such a name on the way to an
entry is ``<name>0000000000000``. Every trash name then maps back to exactly one original.
"""

from __future__ import annotations

import datetime as dt
import re

from xdfs.common.paths import join, split_path
from xdfs.errors import InvalidArgument
from xdfs.namenode.namespace.inodes import DirInode
from xdfs.namenode.namespace.ops import DeleteOp, MkdirOp, Op, RenameOp
from xdfs.namenode.namespace.resolved import INodesInPath
from xdfs.namenode.namespace.tree import Namespace
from xdfs.protocol.namenode import FileStatus

TRASH = ".Trash"
CURRENT = "Current"
_CHECKPOINT_FORMAT = "%y%m%d%H%M%S"
#: A trash name with a collision suffix: the original name, 13 digits of ms, then "_"s.
_SUFFIXED = re.compile(r"^(.+)\d{13}_*$")
#: The suffix of a directory on the way to a trash entry whose name needs one.
DIR_SUFFIX = "0" * 13


def home(user: str) -> str:
    return f"/user/{user}"


def trash_root(user: str) -> str:
    return f"/user/{user}/{TRASH}"


def current_dir(user: str) -> str:
    return f"{trash_root(user)}/{CURRENT}"


def is_in_trash(path: str) -> bool:
    parts = split_path(path)
    return len(parts) >= 3 and parts[0] == "user" and parts[2] == TRASH


def original_path(trash_path: str) -> str:
    """``/user/u/.Trash/<Current|checkpoint>/a/b`` -> ``/a/b``."""
    parts = split_path(trash_path)
    if len(parts) < 5 or parts[0] != "user" or parts[2] != TRASH:
        raise InvalidArgument(f"{trash_path} is not an entry inside a trash directory")
    if parts[3] != CURRENT and checkpoint_time_ms(parts[3]) is None:
        raise InvalidArgument(f"{trash_path}: {parts[3]} is not Current or a trash checkpoint")
    return join(tuple(original_name(name) for name in parts[4:]))


def needs_suffix(name: str) -> bool:
    """True for a name that looks suffixed already: in the trash it always gets a suffix."""
    return _SUFFIXED.match(name) is not None


def suffixed(name: str, now_ms: int) -> str:
    return f"{name}{now_ms:013d}"


def original_name(trash_name: str) -> str:
    """A trash entry's name without its collision suffix."""
    found = _SUFFIXED.match(trash_name)
    return found.group(1) if found else trash_name


def checkpoint_name(now_ms: int) -> str:
    moment = dt.datetime.fromtimestamp(now_ms / 1000, tz=dt.UTC)
    return moment.strftime(_CHECKPOINT_FORMAT)


def checkpoint_time_ms(name: str) -> int | None:
    """The time a checkpoint directory name encodes, or None if it is not one."""
    if len(name) != 12 or not name.isdigit():
        return None
    try:
        moment = dt.datetime.strptime(name, _CHECKPOINT_FORMAT).replace(tzinfo=dt.UTC)
    except ValueError:
        return None
    return int(moment.timestamp() * 1000)


def expired_checkpoints(names: list[str], now_ms: int, interval_s: float) -> list[str]:
    """Checkpoint names older than the trash interval (other names are left alone)."""
    out = []
    for name in names:
        when = checkpoint_time_ms(name)
        if when is not None and now_ms - when >= interval_s * 1000:
            out.append(name)
    return out


# --- plans over the namespace (the Namesystem applies them like any other ops) -------------

_TRASH_DIR_MODE = 0o700


def target(ns: Namespace, user: str, iip: INodesInPath, now_ms: int) -> INodesInPath:
    """A free trash path for ``iip``, resolved. Where an earlier deletion left a *file* on
    the way (``/tmp/a`` trashed, then ``/tmp/a/b``), that component takes a fresh name, as
    in HDFS's TrashPolicyDefault, instead of failing the deletion. InvalidPath when the
    trash path breaks a limit."""
    where = ns.resolve(current_dir(user))
    names = iip.parts
    for name in names[:-1]:
        plain = ns.child(where, name + DIR_SUFFIX if needs_suffix(name) else name)
        if plain.exists and not isinstance(plain.last, DirInode):
            plain = _free_name(ns, where, name, now_ms)
        where = plain
    return _free_name(ns, where, names[-1], now_ms)


def _free_name(ns: Namespace, directory: INodesInPath, name: str, now_ms: int) -> INodesInPath:
    plain = ns.child(directory, name)
    if not needs_suffix(name) and not plain.exists:
        return plain
    candidate = suffixed(name, now_ms)
    found = ns.child(directory, candidate)
    while found.exists:
        candidate += "_"
        found = ns.child(directory, candidate)
    return found


def dir_ops(
    ns: Namespace, user: str, entry: INodesInPath, supergroup: str, now_ms: int
) -> list[Op]:
    """Mkdir ops for the directories a trash entry needs: /user (root's), the home and the
    trash (the user's)."""
    ops: list[Op] = []
    for d in entry.missing(len(entry.parts) - 1):
        owner = ns.superuser if d == "/user" else user
        mode = 0o755 if d in ("/user", home(user)) else _TRASH_DIR_MODE
        ops.append(MkdirOp(d, ns.allocate_inode_id(), mode, owner, supergroup, now_ms))
    return ops


def checkpoint_ops(
    ns: Namespace, user: str, now_ms: int, interval_s: float, page: int, *, immediate: bool
) -> list[Op]:
    """Ops that roll ``user``'s Current into a checkpoint and delete expired checkpoints
    (``immediate``: delete the whole trash); ``page``: entries per listing."""
    root = trash_root(user)
    if not ns.exists(root):
        return []
    names = [s.path.rsplit("/", 1)[1] for s in _all_entries(ns, root, page)]
    if immediate:
        return [DeleteOp(f"{root}/{name}", now_ms) for name in names]
    ops: list[Op] = []
    if CURRENT in names:
        # Names have a resolution of one second: a second roll within the same second
        # takes the next free second rather than leaving Current where it is.
        stamp_ms = now_ms
        checkpoint = f"{root}/{checkpoint_name(stamp_ms)}"
        while ns.exists(checkpoint):
            stamp_ms += 1000
            checkpoint = f"{root}/{checkpoint_name(stamp_ms)}"
        ops.append(RenameOp(f"{root}/{CURRENT}", checkpoint, now_ms))
    for name in expired_checkpoints(names, now_ms, interval_s):
        ops.append(DeleteOp(f"{root}/{name}", now_ms))
    return ops


def users(ns: Namespace, page: int) -> list[str]:
    """Users with a trash directory (the emptier's round)."""
    if not ns.exists("/user"):
        return []
    return [
        s.path.rsplit("/", 1)[1]
        for s in _all_entries(ns, "/user", page)
        if s.is_dir and ns.exists(s.path + "/" + TRASH)
    ]


def _all_entries(ns: Namespace, directory: str, page: int) -> list[FileStatus]:
    entries: list[FileStatus] = []
    start = ""
    while True:
        found, remaining = ns.list_dir(directory, start, page)
        entries.extend(found)
        if not remaining or not found:
            return entries
        start = found[-1].path.rsplit("/", 1)[1]
