"""Hadoop's path globs (``FileSystem.globStatus``), as a pure core over two calls.

The syntax, per path component: ``*`` any run of characters, ``?`` one character,
``[abc]`` ``[a-z]`` one of a set, ``[^a]`` / ``[!a]`` one not in it, ``{a,b}`` one of the
alternatives (nested, and may span ``/``: ``{a/b,c}``), ``\\c`` the character ``c`` itself.
A pattern is expanded as Hadoop's Globber does: braces holding a ``/`` are expanded into
several patterns first, then each pattern is walked component by component from the root,
listing only the directories a component with wildcards needs (a literal component is one
``stat``). The results keep the order of the listings, pattern after pattern.

:func:`glob` answers None for a pattern with no wildcard that names nothing (the shell then
reports the path itself), and ``[]`` for a pattern with wildcards that matched nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from xdfs.errors import InvalidArgument

WILDCARDS = frozenset("*?[{")
#: What makes a path worth looking at here at all (an escape is undone even without a
#: wildcard, as Hadoop unquotes a pattern that names nothing).
SPECIAL = WILDCARDS | {"\\"}


class Status(Protocol):
    @property
    def path(self) -> str: ...
    @property
    def is_dir(self) -> bool: ...


@dataclass(frozen=True)
class _Root:
    path: str = "/"
    is_dir: bool = True


def is_pattern(path: str) -> bool:
    """True when ``path`` needs :func:`glob` (a wildcard or an escape in it)."""
    return not SPECIAL.isdisjoint(path)


def has_wildcard(pattern: str) -> bool:
    """True when ``pattern`` has an unescaped ``* ? [ {``."""
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            index += 2
            continue
        if char in WILDCARDS:
            return True
        index += 1
    return False


def unescape(text: str) -> str:
    """``a\\*b`` -> ``a*b``."""
    return re.sub(r"\\(.)", r"\1", text, flags=re.DOTALL)


def _illegal(pattern: str, what: str, position: int) -> InvalidArgument:
    return InvalidArgument(f"Illegal file pattern: {what} at pos {position} in {pattern}")


def compile_component(pattern: str) -> Callable[[str], bool]:
    """The matcher of one path component's pattern (no ``/`` in it). InvalidArgument for
    an unclosed ``[`` or ``{`` or a trailing ``\\``."""
    out: list[str] = []
    braces = 0
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            if index + 1 >= len(pattern):
                raise _illegal(pattern, "Missing escaped character", index + 1)
            out.append(re.escape(pattern[index + 1]))
            index += 2
            continue
        if char == "[":
            index = _character_class(pattern, index, out)
            continue
        if char == "*":
            out.append(".*")
        elif char == "?":
            out.append(".")
        elif char == "{":
            out.append("(?:")
            braces += 1
        elif char == "," and braces:
            out.append("|")
        elif char == "}" and braces:
            out.append(")")
            braces -= 1
        else:
            out.append(re.escape(char))
        index += 1
    if braces:
        raise _illegal(pattern, "Unclosed group", len(pattern))
    compiled = re.compile("".join(out), re.DOTALL)
    return lambda name: compiled.fullmatch(name) is not None


def _character_class(pattern: str, start: int, out: list[str]) -> int:
    """Translate the ``[...]`` at ``start`` into ``out``; returns the index after it."""
    index = start + 1
    members = ["["]
    if index < len(pattern) and pattern[index] in "^!":
        members.append("^")
        index += 1
    while index < len(pattern) and pattern[index] != "]":
        char = pattern[index]
        if char == "\\" and index + 1 < len(pattern):
            members.append(re.escape(pattern[index + 1]))
            index += 2
            continue
        members.append(char if char == "-" else re.escape(char))
        index += 1
    if index >= len(pattern):
        raise _illegal(pattern, "Unclosed character class", len(pattern))
    if len(members) == 1 or members == ["[", "^"]:
        raise _illegal(pattern, "Empty character class", index)
    out.append("".join(members) + "]")
    return index + 1


def expand_braces(pattern: str) -> list[str]:
    """The patterns ``pattern`` stands for once every outermost ``{...}`` that holds a
    ``/`` is expanded (``p{a/b,c}s`` -> ``pa/bs``, ``pcs``), leftmost first; braces
    without a ``/`` stay for the component matcher. Escapes inside an expanded group are
    undone (as Hadoop's GlobExpander)."""
    done: list[str] = []
    pending = [(pattern, 0)]
    while pending:
        text, offset = pending.pop(0)
        found = _slash_group(text, offset)
        if found is None:
            done.append(text)
            continue
        start, end, alternatives = found
        prefix, suffix = text[:start], text[end:]
        pending[0:0] = [(prefix + alt + suffix, len(prefix)) for alt in alternatives]
    return done


def _slash_group(text: str, offset: int) -> tuple[int, int, list[str]] | None:
    """(start, end, alternatives) of the leftmost outermost group after ``offset`` that
    holds a ``/``, or None."""
    depth = 0
    start = -1
    slash = False
    alternatives: list[str] = []
    current: list[str] = []
    index = offset
    while index < len(text):
        char = text[index]
        if char == "\\":
            if index + 1 >= len(text):
                raise _illegal(text, "Missing escaped character", index + 1)
            current.append(text[index + 1])
            index += 2
            continue
        if char == "{":
            depth += 1
            if depth == 1:
                start, slash, alternatives, current = index, False, [], []
            else:
                current.append(char)
        elif char == "}" and depth:
            depth -= 1
            if depth == 0:
                alternatives.append("".join(current))
                if slash:
                    return start, index + 1, alternatives
            else:
                current.append(char)
        elif char == "," and depth == 1:
            alternatives.append("".join(current))
            current = []
        else:
            slash = slash or (char == "/" and depth > 0)
            current.append(char)
        index += 1
    return None


def glob(
    pattern: str,
    stat: Callable[[str], Status | None],
    list_dir: Callable[[str], Sequence[Status]],
) -> list[Status] | None:
    """The statuses an absolute ``pattern`` matches. ``stat(path)``: the status of a path,
    None when there is none; ``list_dir(path)``: a directory's entries (each ``path`` is
    the entry's absolute path). See the module's docstring for None and ``[]``."""
    if not pattern.startswith("/"):
        raise InvalidArgument(f"{pattern}: a glob is expanded from an absolute path")
    flattened = expand_braces(pattern)
    wildcard = False
    results: list[Status] = []
    for flat in flattened:
        components = [part for part in flat.split("/") if part]
        wildcard = wildcard or any(map(has_wildcard, components))
        candidates: list[Status] = [_Root()]
        if not components:
            root = stat("/")
            candidates = [root] if root is not None else []
        for component in components:
            if not candidates:
                break
            candidates = _step(candidates, component, not has_wildcard(component), stat,
                               list_dir)
        results.extend(candidates)
    if not wildcard and not results and len(flattened) <= 1:
        return None
    return results


def _step(
    candidates: list[Status], component: str, literal: bool,
    stat: Callable[[str], Status | None], list_dir: Callable[[str], Sequence[Status]],
) -> list[Status]:
    """The next candidates: each directory's child named ``component`` (one stat) or its
    children that match it (one listing)."""
    matches = None if literal else compile_component(component)
    found: list[Status] = []
    for candidate in candidates:
        if not candidate.is_dir:
            continue
        if matches is None:
            child = stat(_join(candidate.path, unescape(component)))
            if child is not None:
                found.append(child)
            continue
        found.extend(entry for entry in list_dir(candidate.path)
                     if matches(entry.path.rsplit("/", 1)[-1]))
    return found


def _join(directory: str, name: str) -> str:
    return directory.rstrip("/") + "/" + name
