"""Open files and directories of a mount: handle numbers and the write rule (pure).

xdfs files are written once, front to back, and may be appended to; the kernel's writes
through one handle must therefore arrive at the offset where the file ends. A write
anywhere else would change existing data in place, which xdfs cannot do: it is refused
(EOPNOTSUPP) and the file is left as it was.
"""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Writing(enum.Enum):
    NONE = "none"  # opened without write access, or no write yet
    NEW = "new"  # a new file (create or O_TRUNC) under a temporary name
    APPEND = "append"  # appending to the existing file in place


@dataclass
class OpenFile:
    ino: int
    path: str  # the xdfs path when opened (for a new file: its temporary path)
    writable: bool
    #: Where the next write must start: the file's length as far as this handle knows.
    end: int
    writing: Writing = Writing.NONE
    #: The real path a new file is renamed to on close.
    final_path: str = ""
    reader: Any = None  # xdfs.client.reader.FileReader, opened on the first read
    writer: Any = None  # xdfs.client.writer.FileWriter while writing
    #: (mtime_ms, atime_ms) set while written (cp -a, tar): applied once closed.
    times: tuple[int, int] | None = None
    failed: bool = False
    #: A later O_TRUNC open took the file over: this handle's writes are refused.
    superseded: bool = False  # a write or close failed: nothing more is attempted
    lock: Any = None  # asyncio.Lock of the driver, serializing the handle's calls

    def write_allowed(self, offset: int) -> bool:
        """Only at the end: sequential writing and appending, never in place."""
        return offset == self.end

    def wrote(self, count: int) -> None:
        self.end += count


@dataclass
class OpenDir:
    path: str
    ino: int = 0
    entries: list[Any] = field(default_factory=list)  # FileStatus, in listing order
    pages: Any = None  # the AsyncClient.iter_dir iterator, fetched page by page
    done: bool = False


class Handles(Generic[T]):
    """Handle numbers -> open objects (the kernel passes the number back each call)."""

    def __init__(self) -> None:
        self._next = itertools.count(1)
        self._open: dict[int, T] = {}

    def add(self, item: T) -> int:
        fh = next(self._next)
        self._open[fh] = item
        return fh

    def get(self, fh: int) -> T:
        return self._open[fh]

    def pop(self, fh: int) -> T | None:
        return self._open.pop(fh, None)

    def values(self) -> list[T]:
        return list(self._open.values())
