"""An fsspec file system for ``xdfs://`` URLs (pandas, pyarrow, dask read and write through it).

``fsspec.filesystem("xdfs", fs="xdfs://host:port", user=..., password=...)``, or with no
arguments the ``[client]`` configuration (``XDFS_CONF``, ``XDFS_FS`` ...). Method semantics
are fsspec's (its local and memory file systems; ``fsspec.tests.abstract`` passes against a
real cluster): ``info`` raises FileNotFoundError, ``mkdir`` creates parents by default and
refuses an existing path, ``makedirs(exist_ok=...)``, ``rm(recursive=...)``, ``cp_file``
and ``put_file``/``get_file`` replace what is at the destination and make its missing
parent directories, ``open`` takes ``rb``, ``wb`` and ``xb`` (exclusive: FileExistsError
when the file exists, decided atomically by the NameNode's create).

Each operation is as few NameNode calls as xdfs allows: ``info``/``exists``/``isdir`` one
stat, ``makedirs``/``mkdir`` one mkdirs (two when ``exist_ok=False`` must make missing
parents), ``mv`` one rename (the NameNode's: nothing is copied; a directory moves whole),
``open(..., "rb")`` one block-locations call. ``rm`` deletes for good (it bypasses the trash,
which is a shell-user convenience, as ``hdfs dfs -rm -skipTrash`` does).
"""

from __future__ import annotations

import contextlib
import io
import os
import time
from glob import has_magic
from pathlib import Path
from typing import Any

from fsspec import AbstractFileSystem
from fsspec.callbacks import DEFAULT_CALLBACK, Callback
from fsspec.spec import AbstractBufferedFile
from fsspec.utils import isfilelike

from xdfs.client import transfer
from xdfs.client.client import Client
from xdfs.client.sync_files import SyncReader, SyncWriter
from xdfs.common.addresses import SCHEME, format_fs_uri, parse_fs_uri, split_uri
from xdfs.errors import AlreadyExists, ConfigError, InvalidArgument, IsADirectory, NotFound
from xdfs.protocol.namenode import FileStatus

#: Modes of :meth:`XdfsFileSystem.open` (xdfs has no append yet).
OPEN_MODES = ("rb", "wb", "xb", "ab")
#: A file's writes up to this size in all go to the writer joined, in one call; beyond it
#: the writes of at least this size go as they were given (uncopied), the smaller ones
#: between them joined.
JOIN_MAX_BYTES = 1024 * 1024


