"""The replicated log: unbounded named logs on bounded ledgers, one fenced writer
(seeds 002, 004). ``LogClient`` / ``AsyncLogClient`` are its Python API."""

from __future__ import annotations

from typing import Any

__all__ = ["AsyncLogClient", "LogClient", "Lsn", "Record"]


def __getattr__(name: str) -> Any:
    # Lazy: the server side imports xdfs.log.* without the client's dependencies.
    if name in ("LogClient", "AsyncLogClient"):
        from xdfs.log import client

        return getattr(client, name)
    if name in ("Lsn", "Record"):
        from xdfs.protocol import log

        return getattr(log, name)
    raise AttributeError(name)
