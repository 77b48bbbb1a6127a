"""WebHDFS LISTSTATUS of a big directory without stalling the NameNode: the listing is
built and sent in batches of ``http.list_batch_entries``, the event loop runs other
requests between two batches, and the answer is streamed (chunked), so neither the
NameNode's memory nor another user's call waits for the whole directory. One user runs at
most ``http.heavy_calls_per_user_max`` listings at once; more wait their turn
(:class:`PerUserLimit`), so one user's parallel listings cannot crowd the others out.

The body is byte for byte what one ``json.dumps`` of the whole listing gives (HDFS's
``{"FileStatuses": {"FileStatus": [...]}}``), which fsspec's webhdfs, HdfsCLI and Spark
parse. A directory that changes while it is listed is listed as a paged listing sees it
(each entry once, in name order, from batch to batch)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from aiohttp import web

from xdfs.http import webhdfs as w
from xdfs.namenode.namesystem import Namesystem
from xdfs.protocol.namenode import FileStatus

_HEAD = b'{"FileStatuses": {"FileStatus": ['
_TAIL = b"]}}"


@dataclass
class _Slot:
    semaphore: asyncio.Semaphore
    holders: int = 0  # holding or waiting


class PerUserLimit:
    """At most ``limit`` calls of one user inside :meth:`hold` at once; the others wait
    (in order), none fails. Users that hold nothing cost no memory."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._slots: dict[str, _Slot] = {}

    def waiting(self, user: str) -> int:
        """Calls of ``user`` waiting for their turn."""
        slot = self._slots.get(user)
        return 0 if slot is None else max(0, slot.holders - self._limit)

    @asynccontextmanager
    async def hold(self, user: str) -> AsyncIterator[None]:
        slot = self._slots.get(user)
        if slot is None:
            slot = self._slots[user] = _Slot(asyncio.Semaphore(self._limit))
        slot.holders += 1
        try:
            async with slot.semaphore:
                yield
        finally:
            slot.holders -= 1
            if not slot.holders:
                del self._slots[user]


def _name(status: FileStatus) -> str:
    return status.path.rsplit("/", 1)[1]


def _entries(page: list[FileStatus]) -> bytes:
    """The entries of a batch as they stand inside the array (no brackets)."""
    return json.dumps([w.file_status(s, _name(s)) for s in page])[1:-1].encode()


async def stream_listing(fs: Namesystem, request: web.Request, user: str, path: str,
                         batch: int) -> web.StreamResponse:
    """LISTSTATUS of ``path``: a listing of one batch (or a file's own status) answered
    whole, a longer one streamed batch by batch. An error before the first byte is the
    usual RemoteException; one after it (the directory removed or closed to ``user``
    meanwhile) cuts the connection (w.StreamBroken), so the client sees a broken body,
    never a short listing."""
    page, remaining = fs.list_dir(user, path, "", batch)
    if not remaining:
        return w.json_response({"FileStatuses": w.statuses(path, page)})
    # (no length: chunked for HTTP/1.1, the body ends with the connection for HTTP/1.0)
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    await response.prepare(request)
    try:
        await response.write(_HEAD)
        separator = b""
        while page:
            await response.write(separator + _entries(page))
            separator = b", "
            if not remaining:
                break
            await asyncio.sleep(0)  # the others' requests run between two batches
            page, remaining = fs.list_dir(user, path, _name(page[-1]), batch)
        await response.write(_TAIL)
    except Exception as exc:
        raise w.StreamBroken(f"LISTSTATUS {path} failed after it started: {exc}") from exc
    await response.write_eof()
    return response
