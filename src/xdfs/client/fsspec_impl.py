"""An fsspec file system for ``xdfs://`` URLs (pandas, pyarrow, dask read and write through it).

``fsspec.filesystem("xdfs", fs="xdfs://host:port", user=..., password=...)``, or with no
arguments the ``[client]`` configuration (``XDFS_CONF``, ``XDFS_FS`` ...). Method semantics
follow fsspec's documentation: ``info`` raises FileNotFoundError, ``mkdir`` creates parents
by default and refuses an existing path, ``makedirs(exist_ok=...)``, ``rm(recursive=...)``.
``rm`` deletes for good (it bypasses the trash, which is a shell-user convenience, as
``hdfs dfs -rm -skipTrash`` does).
"""

from __future__ import annotations

import time
from typing import Any

from fsspec import AbstractFileSystem
from fsspec.spec import AbstractBufferedFile

from xdfs.client.client import Client
from xdfs.client.sync_files import SyncReader, SyncWriter
from xdfs.common.addresses import SCHEME, split_uri
from xdfs.errors import NotFound
from xdfs.protocol.namenode import FileStatus


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

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        return self._entry(self.client.stat(self._strip_protocol(path)))

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        path = self._strip_protocol(path)
        entries = [self._entry(s) for s in self.client.list_dir(path)]
        return entries if detail else [e["name"] for e in entries]

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        path = self._strip_protocol(path)
        if self.client.exists(path):
            raise FileExistsError(path)
        self.client.mkdirs(path, parents=create_parents)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        path = self._strip_protocol(path)
        try:
            status = self.client.stat(path)
        except NotFound:
            self.client.mkdirs(path, parents=True)
            return
        if not exist_ok or not status.is_dir:
            raise FileExistsError(path)

    def rmdir(self, path: str) -> None:
        path = self._strip_protocol(path)
        if not self.client.stat(path).is_dir:
            raise NotADirectoryError(path)
        self.client.delete(path, recursive=False, skip_trash=True)

    def rm(self, path: Any, recursive: bool = False, maxdepth: int | None = None) -> None:
        for one in path if isinstance(path, list) else [path]:
            self.client.delete(self._strip_protocol(one), recursive=recursive, skip_trash=True)

    def _rm(self, path: str) -> None:
        self.client.delete(self._strip_protocol(path), recursive=False, skip_trash=True)

    def mv(self, path1: str, path2: str, recursive: bool = False, **kwargs: Any) -> None:
        self.client.rename(self._strip_protocol(path1), self._strip_protocol(path2))

    def touch(self, path: str, truncate: bool = True, **kwargs: Any) -> None:
        path = self._strip_protocol(path)
        if not truncate:
            # update the modification time of an existing entry (-1 would leave it as is)
            try:
                self.client.set_times(path, mtime_ms=int(time.time() * 1000))
                return
            except NotFound:
                pass
        self.client.touchz(path)  # AlreadyExists (FileExistsError) for a non-empty file

    def created(self, path: str) -> Any:
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
        if mode not in ("rb", "wb"):
            raise ValueError(f"xdfs files open as 'rb' or 'wb', not {mode!r}")
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
        path = self._strip_protocol(path)
        if mode == "create" and self.client.exists(path):
            raise FileExistsError(path)
        self.client.write_file(path, value, overwrite=True)

    def put_file(self, lpath: str, rpath: str, callback: Any = None, **kwargs: Any) -> None:
        import os

        rpath = self._strip_protocol(rpath)
        if os.path.isdir(lpath):
            self.makedirs(rpath, exist_ok=True)
            return
        self.client.put(lpath, rpath, overwrite=True)

    def get_file(self, rpath: str, lpath: str, callback: Any = None, **kwargs: Any) -> None:
        import os

        rpath = self._strip_protocol(rpath)
        if self.isdir(rpath):
            os.makedirs(lpath, exist_ok=True)
            return
        if os.path.exists(lpath) and not os.path.isdir(lpath):
            os.remove(lpath)  # fsspec semantics: get overwrites the local file
        self.client.get(rpath, lpath)


def _clip_range(start: int | None, end: int | None, size: int) -> tuple[int, int]:
    """fsspec's byte range: None = file edge, negative = from the end, clipped to the file."""
    first = 0 if start is None else (max(0, size + start) if start < 0 else min(start, size))
    last = size if end is None else (max(0, size + end) if end < 0 else min(end, size))
    return first, max(first, last)


class XdfsFile(AbstractBufferedFile):  # type: ignore[misc]
    """fsspec's buffered file over the xdfs reader (random access) or writer."""

    def __init__(self, fs: XdfsFileSystem, path: str, mode: str, block_size: Any,
                 **kwargs: Any) -> None:
        self._reader: SyncReader | None = None
        self._writer: SyncWriter | None = None
        if mode == "rb":
            self._reader = fs.client.open_reader(path)
            kwargs["size"] = self._reader.size
        super().__init__(fs, path, mode, block_size, **kwargs)

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
        self._writer = self.fs.client.open_writer(self.path, overwrite=True)

    def _upload_chunk(self, final: bool = False) -> bool:
        assert self._writer is not None, "fsspec initiates the upload before the first chunk"
        self._writer.write(self.buffer.getbuffer())
        if final:
            self._writer.close()
        return True

    def discard(self) -> None:
        if self._writer is not None:
            self._writer.abort()
