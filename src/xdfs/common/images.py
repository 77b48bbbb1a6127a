"""fsimage files as every role handles them: their names, their ``.md5`` files, and moving
them over the RPC layer's chunked streams (seed 003's head, N bodies, tail).

Names in a ``current`` directory (19-digit zero-padded txids)::

    fsimage_<txid>          a complete image of the namespace after <txid>
    fsimage_<txid>.md5      "<32 hex>  fsimage_<txid>\\n" (the md5sum format HDFS uses)
    fsimage.ckpt_<txid>     an image being written or received (renamed when complete)

One receiving routine serves every direction: the NameNode installing a checkpoint the
backup uploads, the backup bootstrapping from the NameNode's image, ``xdfs admin
-fetchImage``. The bytes go to ``fsimage.ckpt_<txid>`` while their md5 is computed; only
when the stream ended complete, the size and md5 match the head and the receiver's own check
of the file passed (the NameNode's: its header names the same txid and namespace) is it
fsynced, its ``.md5`` written, and renamed to ``fsimage_<txid>`` (then the directory
fsynced). Any failure, or a crash at any point, leaves no ``fsimage_<txid>``: at worst a
``.ckpt`` that the next purge deletes.

What is *inside* an image (its frames and records) is the NameNode's business
(:mod:`xdfs.namenode.image.fsimage`); nothing here reads it.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
import threading
from collections.abc import AsyncIterable, AsyncIterator, Callable
from pathlib import Path
from typing import Any, Literal, Protocol

from xdfs.common.faults import FAULTS, fault_point
from xdfs.common.files import TXID_DIGITS, atomic_write, datasync, fsync_dir, write_all
from xdfs.errors import InvalidArgument, StorageError

log = logging.getLogger(__name__)

FAULTS.register("image_transfer.chunk_sent", "an image chunk was read to be sent (sender)")
FAULTS.register("image_transfer.chunk_written",
                "an image chunk was written to fsimage.ckpt_<txid> (receiver)")
FAULTS.register("image_transfer.before_install",
                "a received image is complete and verified, not yet renamed to fsimage_<txid>")

#: Size of each body chunk sent (the RPC layer's flow control bounds memory per stream).
IMAGE_CHUNK_BYTES = 1024 * 1024
READ_BUFFER_BYTES = 1024 * 1024
#: A receiver's check of a complete image file before it is installed (raises to refuse).
ImageCheck = Callable[[Path], None]


class ImageHead(Protocol):
    """What a sender announces before an image's bytes (the wire's ``ImageHead``)."""

    @property
    def txid(self) -> int: ...

    @property
    def size_bytes(self) -> int: ...

    @property
    def md5(self) -> str: ...

# --- names and md5 files (pure, and the reading of an .md5) ----------------------------

_IMAGE_RE = re.compile(r"^fsimage_(\d{19})$")
_CKPT_RE = re.compile(r"^fsimage\.ckpt_(\d{19})$")
_MD5_RE = re.compile(r"^fsimage_(\d{19})\.md5$")


def image_name(txid: int) -> str:
    return f"fsimage_{txid:0{TXID_DIGITS}d}"


def ckpt_name(txid: int) -> str:
    return f"fsimage.ckpt_{txid:0{TXID_DIGITS}d}"


def md5_name(txid: int) -> str:
    return image_name(txid) + ".md5"


def parse_image_name(name: str) -> tuple[Literal["image", "ckpt", "md5"], int] | None:
    for kind, pattern in (("image", _IMAGE_RE), ("ckpt", _CKPT_RE), ("md5", _MD5_RE)):
        match = pattern.match(name)
        if match:
            return kind, int(match.group(1))  # type: ignore[return-value]
    return None


def format_md5_file(hexdigest: str, image_file: str) -> str:
    return f"{hexdigest}  {image_file}\n"


_MD5_LINE = re.compile(r"^([0-9a-fA-F]{32}) [ *](\S.*)$")


def parse_md5_file(text: str, source: str) -> tuple[str, str]:
    """-> (hexdigest lowercased, file name)."""
    match = _MD5_LINE.match(text.strip("\n"))
    if not match:
        raise StorageError(f"{source}: not an md5 file: {text[:80]!r}")
    return match.group(1).lower(), match.group(2)


def read_md5_file(image: Path) -> str:
    path = image.with_name(image.name + ".md5")
    try:
        text = path.read_text("ascii")
    except FileNotFoundError:
        raise StorageError(f"{path} is missing: {image} cannot be verified") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise StorageError(f"cannot read {path}: {exc}") from exc
    digest, name = parse_md5_file(text, str(path))
    if name != image.name:
        raise StorageError(f"{path} names {name}, not {image.name}")
    return digest


def file_md5(path: Path, stop: threading.Event | None = None) -> str:
    md5 = hashlib.md5()
    try:
        with open(path, "rb", buffering=0) as f:
            while chunk := f.read(READ_BUFFER_BYTES):
                md5.update(chunk)  # releases the GIL: runs beside decoding
                if stop is not None and stop.is_set():
                    break
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc}") from exc
    return md5.hexdigest()



# --- transfer ------------------------------------------------------------------------------



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
    check: ImageCheck | None = None,
) -> Path:
    """Write the image announced by ``head`` into ``directory`` as ``fsimage_<txid>``.

    ``check``: the receiver's look at the complete file (run in a thread) before it is
    installed. Raises InvalidArgument for a stream that does not match its head (size, md5)
    or that ``check`` refuses, StorageError for local I/O failures; either way nothing is
    installed."""
    if head.txid < 0 or head.size_bytes < 0 or len(head.md5) != 32:
        raise InvalidArgument(f"bad image head {head}")
    final = directory / image_name(head.txid)
    ckpt = directory / ckpt_name(head.txid)
    try:
        await _write_stream(head, chunks, ckpt)
        if check is not None:
            await asyncio.to_thread(check, ckpt)
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