class XdfsFileSystem(AbstractFileSystem):  # type: ignore[misc]
    protocol = "xdfs"
    root_marker = "/"

    def __init__(
        self,
        fs: str | None = None,
        user: str | None = None,
        password: str | None = None,
        token: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(fs=fs, user=user, password=password, token=token, **kwargs)
        self.client = Client(fs, user=user, password=password, token=token)
        # Tools that take a registered file system (DuckDB's register_filesystem, pyarrow's
        # filesystem=) hand it whole URLs: one naming another cluster must fail, not read
        # the same path on this one. (fsspec.open and storage_options pick the file system
        # from the URL itself.)
        self._strip_protocol = self._strip_own_protocol  # type: ignore[method-assign]

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        text = str(path)
        uri = split_uri(text)
        if uri is not None:
            text = uri[1]
        text = text.rstrip("/") or "/"
        return text if text.startswith("/") else "/" + text

    def _strip_own_protocol(self, path: Any) -> Any:
        """:meth:`_strip_protocol`, refusing an ``xdfs://AUTHORITY/...`` of another cluster
        (an authority is this one's when it shares a NameNode address or nameservice)."""
        for one in path if isinstance(path, list) else [path]:
            uri = split_uri(str(one))
            if uri is not None and uri[0] and not self._names_this_cluster(uri[0]):
                raise InvalidArgument(
                    f"{one} names another cluster than this file system's "
                    f"({format_fs_uri(self.client.addresses)}): use one for it, "
                    f"fsspec.filesystem('xdfs', fs='{SCHEME}{uri[0]}'), or write "
                    f"{SCHEME}{uri[1]} for this one")
        return type(self)._strip_protocol(path)

    def _names_this_cluster(self, authority: str) -> bool:
        try:
            theirs = parse_fs_uri(SCHEME + authority, self.client.config.ha.nameservices())
        except ConfigError:
            return False
        return bool(set(theirs) & set(self.client.addresses))

    @staticmethod
    def _get_kwargs_from_urls(path: str) -> dict[str, Any]:
        """``xdfs://host:port/...`` names the file system (fsspec.open, pandas ...)."""
        uri = split_uri(str(path))
        return {"fs": SCHEME + uri[0]} if uri is not None and uri[0] else {}

    @staticmethod
    def _entry(status: FileStatus) -> dict[str, Any]:
        return {
            "name": status.path,
            "size": status.length,
            "type": "directory" if status.is_dir else "file",
            "mode": status.mode,
            "owner": status.owner,
            "group": status.group,
            "replication": status.replication,
            "block_size": status.block_size,
            "mtime": status.mtime_ms / 1000,
            "atime": status.atime_ms / 1000,
            "inode_id": status.inode_id,
        }

    # -- metadata -------------------------------------------------------------------------

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        return self._entry(self.client.stat(self._strip_protocol(path)))

    def exists(self, path: str, **kwargs: Any) -> bool:
        """One stat. Only "no such path" is False: a refused or failed call raises (an
        authentication failure must not read as a missing file)."""
        try:
            self.client.stat(self._strip_protocol(path))
        except (FileNotFoundError, NotADirectoryError):
            return False
        return True

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        path = self._strip_protocol(path)
        entries = [self._entry(s) for s in self.client.list_dir(path)]
        return entries if detail else [e["name"] for e in entries]

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        """FileExistsError when ``path`` exists; FileNotFoundError without its parent
        unless ``create_parents``."""
        path = self._strip_protocol(path)
        if create_parents:
            self.makedirs(path, exist_ok=False)
        else:
            self.client.mkdirs(path, parents=False)  # refuses an existing path itself

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        path = self._strip_protocol(path)
        if exist_ok:
            # one call: the NameNode accepts an existing directory and refuses a file
            self.client.mkdirs(path, parents=True)
            return
        try:
            # one call when the parent exists; AlreadyExists when the path does
            self.client.mkdirs(path, parents=False)
        except NotFound:
            self.client.mkdirs(path, parents=True)  # missing parents: path was missing too

    def rmdir(self, path: str) -> None:
        path = self._strip_protocol(path)
        if not self.client.stat(path).is_dir:
            raise NotADirectoryError(path)
        self.client.delete(path, recursive=False, skip_trash=True)

    def rm(self, path: Any, recursive: bool = False, maxdepth: int | None = None) -> None:
        """One delete per path (a directory with ``recursive``, at once on the NameNode);
        glob patterns are expanded."""
        for one in path if isinstance(path, list) else [path]:
            matches = self.expand_path(one) if has_magic(str(one)) else [one]
            for match in matches:
                self.client.delete(self._strip_protocol(match), recursive=recursive,
                                   skip_trash=True)

    def _rm(self, path: str) -> None:
        self.client.delete(self._strip_protocol(path), recursive=False, skip_trash=True)

    def mv(
        self, path1: Any, path2: Any, recursive: bool = False, maxdepth: int | None = None,
        **kwargs: Any,
    ) -> None:
        """The NameNode's rename: nothing is copied and a directory moves whole (as local
        ``mv``; ``recursive`` changes nothing). Into ``path2`` when it is a directory (or
        ends with ``/``, made if missing); a file at ``path2`` is replaced. Several sources
        (a list or a glob) go into the directory ``path2``, or pairwise to a list."""
        if isinstance(path2, list):
            for source, target in zip(path1, path2, strict=True):
                self._move(source, target)
            return
        if isinstance(path1, list) or has_magic(str(path1)):
            sources = self.expand_path(path1, maxdepth=maxdepth)
            self.makedirs(path2, exist_ok=True)
            for source in sources:
                self._move(source, path2)  # into the directory
            return
        self._move(path1, path2)

    def _move(self, path1: str, path2: str) -> None:
        src, dst = self._strip_protocol(path1), self._strip_protocol(path2)
        if src == dst:
            return
        if str(path2).endswith("/"):
            self.makedirs(dst, exist_ok=True)
        try:
            self.client.rename(src, dst)
        except AlreadyExists:
            # fsspec's (and POSIX's) mv replaces a file; the NameNode's rename refuses to.
            # Not atomic: a crash in between leaves the source in place, the target gone.
            final = dst + "/" + src.rsplit("/", 1)[1] if self.isdir(dst) else dst
            if self.isdir(src) or self.isdir(final):
                raise
            self.client.delete(final, recursive=False, skip_trash=True)
            self.client.rename(src, final)

    def touch(self, path: str, truncate: bool = True, **kwargs: Any) -> None:
        """An empty file (``truncate``: replacing one that exists); without ``truncate``
        an existing entry only gets a new modification time."""
        path = self._strip_protocol(path)
        if not truncate:
            try:
                self.client.set_times(path, mtime_ms=int(time.time() * 1000))
                return
            except NotFound:
                pass
        self._write(path, b"", overwrite=truncate)

    def created(self, path: str) -> Any:
        """xdfs keeps no creation time: the modification time stands in for it."""
        import datetime as dt

        return dt.datetime.fromtimestamp(self.info(path)["mtime"], tz=dt.UTC)

    def modified(self, path: str) -> Any:
        return self.created(path)

    # -- file data ------------------------------------------------------------------------

    def _open(
        self,
        path: str,
        mode: str = "rb",
        block_size: int | None = None,
        autocommit: bool = True,
        cache_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> XdfsFile:
        if mode not in OPEN_MODES:
            raise ValueError(f"xdfs files open as 'rb', 'wb', 'xb' or 'ab', not {mode!r}")
        return XdfsFile(
            self, self._strip_protocol(path), mode, block_size or "default",
            autocommit=autocommit, cache_options=cache_options, **kwargs,
        )

    def cat_file(
        self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any
    ) -> bytes:
        path = self._strip_protocol(path)
        if start is None and end is None:
            return bytes(self.client.read_file(path))
        reader = self.client.open_reader(path)
        first, last = _clip_range(start, end, reader.size)
        return reader.pread(first, last - first)

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        """``mode="create"``: FileExistsError when the file exists (atomic)."""
        self._write(self._strip_protocol(path), value, overwrite=mode != "create", **kwargs)

    def _write(self, path: str, value: bytes, overwrite: bool, **options: Any) -> None:
        self.client.run(transfer.stream_to(
            self.client.async_client, path, transfer.chunks_of(value), overwrite=overwrite,
            **options,
        ))

    def cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        """A copy through the client, streamed (xdfs has no server-side copy); a directory
        source makes the directory."""
        self.client.run(transfer.copy_file(
            self.client.async_client, self._strip_protocol(path1), self._strip_protocol(path2)
        ))

    def put_file(
        self, lpath: str, rpath: str, callback: Callback = DEFAULT_CALLBACK,
        mode: str = "overwrite", **kwargs: Any,
    ) -> None:
        """Upload one local file, streamed into ``rpath`` (made with its missing parents);
        ``mode="create"``: FileExistsError when ``rpath`` exists. A failed upload leaves
        no partial file."""
        rpath = self._strip_protocol(rpath)
        if os.path.isdir(lpath):
            self.makedirs(rpath, exist_ok=True)
            return
        callback = callback or DEFAULT_CALLBACK
        callback.set_size(os.path.getsize(lpath))
        self.client.run(transfer.stream_to(
            self.client.async_client, rpath, transfer.local_chunks(Path(lpath)),
            progress=callback.relative_update, overwrite=mode != "create",
        ))

    def get_file(
        self, rpath: str, lpath: Any, callback: Callback = DEFAULT_CALLBACK,
        outfile: Any = None, **kwargs: Any,
    ) -> None:
        """Download one file to ``lpath`` (a local path, replaced through a ``._COPYING_``
        file and made with its missing parent directories, or a binary file object); a
        directory makes the local directory. One block-locations call, then the data."""
        rpath = self._strip_protocol(rpath)
        callback = callback or DEFAULT_CALLBACK
        sink = outfile if outfile is not None else lpath if isfilelike(lpath) else None
        try:
            reader = self.client.open_reader(rpath)
        except IsADirectory:
            if sink is None:
                os.makedirs(lpath, exist_ok=True)
                return
            raise
        callback.set_size(reader.size)
        progress = callback.relative_update
        if sink is not None:
            self.client.run(transfer.copy_reader(reader.reader, sink.write, progress=progress))
        else:
            self.client.run(transfer.download(reader.reader, Path(lpath), progress=progress))


def _clip_range(start: int | None, end: int | None, size: int) -> tuple[int, int]:
    """fsspec's byte range: None = file edge, negative = from the end, clipped to the file."""
    first = 0 if start is None else (max(0, size + start) if start < 0 else min(start, size))
    last = size if end is None else (max(0, size + end) if end < 0 else min(end, size))
    return first, max(first, last)


class XdfsFile(AbstractBufferedFile):  # type: ignore[misc]
    """fsspec's buffered file over the xdfs reader (random access) or writer.

    A file opened for writing is created at once (as HDFS's create: the lease is taken, an
    ``xb`` open of an existing file or a ``wb`` open of a directory fails in ``open``), with
    ``replication=`` when given. Inside an fsspec transaction (``autocommit=False``) it is
    written to ``<path>._COPYING_`` and renamed into place by ``commit`` (``discard``
    deletes it)."""

    def __init__(self, fs: XdfsFileSystem, path: str, mode: str, block_size: Any,
                 **kwargs: Any) -> None:
        self._reader: SyncReader | None = None
        self._writer: SyncWriter | None = None
        options = {"replication": kwargs.pop("replication")} if "replication" in kwargs else {}
        if mode == "rb":
            self._reader = fs.client.open_reader(path)
            kwargs["size"] = self._reader.size
        super().__init__(fs, path, mode, block_size, **kwargs)
        if mode != "rb":
            try:
                if mode == "ab":
                    self._writer = self._appender(path, options)
                    return
                if not self.autocommit:
                    self._check_target()
                self._writer = fs.client.open_writer(
                    self._written_path, overwrite=mode == "wb" or not self.autocommit,
                    **options,
                )
            except BaseException:
                self.closed = True  # nothing to flush when collected
                raise

    def _appender(self, path: str, options: dict[str, Any]) -> SyncWriter:
        """``ab``: append through xdfs's append (a missing file is created, as POSIX)."""
        if not self.autocommit:
            raise ValueError("xdfs cannot append inside a transaction (open 'ab' outside it)")
        client = self.fs.client
        try:
            writer: SyncWriter = client.append(path)
        except NotFound:
            writer = client.open_writer(path, overwrite=False, **options)
        return writer

    def _check_target(self) -> None:
        """What the create of ``path`` itself would refuse, checked up front for a file
        written under another name until the transaction commits."""
        try:
            status = self.fs.client.stat(self.path)
        except NotFound:
            return
        if status.is_dir:
            raise IsADirectoryError(self.path)
        if self.mode == "xb":
            raise FileExistsError(self.path)

    @property
    def _written_path(self) -> str:
        path: str = self.path
        return path if self.autocommit else path + transfer.COPYING_SUFFIX

    def _fetch_range(self, start: int, end: int) -> bytes:
        # Through the cursor: fsspec's read-ahead asks for consecutive ranges, which then
        # continue one DataNode stream (the reader Client.open uses too).
        assert self._reader is not None
        return self._reader.read_at(start, max(0, end - start))

    def close(self) -> None:
        if self._reader is not None and not self.closed:
            self._reader.close()
        super().close()

    def _initiate_upload(self) -> None:
        """Nothing to do: the file was created when opened."""

    _buffer: PartsBuffer | io.BytesIO | None = None

    @property
    def buffer(self) -> PartsBuffer | io.BytesIO | None:
        return self._buffer

    @buffer.setter
    def buffer(self, value: PartsBuffer | io.BytesIO | None) -> None:
        # fsspec gives a file open for writing a fresh BytesIO at the start and after each
        # flush: a PartsBuffer takes its place (the writer keeps immutable bytes as they
        # are, so no byte written is copied on its way to the sockets).
        self._buffer = PartsBuffer() if isinstance(value, io.BytesIO) else value

    def _upload_chunk(self, final: bool = False) -> bool:
        assert self._writer is not None, "a file open for writing has its writer"
        assert isinstance(self.buffer, PartsBuffer), "a file open for writing has its buffer"
        *parts, last = self.buffer.parts()
        for part in parts:
            self._writer.write(part)
        if final:
            self._writer.write_and_close(last)
        else:
            self._writer.write(last)
        return True

    def commit(self) -> None:
        """End of a transaction: the ``._COPYING_`` file takes its name (``xb``: unless
        the name exists by now, FileExistsError)."""
        client = self.fs.client
        if self.mode == "wb":
            with contextlib.suppress(NotFound):
                client.delete(self.path, skip_trash=True)
        client.rename(self._written_path, self.path)

    def discard(self) -> None:
        if self._writer is None:
            return
        if not self._writer.writer.closed:
            self._writer.abort()
        if not self.autocommit:
            with contextlib.suppress(NotFound):
                self.fs.client.delete(self._written_path, skip_trash=True)


class PartsBuffer:
    """The write buffer of an :class:`XdfsFile` (fsspec's is an ``io.BytesIO``): the
    ``bytes`` written are kept as they were given, not copied (anything else is copied
    once), and handed to the writer as parts (:meth:`parts`). A file written in one
    ``write`` reaches the writer as that very object; large writes (``fs.open(p, "wb")``
    then 4 MiB at a time) reach the sockets without a copy into fresh memory per flush (a
    ``BytesIO`` page-faulted every byte in once more: ~5 us per 4 KiB on some VMs). What
    fsspec uses of a buffer: ``write``, ``tell`` and ``seek(0, 2)`` (its size)."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self._size = 0

    def write(self, data: Any) -> int:
        part = data if type(data) is bytes else bytes(data)
        if part:
            self._parts.append(part)
            self._size += len(part)
        return len(part)

    def tell(self) -> int:
        return self._size

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if offset == 0 and whence == io.SEEK_END:
            return self._size
        raise io.UnsupportedOperation("an xdfs file open for writing only appends")

    def parts(self) -> list[bytes]:
        """What was written, as few parts as copy nothing large: all of it joined when
        small (one call to the writer), else each large write as it is and the small ones
        between them joined."""
        if len(self._parts) <= 1 or self._size <= JOIN_MAX_BYTES:
            return [b"".join(self._parts)]
        parts: list[bytes] = []
        run: list[bytes] = []
        for part in self._parts:
            if len(part) < JOIN_MAX_BYTES:
                run.append(part)
                continue
            if run:
                parts.append(b"".join(run))
                run = []
            parts.append(part)
        if run:
            parts.append(b"".join(run))
        return parts
