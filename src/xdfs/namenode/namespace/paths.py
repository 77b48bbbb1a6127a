"""Path validation and normalisation (pure). Every path entering the NameNode passes here.

Accepted: absolute paths of components separated by ``/``, with at most a trailing ``/``.
An empty component (``//``) is refused: it is a client bug we report rather than guess
about. Also refused with :class:`InvalidPath`: relative paths,
``.`` and ``..`` components, NUL and other control characters, components longer than
``NAME_BYTES_MAX`` bytes, paths longer than ``PATH_BYTES_MAX`` bytes or deeper than
``DEPTH_MAX``.
"""

from __future__ import annotations

import functools
import re

from xdfs.errors import InvalidPath

NAME_BYTES_MAX = 255
PATH_BYTES_MAX = 8000
DEPTH_MAX = 1000
#: Paths recently split, by text: every operation splits its path several times, and
#: validating each character in Python was the largest CPU cost of a create (bench).
SPLIT_CACHE_ENTRIES = 65536

_BAD_CHARACTER = re.compile(r"[\x00-\x1f\x7f/]")


@functools.lru_cache(maxsize=SPLIT_CACHE_ENTRIES)
def split_path(path: str) -> tuple[str, ...]:
    """``"/a/b"`` -> ``("a", "b")``; ``"/"`` -> ``()``. Raises InvalidPath."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise InvalidPath(f"path must be absolute: {path!r}")
    if len(path.encode("utf-8", "surrogatepass")) > PATH_BYTES_MAX:
        raise InvalidPath(f"path longer than {PATH_BYTES_MAX} bytes")
    if path == "/":
        return ()
    body = path[1:-1] if path.endswith("/") else path[1:]
    parts = tuple(body.split("/"))
    if len(parts) > DEPTH_MAX:
        raise InvalidPath(f"path deeper than {DEPTH_MAX} components")
    for name in parts:
        check_name(name, path)
    return parts


def check_name(name: str, path: str = "") -> None:
    where = f" in {path!r}" if path else ""
    if not name:
        raise InvalidPath(f"empty path component{where}")
    if name in (".", ".."):
        raise InvalidPath(f"'{name}' is not allowed as a path component{where}")
    bad = _BAD_CHARACTER.search(name)
    if bad is not None:
        if bad.group() == "/":
            raise InvalidPath(f"'/' inside a name{where}")
        raise InvalidPath(f"control character (NUL, newline ...) in a name{where}")
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidPath(f"name is not valid UTF-8{where}") from None
    if len(encoded) > NAME_BYTES_MAX:
        raise InvalidPath(f"name longer than {NAME_BYTES_MAX} bytes{where}")


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
