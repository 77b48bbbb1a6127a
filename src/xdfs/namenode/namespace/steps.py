"""Whole-subtree walks as step generators (pure).

A walk that may visit millions of inodes (fsck, ``-count``/``-du``, the block map export, a
recursive delete's permission check) is written as a generator that yields once per inode
and returns its result. :func:`drain` runs one to the end at once (tests, small trees, the
BackupNode); the NameNode's driver (:class:`xdfs.namenode.walks.WalkPacer`) runs it a slice
at a time on the event loop, serving other calls between slices.

Between two steps the namespace may change. The walks read it live, as HDFS does, with
these semantics: each directory's children are listed when the walk reaches it (names
removed before their turn are skipped, names added after the listing are not seen), an
inode's attributes are read when it is visited, and a subtree moved or deleted meanwhile is
still walked as it hangs together (its paths are those it had when listed). No answer is a
snapshot of one instant; every directory is consistent with itself when visited.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TypeVar

T = TypeVar("T")

#: A walk: yields once per inode visited, returns its result.
Steps = Generator[None, None, T]


def drain(steps: Steps[T]) -> T:
    """Run ``steps`` to the end; its result."""
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
