"""Moving fsimage files over the RPC layer's chunked streams (seed 003's head, N bodies, tail).

One receiving routine serves every direction: the NameNode installing a checkpoint the
backup uploads, the backup bootstrapping from the NameNode's image, ``xdfs admin
-fetchImage``. The bytes go to ``fsimage.ckpt_<txid>`` while their md5 is computed; only
when the stream ended complete, the size and md5 match the head and the file's own header
names the same txid is it fsynced, its ``.md5`` written, and renamed to ``fsimage_<txid>``
(then the directory fsynced). Any failure, or a crash at any point, leaves no
``fsimage_<txid>``: at worst a ``.ckpt`` that the next purge deletes.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from collections.abc import AsyncIterable, AsyncIterator
from pathlib import Path
from typing import Any

from xdfs.common.faults import FAULTS, fault_point
from xdfs.common.files import atomic_write, datasync, fsync_dir, write_all
from xdfs.errors import InvalidArgument, StorageError, XdfsError
from xdfs.namenode.image.fsimage import file_md5, read_image_header, read_md5_file
from xdfs.namenode.image.storage import ckpt_name, format_md5_file, image_name, md5_name
from xdfs.protocol.backup import ImageHead

log = logging.getLogger(__name__)

FAULTS.register("image_transfer.chunk_sent", "an image chunk was read to be sent (sender)")
FAULTS.register("image_transfer.chunk_written",
                "an image chunk was written to fsimage.ckpt_<txid> (receiver)")
FAULTS.register("image_transfer.before_install",
                "a received image is complete and verified, not yet renamed to fsimage_<txid>")

#: Size of each body chunk sent (the RPC layer's flow control bounds memory per stream).
IMAGE_CHUNK_BYTES = 1024 * 1024


def image_head(path: Path, txid: int) -> ImageHead:
    """The head announcing ``path`` (md5 from its ``.md5`` file, checked on the way out)."""
    return ImageHead(txid, path.stat().st_size, read_md5_file(path))


async def image_chunks(path: Path, chunk_bytes: int = IMAGE_CHUNK_BYTES) -> AsyncIterator[bytes]:
    """The bytes of ``path`` in chunks, read off the event loop."""
    f = await asyncio.to_thread(open, path, "rb", buffering=0)
    try:
        while chunk := await asyncio.to_thread(f.read, chunk_bytes):
            fault_point("image_transfer.chunk_sent")
            yield chunk
    finally:
        f.close()


async def receive_image(
    head: ImageHead,
    chunks: AsyncIterable[bytes | memoryview],
    directory: Path,
    *,
    expect_ids: tuple[int, str] | None = None,
) -> Path:
    """Write the image announced by ``head`` into ``directory`` as ``fsimage_<txid>``.

    ``expect_ids``: (namespace id, cluster id) the image's own header must carry.
    Raises InvalidArgument for a stream that does not match its head (size, md5, header),
    StorageError for local I/O failures; either way nothing is installed."""
    if head.txid < 0 or head.size_bytes < 0 or len(head.md5) != 32:
        raise InvalidArgument(f"bad image head {head}")
    final = directory / image_name(head.txid)
    ckpt = directory / ckpt_name(head.txid)
    try:
        await _write_stream(head, chunks, ckpt)
        await asyncio.to_thread(_check_header, ckpt, head.txid, expect_ids)
        fault_point("image_transfer.before_install")
        await asyncio.to_thread(_install, ckpt, final, head)
    except BaseException:
        ckpt.unlink(missing_ok=True)
        raise
    return final


async def _write_stream(
    head: ImageHead, chunks: AsyncIterable[bytes | memoryview], ckpt: Path
) -> None:
    md5 = hashlib.md5()
    size = 0
    try:
        fd = os.open(ckpt, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError as exc:
        raise StorageError(f"cannot create {ckpt}: {exc}") from exc
    try:
        async for chunk in chunks:
            size += len(chunk)
            if size > head.size_bytes:
                raise InvalidArgument(
                    f"image stream is longer than the {head.size_bytes} bytes announced"
                )
            data = bytes(chunk)  # the stream may reuse its buffer once we yield
            # hashing and writing run together in a thread: neither holds the event loop
            await asyncio.to_thread(_hash_and_write, md5, fd, data, ckpt)
            fault_point("image_transfer.chunk_written")
        if size != head.size_bytes:
            raise InvalidArgument(
                f"image stream ended after {size} of the {head.size_bytes} bytes announced"
            )
        if md5.hexdigest() != head.md5.lower():
            raise InvalidArgument(
                f"image md5 mismatch: received {md5.hexdigest()}, announced {head.md5}"
            )
        await asyncio.to_thread(datasync, fd)
    finally:
        os.close(fd)


def _hash_and_write(md5: Any, fd: int, data: bytes, path: Path) -> None:
    md5.update(data)
    write_all(fd, data, path)


def _check_header(ckpt: Path, txid: int, expect_ids: tuple[int, str] | None) -> None:
    try:
        header = read_image_header(ckpt)
    except XdfsError as exc:
        raise InvalidArgument(f"the image received is not a valid fsimage: {exc}") from exc
    if header.txid != txid:
        raise InvalidArgument(f"the image received says txid {header.txid}, its head {txid}")
    if expect_ids is not None and (header.namespace_id, header.cluster_id) != expect_ids:
        raise InvalidArgument(
            f"the image received belongs to namespace {header.namespace_id} of cluster "
            f"{header.cluster_id}, not {expect_ids[0]} of {expect_ids[1]}"
        )


def _install(ckpt: Path, final: Path, head: ImageHead) -> None:
    directory = final.parent
    atomic_write(directory / md5_name(head.txid),
                 format_md5_file(head.md5.lower(), image_name(head.txid)).encode())
    try:
        os.replace(ckpt, final)
    except OSError as exc:
        raise StorageError(f"cannot rename {ckpt} to {final.name}: {exc}") from exc
    fsync_dir(directory)
    log.info("installed %s (%d bytes, md5 %s)", final, head.size_bytes, head.md5)


def verify_image_file(path: Path) -> str:
    """Recompute ``path``'s md5 and compare with its ``.md5`` file; returns the digest."""
    expected = read_md5_file(path)
    actual = file_md5(path)
    if actual != expected:
        raise StorageError(f"{path}: md5 {actual} does not match its .md5 file ({expected})")
    return actual
