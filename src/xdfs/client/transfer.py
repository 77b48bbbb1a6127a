"""Whole-file transfers: local <-> xdfs, xdfs -> xdfs, xdfs -> any binary sink.

Uploads are written to ``<dst>._COPYING_`` and renamed into place only once complete (as
``hdfs dfs -put`` does), so a failed or interrupted copy never leaves a truncated file under
the destination name; the temporary file is deleted on every failure (a refused overwrite
or rename included). A local source that changes while it is read (its size or
modification time) fails the upload before the file is completed: what was read was never
the file.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from xdfs.errors import AlreadyExists, NotFound, XdfsError

if TYPE_CHECKING:
    from xdfs.client.reader import FileReader
    from xdfs.client.writer import FileWriter
    from xdfs.protocol.namenode import DeleteResponse, FileStatus


class FileSystemCalls(Protocol):
    """The calls of a client that the transfers here make (``AsyncClient`` is one; it
    hands itself in, and this module never imports it)."""

    async def stat(self, path: str) -> FileStatus: ...
    async def exists(self, path: str) -> bool: ...
    async def mkdirs(self, path: str, mode: int = ..., parents: bool = ...) -> FileStatus: ...
    async def list_dir(self, path: str) -> list[FileStatus]: ...
    async def delete(self, path: str, recursive: bool = ..., skip_trash: bool = ...
                     ) -> DeleteResponse: ...
    async def rename(self, src: str, dst: str) -> str: ...
    async def open_read(self, path: str) -> FileReader: ...
    async def open_write(self, path: str, **options: Any) -> FileWriter: ...

COPYING_SUFFIX = "._COPYING_"
#: Told the length of each chunk a transfer moves (a progress bar's update).
Progress = Callable[[int], object]


class SourceChanged(XdfsError, OSError):
    """A local file changed (size or modification time) while it was uploaded; nothing was
    stored. Raised by the client only (never sent over the wire: no code of its own)."""


def basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def join_child(directory: str, name: str) -> str:
    return directory.rstrip("/") + "/" + name
#: Bytes read from a local file per write call.
LOCAL_READ_BYTES = 4 * 1024 * 1024


async def resolve_destination(client: FileSystemCalls, source_name: str, dst: str) -> str:
    """``dst`` itself, or ``dst/<source_name>`` when ``dst`` is an existing directory.
    A ``dst`` ending in ``/`` names a directory: NotFound when there is none."""
    try:
        status = await client.stat(dst)
    except NotFound:
        if dst.endswith("/") and dst.strip("/"):
            raise NotFound(f"{dst}: no such directory") from None
        return dst
    return join_child(dst, source_name) if status.is_dir else dst


async def write_stream(
    client: FileSystemCalls, dst: str, chunks: AsyncIterator[bytes | memoryview], *,
    overwrite: bool = False,
    **options: Any,
) -> FileStatus:
    """Write ``chunks`` to ``dst`` through a ``._COPYING_`` file renamed when complete."""
    if not overwrite and await client.exists(dst):
        raise AlreadyExists(f"{dst} already exists")
    temporary = dst + COPYING_SUFFIX
    await stream_to(client, temporary, chunks, overwrite=True, **options)
    try:
        if overwrite:
            with contextlib.suppress(NotFound):
                await client.delete(dst, skip_trash=True)
        await client.rename(temporary, dst)
    except BaseException:  # a refused delete (the sticky bit) or rename: leave nothing
        with contextlib.suppress(XdfsError):
            await client.delete(temporary, skip_trash=True)
        raise
    return await client.stat(dst)


async def stream_to(
    client: FileSystemCalls, dst: str, chunks: AsyncIterator[bytes | memoryview],
    progress: Callable[[int], object] | None = None, **options: Any,
) -> FileStatus:
    """Create ``dst`` (options as :meth:`AsyncClient.create`: ``overwrite=False`` makes the
    create exclusive, atomically) and write ``chunks`` into it in place; ``progress`` gets
    each chunk's length. On failure the file is abandoned and deleted, so a failed write
    leaves no partial file behind."""
    writer = await client.open_write(dst, **options)
    try:
        async for chunk in chunks:
            await writer.write(chunk)
            if progress is not None:
                progress(len(chunk))
        return await writer.close()
    except BaseException:
        await writer.abort()
        with contextlib.suppress(XdfsError):
            await client.delete(dst, skip_trash=True)
        raise


async def chunks_of(*values: bytes) -> AsyncIterator[bytes]:
    """``values`` as the chunks :func:`stream_to` takes."""
    for value in values:
        yield value


async def local_chunks(path: Path) -> AsyncIterator[bytes]:
    # Opened, read and closed in worker threads: the event loop keeps serving the uploads
    # meanwhile. When the upload is cancelled (Ctrl-C) while a read is still running, the
    # file is closed by a worker once that read returns, so the cleanup (abort, delete the
    # temporary file) never waits for a slow source (a pipe, a network mount).
    source = await asyncio.to_thread(path.open, "rb")
    try:
        before = os.fstat(source.fileno())
        read = 0
        while True:
            chunk = await asyncio.to_thread(source.read, LOCAL_READ_BYTES)
            if not chunk:
                # checked before the last chunk is acknowledged, so a file that changed is
                # never completed (stream_to abandons and deletes it)
                _check_unchanged(path, before, os.fstat(source.fileno()), read)
                return
            read += len(chunk)
            yield chunk
    finally:
        asyncio.get_running_loop().run_in_executor(None, source.close)


def _check_unchanged(path: Path, before: os.stat_result, after: os.stat_result, read: int
                     ) -> None:
    """SourceChanged unless ``read`` bytes were the whole file and it kept its size and
    modification time while it was read (a pipe or a device has no size to hold to)."""
    same = read == before.st_size == after.st_size and before.st_mtime_ns == after.st_mtime_ns
    if same or not stat.S_ISREG(before.st_mode):
        return
    what = (f"its size went from {before.st_size} to {after.st_size} bytes"
            if after.st_size != before.st_size or read != before.st_size
            else "its modification time changed")
    raise SourceChanged(f"{path} changed while it was read ({what}): nothing was stored")


async def put(
    client: FileSystemCalls, local: str | os.PathLike[str], dst: str, *, overwrite: bool = False,
    create_parents: bool = True, **options: Any,
) -> list[str]:
    """Copy a local file or directory tree into xdfs; returns the files written.
    ``create_parents=False`` (``hdfs dfs -put``): NotFound, and nothing written, when the
    destination's parent directory does not exist."""
    source = Path(local)
    target = await resolve_destination(client, source.name, dst)
    if not await asyncio.to_thread(source.is_dir):
        await write_stream(client, target, local_chunks(source), overwrite=overwrite,
                           create_parents=create_parents, **options)
        return [target]
    await client.mkdirs(target, parents=create_parents)
    written: list[str] = []
    for child in await asyncio.to_thread(lambda: sorted(source.iterdir())):
        written += await put(client, child, join_child(target, child.name),
                             overwrite=overwrite, **options)
    return written


