"""fsimage files: save a namespace to every name dir, load it back, stream it for ``oiv``.

File format (big-endian)::

    b"XDFSIMG1"
    frame*   where frame = u32 length | msgpack (length bytes)

Frames, in order: one :class:`~xdfs.namenode.namespace.ops.ImageHeader`; then the inodes as
msgpack arrays of up to :data:`INODES_PER_FRAME` :class:`~xdfs.namenode.namespace.ops.InodeRecord`
s (parents before children, root first), ``header.inode_count`` in all; then the users as
arrays of :class:`~xdfs.namenode.namespace.ops.UserRecord` (``header.user_count``); then the
token keys as arrays of :class:`~xdfs.namenode.namespace.ops.TokenKeyRecord`
(``header.token_key_count``); then the end of the file. An empty section has no frame.

Alongside: ``fsimage_<txid>.md5`` = ``"<md5 hex>  fsimage_<txid>\\n"``. Saving writes
``fsimage.ckpt_<txid>`` in every dir at once (one encode, one hash), fsyncs it, writes the md5
file atomically, then renames the checkpoint to ``fsimage_<txid>`` and fsyncs the dir: an
``fsimage_*`` that exists is complete, and a crash leaves at worst a ``.ckpt`` or an orphan
``.md5`` that :func:`xdfs.namenode.image.recovery.purge` removes.

Reading is streaming with bounded memory (one frame at a time), verifying the md5 while it
reads (``verify="streaming"``: a thread hashes the file beside the decoding, a mismatch is
raised at the end), before reading (``"before"``), or not at all (``"none"``).
:func:`load_image` hands the inodes to the namespace's ``from_image`` lazily; the (small)
users and token keys, which follow the inodes in the file, are found first by skipping over
the inode frames (reading only each frame's length and msgpack array header).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import struct
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO, Literal, Protocol, TypeVar

import msgspec

from xdfs.common.faults import fault_point
from xdfs.common.files import atomic_write, fsync_dir, write_all
from xdfs.common.images import (
    READ_BUFFER_BYTES,
    ImageCheck,
    ckpt_name,
    file_md5,
    format_md5_file,
    image_name,
    md5_name,
    read_md5_file,
)
from xdfs.errors import InvalidArgument, StorageError, XdfsError
from xdfs.namenode.image.storage import StorageDirectory, write_seen_txid
from xdfs.namenode.namespace.ops import (
    LAYOUT_VERSION,
    ImageHeader,
    InodeRecord,
    TokenKeyRecord,
    UserRecord,
)
from xdfs.protocol.backup import ImageHead

log = logging.getLogger("xdfs.namenode.image.fsimage")

IMAGE_MAGIC = b"XDFSIMG1"
FRAME_HEAD = struct.Struct(">I")
INODES_PER_FRAME = 4096
RECORDS_PER_FRAME = 4096  # users, token keys
FRAME_BYTES_MAX = 256 * 1024 * 1024

Verify = Literal["streaming", "before", "none"]
T = TypeVar("T")

_ENCODER = msgspec.msgpack.Encoder()
_HEADER_DECODER = msgspec.msgpack.Decoder(ImageHeader)
_INODES_DECODER = msgspec.msgpack.Decoder(list[InodeRecord])
_USERS_DECODER = msgspec.msgpack.Decoder(list[UserRecord])
_KEYS_DECODER = msgspec.msgpack.Decoder(list[TokenKeyRecord])


class ImageSource(Protocol):
    """What :func:`save_image` needs of a namespace."""

    def iter_inode_records(self) -> Iterable[InodeRecord]: ...

    def user_records(self) -> Iterable[UserRecord]: ...

    def token_key_records(self) -> Iterable[TokenKeyRecord]: ...


# --- writing -----------------------------------------------------------------------------


def _frame(obj: object) -> bytearray:
    buf = bytearray(FRAME_HEAD.size)
    _ENCODER.encode_into(obj, buf, FRAME_HEAD.size)
    FRAME_HEAD.pack_into(buf, 0, len(buf) - FRAME_HEAD.size)
    return buf


def _batches(items: Iterable[T], size: int) -> Iterator[list[T]]:
    batch: list[T] = []
    append = batch.append
    for item in items:
        append(item)
        if len(batch) >= size:
            yield batch
            batch = []
            append = batch.append
    if batch:
        yield batch


def write_image_files(
    paths: Sequence[Path],
    header: ImageHeader,
    inodes: Iterable[InodeRecord],
    users: Iterable[UserRecord],
    token_keys: Iterable[TokenKeyRecord],
    *,
    inodes_per_frame: int = INODES_PER_FRAME,
) -> str:
    """Write the same image to every path (created or truncated) and fsync each; returns the
    md5 hex digest. The counts must match the header (StorageError otherwise: the
    namespace changed while it was being saved)."""
    fds: list[tuple[int, Path]] = []
    md5 = hashlib.md5()

    def emit(data: bytes | bytearray) -> None:
        md5.update(data)
        for fd, path in fds:
            write_all(fd, data, path)

    try:
        for path in paths:
            try:
                fds.append((os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), path))
            except OSError as exc:
                raise StorageError(f"cannot create {path}: {exc}") from exc
        emit(IMAGE_MAGIC)
        emit(_frame(header))
        fault_point("image.ckpt_started")
        counts = []
        for items, per_frame in (
            (inodes, inodes_per_frame),
            (users, RECORDS_PER_FRAME),
            (token_keys, RECORDS_PER_FRAME),
        ):
            count = 0
            for batch in _batches(items, per_frame):
                count += len(batch)
                emit(_frame(batch))
            counts.append(count)
        expected = [header.inode_count, header.user_count, header.token_key_count]
        if counts != expected:
            raise StorageError(
                f"image {paths[0].name}: wrote {counts} (inodes, users, keys), header says "
                f"{expected}: the namespace changed while it was being saved"
            )
        for fd, path in fds:
            try:
                os.fsync(fd)
            except OSError as exc:
                raise StorageError(f"fsync of {path} failed: {exc}") from exc
    finally:
        for fd, _ in fds:
            os.close(fd)
    return md5.hexdigest()


def image_targets(dirs: Sequence[StorageDirectory], txid: int) -> list[StorageDirectory]:
    """The dirs that lack a complete ``fsimage_<txid>`` (image and md5)."""
    return [d for d in dirs if not (d.image_path(txid).exists()
                                    and (d.current / md5_name(txid)).exists())]


def write_checkpoint_files(
    targets: Sequence[StorageDirectory], header: ImageHeader, namespace: ImageSource
) -> str:
    """Phase 1 of a save: ``fsimage.ckpt_<txid>`` written and fsynced in every target;
    returns the md5. Touches nothing but those files (a forked writer runs only this)."""
    return write_image_files(
        [d.current / ckpt_name(header.txid) for d in targets], header,
        namespace.iter_inode_records(), namespace.user_records(),
        namespace.token_key_records(),
    )


def install_checkpoint_files(
    targets: Sequence[StorageDirectory], header: ImageHeader, digest: str
) -> None:
    """Phase 2 of a save: per target, the md5 file, the rename to ``fsimage_<txid>``, the
    dir fsync and ``seen_txid`` (the fault points of a save fire here)."""
    txid = header.txid
    for d in targets:
        ckpt = d.current / ckpt_name(txid)
        atomic_write(d.current / md5_name(txid), format_md5_file(digest, image_name(txid)).encode())
        fault_point("image.before_rename")
        try:
            os.replace(ckpt, d.image_path(txid))
        except OSError as exc:
            raise StorageError(f"cannot rename {ckpt} to {image_name(txid)}: {exc}") from exc
        fsync_dir(d.current)
        fault_point("image.after_rename")
        write_seen_txid(d.current, txid)
    log.info("saved image at txid %d (%d inodes) to %s", txid, header.inode_count,
             ", ".join(str(d.root) for d in targets))


def remove_checkpoint_files(targets: Sequence[StorageDirectory], txid: int) -> None:
    """Undo a failed save's phase 1 (what is left is a ``.ckpt`` no load ever reads)."""
    for d in targets:
        (d.current / ckpt_name(txid)).unlink(missing_ok=True)


