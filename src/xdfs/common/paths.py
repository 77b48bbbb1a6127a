"""Path validation and normalisation (pure). Every path entering the NameNode passes here,
and metadata sharding (xdfs.sharding) cuts paths by the same rules.

Accepted: absolute paths of components separated by ``/``, with at most a trailing ``/``.
An empty component (``//``) is refused: it is a client bug we report rather than guess
about. Also refused with :class:`InvalidPath`: relative paths,
``.`` and ``..`` components, NUL and other control characters, components longer than
``NAME_BYTES_MAX`` bytes, paths longer than ``PATH_BYTES_MAX`` bytes or deeper than
``DEPTH_MAX``.
"""

from __future__ import annotations

import re
from typing import Final

from xdfs.errors import InvalidPath

NAME_BYTES_MAX: Final = 255
PATH_BYTES_MAX: Final = 8000
DEPTH_MAX: Final = 1000
#: Paths recently split, by text: every operation splits its path several times, and
#: validating each character in Python was the largest CPU cost of a create (bench). A
#: plain dict emptied when full, not ``functools.lru_cache``: compiled code probes a dict
#: directly, where an lru_cache is called through a fresh argument tuple and keeps its
#: order list (5% of a NameNode's CPU per create + complete, measured with perf).
SPLIT_CACHE_ENTRIES: Final = 65536
_split_cache: Final[dict[str, tuple[str, ...]]] = {}

_BAD_CHARACTER = re.compile(r"[\x00-\x1f\x7f/]")
#: Names that are never a path component (the empty one: ``//``).
_REFUSED_NAMES: Final = frozenset(("", ".", ".."))


def split_path(path: str) -> tuple[str, ...]:
    """``"/a/b"`` -> ``("a", "b")``; ``"/"`` -> ``()``. Raises InvalidPath."""
    if not isinstance(path, str):
        raise InvalidPath(f"path must be absolute: {path!r}")
    parts = _split_cache.get(path)
    if parts is None:
        parts = _split(path)
        if len(_split_cache) >= SPLIT_CACHE_ENTRIES:
            _split_cache.clear()  # (a memo: a path split again costs one more split)
        _split_cache[path] = parts
    return parts


def _split(path: str) -> tuple[str, ...]:
    if not path.startswith("/"):
        raise InvalidPath(f"path must be absolute: {path!r}")
    ascii_only = path.isascii()
    size = len(path) if ascii_only else len(path.encode("utf-8", "surrogatepass"))
    if size > PATH_BYTES_MAX:
        raise InvalidPath(f"path longer than {PATH_BYTES_MAX} bytes")
    if path == "/":
        return ()
    body = path[1:-1] if path.endswith("/") else path[1:]
    parts = tuple(body.split("/"))
    if len(parts) > DEPTH_MAX:
        raise InvalidPath(f"path deeper than {DEPTH_MAX} components")
    if not ascii_only or _may_be_refused(body, parts):
        for name in parts:
            check_name(name, path)
    return parts


def _may_be_refused(body: str, parts: tuple[str, ...]) -> bool:
    """Whether a name of an ASCII path may break a rule: the whole path tested at once
    (every path of a create is new to the cache), :func:`check_name` then says which.
    (An ASCII string is printable when it has no control character.)"""
    return (
        not _REFUSED_NAMES.isdisjoint(parts)
        or not body.isprintable()
        or (len(body) > NAME_BYTES_MAX and max(map(len, parts)) > NAME_BYTES_MAX)
    )


def check_name(name: str, path: str = "") -> None:
    """InvalidPath unless ``name`` may be a path component (``path``: where, for the
    message)."""
    problem = _name_problem(name)
    if problem is not None:
        raise InvalidPath(f"{problem} in {path!r}" if path else problem)


def _name_problem(name: str) -> str | None:
    """What makes ``name`` unfit for a path component, None when nothing does."""
    if not name:
        return "empty path component"
    if name in (".", ".."):
        return f"'{name}' is not allowed as a path component"
    bad = _BAD_CHARACTER.search(name)
    if bad is not None:
        if bad.group() == "/":
            return "'/' inside a name"
        return "control character (NUL, newline ...) in a name"
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        return "name is not valid UTF-8"
    if len(encoded) > NAME_BYTES_MAX:
        return f"name longer than {NAME_BYTES_MAX} bytes"
    return None


def normalize(path: str) -> str:
    """The canonical spelling of a valid path (no trailing slash)."""
    return join(split_path(path))


def join(parts: tuple[str, ...] | list[str]) -> str:
    return "/" + "/".join(parts)


def parent_of(path: str) -> str:
    parts = split_path(path)
    if not parts:
        raise InvalidPath("the root has no parent")
    return join(parts[:-1])


def is_ancestor(ancestor: str, path: str) -> bool:
    """True when ``path`` is ``ancestor`` or lies beneath it (both normalised)."""
    return ancestor == "/" or path == ancestor or path.startswith(ancestor + "/")
