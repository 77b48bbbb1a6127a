"""Trash rules (pure), DESIGN.md section 7 and seed 003.

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

from xdfs.errors import InvalidArgument
from xdfs.namenode.namespace.paths import join, split_path

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