def save_image(
    dirs: Sequence[StorageDirectory], header: ImageHeader, namespace: ImageSource
) -> list[Path]:
    """Save ``namespace`` as ``fsimage_<header.txid>`` in every dir that lacks it; returns the
    image paths. The namespace must not change meanwhile (the caller pauses mutations, or
    hands a frozen copy: :mod:`xdfs.namenode.image.background`)."""
    txid = header.txid
    targets = image_targets(dirs, txid)
    if targets:
        try:
            digest = write_checkpoint_files(targets, header, namespace)
            install_checkpoint_files(targets, header, digest)
        except BaseException:
            remove_checkpoint_files(targets, txid)
            raise
    return [d.image_path(txid) for d in dirs]


# --- reading -----------------------------------------------------------------------------


def _array_len(head: bytes) -> int | None:
    """Element count from the start of a msgpack array, None if it is not an array."""
    if not head:
        return None
    tag = head[0]
    if 0x90 <= tag <= 0x9F:
        return tag & 0x0F
    if tag == 0xDC and len(head) >= 3:
        return int.from_bytes(head[1:3], "big")
    if tag == 0xDD and len(head) >= 5:
        return int.from_bytes(head[1:5], "big")
    return None


class _BackgroundMd5:
    """md5 of a file computed in a thread while the caller decodes it (verify="streaming")."""

    def __init__(self, path: Path) -> None:
        self._stop = threading.Event()
        self._result: str | BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(path,), name=f"md5 {path.name}", daemon=True
        )
        self._thread.start()

    def _run(self, path: Path) -> None:
        try:
            self._result = file_md5(path, self._stop)
        except BaseException as exc:
            self._result = exc

    def result(self) -> str:
        self._thread.join()
        assert self._result is not None
        if isinstance(self._result, BaseException):
            raise self._result
        return self._result

    def cancel(self) -> None:
        self._stop.set()
        self._thread.join()


