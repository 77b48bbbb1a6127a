"""Trash rules (pure), DESIGN.md section 7 and seed 003.

``rm`` moves ``/a/b`` to ``/user/<user>/.Trash/Current/a/b``; the emptier renames
``Current`` to a ``yyMMddHHmmss`` checkpoint (UTC) and deletes checkpoints older than the
trash interval; ``restore`` moves an entry of ``Current`` or of a checkpoint back to the
path it came from.
"""

from __future__ import annotations

import datetime as dt

from xdfs.errors import InvalidArgument
from xdfs.namenode.paths import join, split_path

TRASH = ".Trash"
CURRENT = "Current"
_CHECKPOINT_FORMAT = "%y%m%d%H%M%S"


def home(user: str) -> str:
    return f"/user/{user}"


def trash_root(user: str) -> str:
    return f"/user/{user}/{TRASH}"


def current_dir(user: str) -> str:
    return f"{trash_root(user)}/{CURRENT}"


def trash_target(user: str, path: str) -> str:
    """Where ``path`` goes when ``user`` removes it."""
    return current_dir(user) + path


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
    return join(parts[4:])


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