async def get(
    client: FileSystemCalls, src: str, local: str | os.PathLike[str],
    progress: Progress | None = None,
) -> list[str]:
    """Copy a file or directory tree out of xdfs; returns the local files written."""
    target = Path(local)
    if await asyncio.to_thread(target.is_dir):
        target = target / basename(src)
    status = await client.stat(src)
    if status.is_dir:
        target.mkdir(parents=True, exist_ok=True)
        written: list[str] = []
        for entry in await client.list_dir(src):
            written += await get(client, entry.path, target / basename(entry.path), progress)
        return written
    if target.exists():
        raise AlreadyExists(f"{target} already exists")
    await download(await client.open_read(src), target, progress)
    return [str(target)]


async def download(
    reader: FileReader, target: Path, progress: Callable[[int], object] | None = None
) -> None:
    """Write the file ``reader`` reads to the local file ``target`` (replacing it; its
    missing parent directories are made) through a ``._COPYING_`` file renamed when
    complete, so ``target`` is never seen truncated."""
    await asyncio.to_thread(target.parent.mkdir, parents=True, exist_ok=True)
    temporary = target.with_name(target.name + COPYING_SUFFIX)
    try:
        with temporary.open("wb") as sink:
            await copy_reader(reader, sink.write, progress=progress)
        temporary.replace(target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


async def copy_to(
    client: FileSystemCalls, src: str, sink: Callable[[bytes | memoryview], object],
    offset: int = 0, size: int = -1,
) -> int:
    """Stream ``[offset, offset+size)`` of ``src`` into ``sink``; returns the bytes sent."""
    return await copy_reader(await client.open_read(src), sink, offset, size)


async def copy_reader(
    reader: FileReader, sink: Callable[[bytes | memoryview], object], offset: int = 0,
    size: int = -1, progress: Callable[[int], object] | None = None,
) -> int:
    """Stream ``[offset, offset+size)`` of what ``reader`` reads into ``sink``."""
    sent = 0
    async for chunk in reader.iter_range(offset, size):
        sink(chunk)
        sent += len(chunk)
        if progress is not None:
            progress(len(chunk))
    return sent


async def copy(
    client: FileSystemCalls, src: str, dst: str, *, overwrite: bool = False,
    progress: Progress | None = None,
) -> str:
    """Copy a file inside xdfs (the bytes pass through the client, as ``hdfs dfs -cp``)."""
    status = await client.stat(src)
    if status.is_dir:
        raise XdfsError(f"{src} is a directory (copying trees is not supported)")
    target = await resolve_destination(client, basename(src), dst)
    reader = await client.open_read(src)
    await write_stream(
        client, target, reader.iter_range(), overwrite=overwrite, progress=progress,
        replication=status.replication, block_size=status.block_size,
    )
    return target


async def copy_file(client: FileSystemCalls, src: str, dst: str) -> None:
    """fsspec's ``cp_file``: ``dst`` becomes a copy of the file ``src`` (replacing a file
    there, written in place, same replication and block size), or a directory when ``src``
    is one. The bytes pass through the client: xdfs has no server-side copy."""
    status = await client.stat(src)
    if status.is_dir:
        await client.mkdirs(dst, parents=True)
        return
    if src.rstrip("/") == dst.rstrip("/"):
        return  # overwriting would delete the source before it is read
    reader = await client.open_read(src)
    await stream_to(client, dst, reader.iter_range(), overwrite=True,
                    replication=status.replication, block_size=status.block_size)