class ImageReader:
    """Sequential frame reader over one image file (use as a context manager).

    ``verify``: ``"streaming"`` hashes the file in a background thread while frames are
    decoded and compares in :meth:`finish`; ``"before"`` hashes it first; ``"none"`` skips
    the md5 (``oiv`` of a damaged image, benchmarks)."""

    def __init__(self, path: str | os.PathLike[str], *, verify: Verify = "streaming") -> None:
        self.path = Path(path)
        self.verify = verify
        self._expected_md5 = read_md5_file(self.path) if verify != "none" else None
        if verify == "before":
            actual = file_md5(self.path)
            if actual != self._expected_md5:
                raise self._md5_error(actual)
        try:
            self._f: BinaryIO = open(self.path, "rb", buffering=READ_BUFFER_BYTES)  # noqa: SIM115
        except OSError as exc:
            raise StorageError(f"cannot open image {self.path}: {exc}") from exc
        self.size = os.fstat(self._f.fileno()).st_size
        self._md5 = _BackgroundMd5(self.path) if verify == "streaming" else None

    def _md5_error(self, actual: str) -> StorageError:
        return StorageError(
            f"image {self.path} fails its md5 check (file {actual}, "
            f"{self.path.name}.md5 says {self._expected_md5})"
        )

    def __enter__(self) -> ImageReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        if self._md5 is not None:
            self._md5.cancel()
            self._md5 = None
        self._f.close()

    def corrupt(self, offset: int, what: str) -> StorageError:
        if self._md5 is not None:  # a bad md5 explains a decode error better
            actual = self._md5.result()
            self._md5 = None
            if actual != self._expected_md5:
                return StorageError(f"{self._md5_error(actual)}; decoding failed at byte "
                                    f"offset {offset}: {what}")
        return StorageError(f"corrupt image {self.path} at byte offset {offset}: {what}")

    def tell(self) -> int:
        return self._f.tell()

    def _read_exact(self, n: int, offset: int, what: str) -> bytes:
        data = self._f.read(n)
        if len(data) != n:
            raise self.corrupt(offset, f"file ends inside {what} ({len(data)} of {n} bytes)")
        return data

    def read_frame(self, what: str) -> tuple[int, bytes]:
        """-> (offset, payload)."""
        offset = self._f.tell()
        head = self._read_exact(FRAME_HEAD.size, offset, f"the length of {what}")
        (length,) = FRAME_HEAD.unpack(head)
        if length > FRAME_BYTES_MAX or offset + 4 + length > self.size:
            raise self.corrupt(offset, f"{what} frame length {length} is impossible")
        return offset, self._read_exact(length, offset + 4, what)

    def read_header(self) -> ImageHeader:
        magic = self._read_exact(len(IMAGE_MAGIC), 0, "the magic")
        if magic != IMAGE_MAGIC:
            raise self.corrupt(0, f"bad magic {magic!r}")
        offset, payload = self.read_frame("the header")
        try:
            header = _HEADER_DECODER.decode(payload)
        except (msgspec.MsgspecError, UnicodeDecodeError) as exc:  # invalid UTF-8 too
            raise self.corrupt(offset, f"bad header: {exc}") from None
        if header.layout_version != LAYOUT_VERSION:
            raise self.corrupt(offset, f"layout version {header.layout_version}, this build "
                                       f"reads {LAYOUT_VERSION}")
        return header

    def read_batches(
        self, decoder: msgspec.msgpack.Decoder[list[T]], count: int, what: str
    ) -> Iterator[list[T]]:
        """Frames of ``what`` until ``count`` records were read."""
        seen = 0
        while seen < count:
            offset, payload = self.read_frame(what)
            try:
                batch = decoder.decode(payload)
            except (msgspec.MsgspecError, UnicodeDecodeError) as exc:  # invalid UTF-8 too
                raise self.corrupt(offset, f"bad {what} frame: {exc}") from None
            seen += len(batch)
            if seen > count or not batch:
                raise self.corrupt(offset, f"more {what} than the header's {count}")
            yield batch

    def inodes(self, header: ImageHeader) -> Iterator[InodeRecord]:
        """The inodes (read right after the header), one frame decoded at a time."""
        return itertools.chain.from_iterable(
            self.read_batches(_INODES_DECODER, header.inode_count, "inodes"))

    def skip_records(self, count: int, what: str) -> None:
        """Skip frames holding ``count`` records without decoding them."""
        seen = 0
        while seen < count:
            offset = self._f.tell()
            head = self._read_exact(FRAME_HEAD.size + 5, offset, f"the length of {what}")
            (length,) = FRAME_HEAD.unpack_from(head)
            n = _array_len(head[FRAME_HEAD.size:])
            if n is None or length > FRAME_BYTES_MAX or offset + 4 + length > self.size:
                raise self.corrupt(offset, f"bad {what} frame (length {length})")
            seen += n
            self._f.seek(offset + 4 + length)
        if seen != count:
            raise self.corrupt(self._f.tell(), f"{seen} {what}, the header says {count}")

    def seek(self, offset: int) -> None:
        self._f.seek(offset)

    def finish(self) -> None:
        """At the end: no trailing bytes, and the md5 matches (streaming mode)."""
        end = self._f.tell()
        if end != self.size:
            raise self.corrupt(end, f"{self.size - end} unexpected bytes after the last frame")
        if self._md5 is not None:
            actual = self._md5.result()
            self._md5 = None
            if actual != self._expected_md5:
                raise self._md5_error(actual)


