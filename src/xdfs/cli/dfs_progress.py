"""The progress bar of ``-put``, ``-get`` and ``-cp``: bytes, rate and time left on
standard error while it is a terminal; nothing at all otherwise (scripts, pipes, logs)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

#: Transfers smaller than this finish before a bar would tell anything.
PROGRESS_MIN_BYTES = 1 << 20
#: Seconds between two redraws of the bar.
PROGRESS_REDRAW_S = 0.2


@contextmanager
def progress_bar(
    label: str, measure: Callable[[], int]
) -> Iterator[Callable[[int], object] | None]:
    """A bar for the bytes ``measure()`` counts (called only on a terminal: it may cost
    calls to the NameNode), or None (no bar: stderr is no terminal, or the transfer is
    small); the callable it yields takes the length of each chunk moved, from any
    thread. The bar is cleared when the transfer ends."""
    total = measure() if sys.stderr.isatty() else 0
    if total < PROGRESS_MIN_BYTES:
        yield None
        return
    from tqdm import tqdm  # type: ignore[import-untyped]

    # the size as shutil sees it: 80x24 on a terminal that tells none (0x0), where tqdm
    # would draw nothing
    size = shutil.get_terminal_size()
    bar: Any = tqdm(total=total, desc=label, unit="B", unit_scale=True, unit_divisor=1024,
                    file=sys.stderr, leave=False, mininterval=PROGRESS_REDRAW_S,
                    ncols=size.columns, nrows=size.lines)
    with bar:
        yield bar.update


def local_bytes(path: str) -> int:
    """The bytes of a local file, or of every file of a local tree (0 when missing)."""
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for root, _dirs, names in os.walk(path):
        for name in names:
            full = os.path.join(root, name)
            if os.path.isfile(full):
                total += os.path.getsize(full)
    return total


def remote_bytes(client: Any, paths: list[str]) -> int:
    """The bytes of xdfs files or trees (a missing one counts 0: its error comes later)."""
    from xdfs.errors import XdfsError

    total = 0
    for path in paths:
        try:
            total += client.content_summary(path).length
        except XdfsError:
            continue
    return total
