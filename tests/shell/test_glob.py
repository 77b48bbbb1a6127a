"""Hadoop's glob syntax (``xdfs.client.glob``): the component matcher, the expansion of
braces holding ``/``, and the walk over a tree that lists only what a pattern needs."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from xdfs.client.glob import compile_component, expand_braces, glob, has_wildcard, unescape
from xdfs.errors import InvalidArgument

MATCHES = [
    # pattern, name, matches
    ("*", "anything", True),
    ("*", "", True),
    ("a*", "abc", True),
    ("a*", "bac", False),
    ("*.log", "x.log", True),
    ("*.log", "xlog", False),  # the dot is literal
    ("?", "a", True),
    ("?", "ab", False),
    ("a?c", "abc", True),
    ("[abc]", "b", True),
    ("[abc]", "d", False),
    ("[a-c]x", "bx", True),
    ("[a-c]x", "dx", False),
    ("[^a]", "b", True),
    ("[^a]", "a", False),
    ("[!a]", "b", True),
    ("[!a]", "a", False),
    ("{a,b}", "a", True),
    ("{a,b}", "b", True),
    ("{a,b}", "c", False),
    ("x{a,{b,c}}y", "xcy", True),
    ("x{a,{b,c}}y", "xdy", False),
    ("{a,}z", "z", True),
    (r"a\*b", "a*b", True),
    (r"a\*b", "axb", False),
    (r"\{a,b\}", "{a,b}", True),
    (r"[\]]", "]", True),
    ("a,b", "a,b", True),  # a comma outside braces is itself
    ("a}", "a}", True),
    ("(x)+$|^", "(x)+$|^", True),  # regex characters are literal
    ("[.]", ".", True),
    ("[.]", "a", False),
]


@pytest.mark.parametrize(("pattern", "name", "expected"), MATCHES)
def test_component_matcher(pattern: str, name: str, expected: bool) -> None:
    assert compile_component(pattern)(name) is expected


@pytest.mark.parametrize("pattern", ["[ab", "{a,b", r"ab\\\\\\", "[]"])
def test_bad_patterns_are_one_typed_error(pattern: str) -> None:
    with pytest.raises(InvalidArgument, match="Illegal file pattern"):
        compile_component(pattern.replace("\\\\", "\\"))


EXPANSIONS = [
    # as Hadoop's GlobExpander documents them
    ("{a/b}", ["a/b"]),
    ("/}{a/b}", ["/}a/b"]),
    ("p{a/b,c/d}s", ["pa/bs", "pc/ds"]),
    ("{a/b,c/d,{e,f}}", ["a/b", "c/d", "{e,f}"]),
    ("{a/b,c/d}{e,f}", ["a/b{e,f}", "c/d{e,f}"]),
    ("{a,b}/{b,{c/d,e/f}}", ["{a,b}/b", "{a,b}/c/d", "{a,b}/e/f"]),
    (r"{a,b}/{c/\d}", ["{a,b}/c/d"]),
    ("/plain/path", ["/plain/path"]),
]


@pytest.mark.parametrize(("pattern", "expected"), EXPANSIONS)
def test_braces_holding_a_slash_are_expanded_first(pattern: str, expected: list[str]) -> None:
    assert expand_braces(pattern) == expected


def test_wildcards_and_escapes() -> None:
    assert has_wildcard("/a/*") and has_wildcard("/{a}") and has_wildcard("/[a]")
    assert not has_wildcard(r"/a/\*") and not has_wildcard("/a/b")
    assert unescape(r"/a/\*\{b\}") == "/a/*{b}"


@dataclass(frozen=True)
class Entry:
    path: str
    is_dir: bool


class Tree:
    """A file system of paths, counting the calls a glob makes."""

    def __init__(self, *paths: str) -> None:
        self.entries: dict[str, Entry] = {"/": Entry("/", True)}
        for path in paths:
            parts = path.strip("/").split("/")
            for depth in range(1, len(parts) + 1):
                full = "/" + "/".join(parts[:depth])
                is_dir = depth < len(parts) or path.endswith("/")
                self.entries.setdefault(full, Entry(full, is_dir))
        self.listed: list[str] = []
        self.stats: list[str] = []

    def stat(self, path: str) -> Entry | None:
        self.stats.append(path)
        return self.entries.get(path)

    def list_dir(self, path: str) -> list[Entry]:
        self.listed.append(path)
        prefix = path.rstrip("/") + "/"
        return sorted((e for p, e in self.entries.items()
                       if p.startswith(prefix) and "/" not in p[len(prefix):] and p != "/"),
                      key=lambda e: e.path)


TREE = ("/data/a.log", "/data/b.log", "/data/c.txt", "/data/sub/d.log", "/data/x{y}",
        "/data/star*", "/logs/2024/01", "/logs/2024/02", "/logs/2025/01", "/empty/")

GLOBS = [
    ("/data/*.log", ["/data/a.log", "/data/b.log"]),
    ("/data/?.*", ["/data/a.log", "/data/b.log", "/data/c.txt"]),
    ("/data/[ab].log", ["/data/a.log", "/data/b.log"]),
    ("/data/[^a].log", ["/data/b.log"]),
    ("/data/{c.txt,a.log}", ["/data/a.log", "/data/c.txt"]),  # listing order
    ("/data/{sub/d,a}.log", ["/data/sub/d.log", "/data/a.log"]),  # pattern order
    ("/logs/*/01", ["/logs/2024/01", "/logs/2025/01"]),
    ("/logs/202[4-5]/0?", ["/logs/2024/01", "/logs/2024/02", "/logs/2025/01"]),
    ("/*/sub", ["/data/sub"]),
    ("/data/a.log/*", []),  # a file has no children
    ("/empty/*", []),
    ("/missing/*", []),
    (r"/data/x\{y\}", ["/data/x{y}"]),
    (r"/data/star\*", ["/data/star*"]),
    ("/data/nothing", None),  # no wildcard, nothing there: the shell reports the path
    ("/", ["/"]),
]


@pytest.mark.parametrize(("pattern", "expected"), GLOBS)
def test_glob_over_a_tree(pattern: str, expected: list[str] | None) -> None:
    tree = Tree(*TREE)
    found = glob(pattern, tree.stat, tree.list_dir)
    assert (None if found is None else [e.path for e in found]) == expected


def test_glob_lists_only_the_directories_the_pattern_needs() -> None:
    tree = Tree(*TREE)
    glob("/logs/2024/*", tree.stat, tree.list_dir)
    assert tree.listed == ["/logs/2024"]  # literal components are one stat each
    assert tree.stats == ["/logs", "/logs/2024"]
    tree = Tree(*TREE)
    glob("/*/2025", tree.stat, tree.list_dir)
    assert tree.listed == ["/"]
    assert tree.stats == ["/data/2025", "/empty/2025", "/logs/2025"]  # directories only


def test_a_relative_pattern_is_refused() -> None:
    with pytest.raises(InvalidArgument):
        glob("data/*", Tree().stat, Tree().list_dir)