def read_image_header(path: str | os.PathLike[str]) -> ImageHeader:
    with ImageReader(path, verify="none") as reader:
        return reader.read_header()


def image_head(path: Path, txid: int) -> ImageHead:
    """The head announcing ``path`` (md5 from its ``.md5`` file, checked on the way out)."""
    return ImageHead(txid, path.stat().st_size, read_md5_file(path))


def header_check(head: ImageHead, expect_ids: tuple[int, str] | None = None) -> ImageCheck:
    """A receiver's check of an image announced by ``head``: a valid fsimage whose own
    header names the same txid and (``expect_ids``) this (namespace id, cluster id)."""

    def check(path: Path) -> None:
        try:
            header = read_image_header(path)
        except XdfsError as exc:
            raise InvalidArgument(f"the image received is not a valid fsimage: {exc}") from exc
        if header.txid != head.txid:
            raise InvalidArgument(
                f"the image received says txid {header.txid}, its head {head.txid}")
        if expect_ids is not None and (header.namespace_id, header.cluster_id) != expect_ids:
            raise InvalidArgument(
                f"the image received belongs to namespace {header.namespace_id} of cluster "
                f"{header.cluster_id}, not {expect_ids[0]} of {expect_ids[1]}"
            )

    return check


def iter_image(
    path: str | os.PathLike[str], *, verify: Verify = "streaming"
) -> Iterator[ImageHeader | InodeRecord | UserRecord | TokenKeyRecord]:
    """Yield the header, then every inode, user and token key, one frame in memory at a
    time. In streaming mode a bad md5 is raised after the last record."""
    with ImageReader(path, verify=verify) as reader:
        header = reader.read_header()
        yield header
        yield from reader.inodes(header)
        for users in reader.read_batches(_USERS_DECODER, header.user_count, "users"):
            yield from users
        for keys in reader.read_batches(_KEYS_DECODER, header.token_key_count, "token keys"):
            yield from keys
        reader.finish()


ImageBuilder = Callable[
    [ImageHeader, Iterator[InodeRecord], list[UserRecord], list[TokenKeyRecord]], T
]


def load_image(
    path: str | os.PathLike[str], build: ImageBuilder[T], *, verify: Verify = "streaming"
) -> tuple[ImageHeader, T]:
    """``build(header, inodes, users, token_keys)`` (e.g. ``Namespace.from_image``) over a
    verified image: the inodes arrive lazily, one frame decoded at a time. Any problem,
    including an md5 mismatch found at the end, raises StorageError and the result of
    ``build`` is discarded."""
    with ImageReader(path, verify=verify) as reader:
        header = reader.read_header()
        inodes_at = reader.tell()
        reader.skip_records(header.inode_count, "inodes")
        tail_at = reader.tell()
        users = [u for batch in reader.read_batches(
            _USERS_DECODER, header.user_count, "users") for u in batch]
        keys = [k for batch in reader.read_batches(
            _KEYS_DECODER, header.token_key_count, "token keys") for k in batch]
        end = reader.tell()
        reader.seek(inodes_at)
        inodes = reader.inodes(header)
        result = build(header, inodes, users, keys)
        for _ in inodes:  # build stopped early: still check the rest
            pass
        if reader.tell() != tail_at:
            raise reader.corrupt(reader.tell(), "inode frames do not end where they should")
        reader.seek(end)
        reader.finish()
    return header, result
