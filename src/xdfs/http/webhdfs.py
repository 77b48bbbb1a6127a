"""The WebHDFS wire shapes shared by the NameNode's gateway and the DataNodes' data part:
URL paths and parameters, HDFS's JSON bodies, RemoteException errors with HDFS's HTTP
statuses, and HDFS's file checksum (MD5 of MD5s of CRC32Cs). Pure: no sockets, no clock."""

from __future__ import annotations

import hashlib
import json
import logging
import struct
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

import crc32c
from aiohttp import web

from xdfs import errors as e
from xdfs.protocol.namenode import ContentSummary, FileStatus, LocatedBlocks

log = logging.getLogger(__name__)

PREFIX = "/webhdfs/v1"
#: The query parameter of a scoped URL's token (one operation on one file: a NameNode's
#: redirects to DataNodes; xdfs.namenode.webhdfs.scoped_urls). A full token of the user
#: travels as ``delegation``.
TICKET_PARAM = "ticket"
#: The operations whose URL carries a file-read ticket, and a file-write one.
READ_OPS = ("OPEN", "GETFILECHECKSUM")
WRITE_OPS = ("CREATE", "APPEND")
#: Bytes covered by one CRC32C in HDFS's file checksum (dfs.bytes-per-checksum default),
#: so that xdfs and HDFS give equal checksums for equal bytes and block sizes.
CHECKSUM_BYTES_PER_CRC = 512

# (exception, javaClassName, HTTP status) as HDFS's ExceptionHandler answers them; the
# first class of an error's MRO found here wins.
_REMOTE: dict[type[Exception], tuple[str, str, int]] = {
    e.NotFound: ("FileNotFoundException", "java.io.FileNotFoundException", 404),
    e.IsADirectory: ("FileNotFoundException", "java.io.FileNotFoundException", 404),
    e.AccessDenied: (
        "AccessControlException", "org.apache.hadoop.security.AccessControlException", 403),
    e.SecurityError: ("SecurityException", "java.lang.SecurityException", 401),
    e.AlreadyExists: (
        "FileAlreadyExistsException", "org.apache.hadoop.fs.FileAlreadyExistsException", 403),
    e.DirectoryNotEmpty: (
        "PathIsNotEmptyDirectoryException",
        "org.apache.hadoop.fs.PathIsNotEmptyDirectoryException", 403),
    e.NotADirectory: (
        "ParentNotDirectoryException", "org.apache.hadoop.fs.ParentNotDirectoryException", 403),
    e.LeaseError: (
        "AlreadyBeingCreatedException",
        "org.apache.hadoop.hdfs.protocol.AlreadyBeingCreatedException", 403),
    e.SafeModeError: (
        "SafeModeException", "org.apache.hadoop.hdfs.server.namenode.SafeModeException", 403),
    e.NotActive: ("StandbyException", "org.apache.hadoop.ipc.StandbyException", 403),
    e.Unsupported: (
        "UnsupportedOperationException", "java.lang.UnsupportedOperationException", 400),
    e.InvalidPath: ("IllegalArgumentException", "java.lang.IllegalArgumentException", 400),
    e.InvalidArgument: ("IllegalArgumentException", "java.lang.IllegalArgumentException", 400),
    e.BadRequest: ("IllegalArgumentException", "java.lang.IllegalArgumentException", 400),
    e.XdfsError: ("IOException", "java.io.IOException", 403),
}


class StreamBroken(Exception):
    """A streamed answer failed after its status went out: the connection is cut, so the
    client sees a broken body (fewer bytes than Content-Length said, or an unterminated
    chunked body), never a silently short one. Handlers let it through."""


def json_response(body: Any, status: int = 200, headers: Mapping[str, str] | None = None
                  ) -> web.Response:
    return web.Response(text=json.dumps(body), status=status, headers=headers,
                        content_type="application/json")


def remote_exception(error: BaseException) -> web.Response:
    """HDFS's error body: ``{"RemoteException": {exception, javaClassName, message}}``,
    with its status. Anything but an XdfsError is a bug: logged, answered 500."""
    if isinstance(error, e.XdfsError):
        exception, java_class, status = next(
            _REMOTE[cls] for cls in type(error).__mro__ if cls in _REMOTE
        )
        message = error.message
    else:
        log.error("webhdfs request failed", exc_info=error)
        exception, java_class, status = "RuntimeException", "java.lang.RuntimeException", 500
        message = f"internal error: {type(error).__name__}"
    headers = {"WWW-Authenticate": 'Basic realm="xdfs"'} if status == 401 else None
    body = {"RemoteException": {
        "exception": exception, "javaClassName": java_class, "message": message}}
    return json_response(body, status, headers)


def request_path(request: web.Request) -> str:
    """The file-system path a ``/webhdfs/v1/<path>`` URL names, percent-decoded from the
    URL as sent (the HTTP layer would resolve ``..`` and ``.`` first; the namespace refuses
    them, as it refuses NUL, control characters and empty components: InvalidPath)."""
    raw = request.raw_path.split("?", 1)[0]
    if not raw.startswith(PREFIX):
        raise e.InvalidPath(f"a WebHDFS URL starts with {PREFIX}/")
    try:
        path = unquote(raw[len(PREFIX):], errors="strict")
    except UnicodeDecodeError:
        raise e.InvalidPath("the path is not valid UTF-8") from None
    return path if path.startswith("/") else "/" + path


# -- parameters --------------------------------------------------------------------------


def bool_param(query: Mapping[str, str], name: str, default: bool) -> bool:
    value = query.get(name)
    if value is None or value == "":
        return default
    lowered = value.lower()
    if lowered not in ("true", "false"):
        raise e.InvalidArgument(f'Invalid value for webhdfs parameter "{name}": {value[:40]}')
    return lowered == "true"


def int_param(query: Mapping[str, str], name: str, default: int, minimum: int = 0) -> int:
    value = query.get(name)
    if value is None or value == "":
        return default
    try:
        number = int(value, 10)
    except ValueError:
        raise e.InvalidArgument(
            f'Invalid value for webhdfs parameter "{name}": {value[:40]}') from None
    if number < minimum:
        raise e.InvalidArgument(f'Invalid value for webhdfs parameter "{name}": {number} '
                                f"(must be >= {minimum})")
    return number


def permission_param(query: Mapping[str, str], default: int) -> int:
    """``permission=755`` (octal, sticky bit allowed: ``1777``)."""
    value = query.get("permission")
    if value is None or value == "":
        return default
    try:
        mode = int(value, 8)
    except ValueError:
        mode = -1
    if not 0 <= mode <= 0o1777:
        raise e.InvalidArgument(
            f'Invalid value for webhdfs parameter "permission": {value[:40]} '
            "(octal, 0 to 1777)")
    return mode


# -- bodies ------------------------------------------------------------------------------


def file_status(status: FileStatus, path_suffix: str = "") -> dict[str, Any]:
    return {
        "accessTime": status.atime_ms,
        "blockSize": status.block_size,
        "childrenNum": status.children,
        "fileId": status.inode_id,
        "group": status.group,
        "length": status.length,
        "modificationTime": status.mtime_ms,
        "owner": status.owner,
        "pathSuffix": path_suffix,
        "permission": format(status.mode & 0o1777, "o"),
        "replication": status.replication,
        "storagePolicy": 0,
        "type": "DIRECTORY" if status.is_dir else "FILE",
    }


def file_statuses(entries: list[FileStatus]) -> dict[str, Any]:
    return {"FileStatus": [file_status(s, s.path.rsplit("/", 1)[1]) for s in entries]}


def statuses(path: str, entries: list[FileStatus]) -> dict[str, Any]:
    """A listing's ``FileStatuses``; a file lists itself, with an empty pathSuffix (HDFS)."""
    if len(entries) == 1 and not entries[0].is_dir and entries[0].path.rstrip("/") == (
            path.rstrip("/") or "/"):
        return {"FileStatus": [file_status(entries[0])]}
    return file_statuses(entries)


def content_summary(summary: ContentSummary) -> dict[str, Any]:
    """HDFS's ``ContentSummary`` with the path's own quotas (-1: none). ``typeQuota``
    names only storage types with a quota set (HDFS's JsonUtil): xdfs has one storage
    type and no per-type quotas, so it is always ``{}``."""
    return {"ContentSummary": {
        "directoryCount": summary.directory_count,
        "fileCount": summary.file_count,
        "length": summary.length,
        "quota": summary.ns_quota,
        "spaceConsumed": summary.space_consumed,
        "spaceQuota": summary.ds_quota,
        "typeQuota": {},
    }}


def quota_usage(summary: ContentSummary) -> dict[str, Any]:
    """HDFS's ``QuotaUsage`` (GETQUOTAUSAGE): the names and bytes a quota counts."""
    return {"QuotaUsage": {
        "fileAndDirectoryCount": summary.file_count + summary.directory_count,
        "quota": summary.ns_quota,
        "spaceConsumed": summary.space_consumed,
        "spaceQuota": summary.ds_quota,
        "typeQuota": {},
    }}


def block_locations(located: LocatedBlocks) -> dict[str, Any]:
    """HDFS's ``BlockLocations`` (GETFILEBLOCKLOCATIONS): hosts and DataNode addresses."""
    return {"BlockLocations": {"BlockLocation": [
        {
            "cachedHosts": [],
            "corrupt": False,
            "hosts": [address.rsplit(":", 1)[0] for address in block.locations],
            "length": block.block.num_bytes,
            "names": list(block.locations),
            "offset": block.offset,
            "storageTypes": ["DISK"] * len(block.locations),
            "topologyPaths": [f"/default-rack/{address}" for address in block.locations],
        }
        for block in located.blocks
    ]}}


def boolean(value: bool) -> dict[str, bool]:
    return {"boolean": value}


# -- file checksum -----------------------------------------------------------------------


class FileChecksum:
    """HDFS's MD5-of-MD5-of-CRC32C of a file fed in order: a CRC32C per 512 bytes, an MD5
    per block over its CRCs (big-endian), an MD5 over the block MD5s. ``block_lengths``:
    the file's blocks in order (a chunk never spans two blocks)."""

    def __init__(self, block_lengths: list[int], block_size: int) -> None:
        self._lengths = [length for length in block_lengths if length > 0]
        self._block_size = block_size
        self._block_md5s = hashlib.md5(usedforsecurity=False)
        self._crcs = bytearray()
        self._left_in_block = self._lengths[0] if self._lengths else 0
        self._block_index = 0
        self._chunk = bytearray()

    def update(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while view:
            if self._left_in_block == 0:
                raise e.InvalidArgument("more bytes than the file's blocks hold")
            take = min(len(view), self._left_in_block,
                       CHECKSUM_BYTES_PER_CRC - len(self._chunk))
            self._chunk += view[:take]
            view = view[take:]
            self._left_in_block -= take
            if len(self._chunk) == CHECKSUM_BYTES_PER_CRC or self._left_in_block == 0:
                self._crcs += struct.pack(">I", crc32c.crc32c(bytes(self._chunk)))
                self._chunk.clear()
            if self._left_in_block == 0:
                self._end_block()

    def _end_block(self) -> None:
        self._block_md5s.update(hashlib.md5(bytes(self._crcs), usedforsecurity=False).digest())
        self._crcs.clear()
        self._block_index += 1
        if self._block_index < len(self._lengths):
            self._left_in_block = self._lengths[self._block_index]

    def result(self) -> dict[str, Any]:
        """``{"FileChecksum": {algorithm, bytes, length}}`` as WebHDFS answers it."""
        if self._left_in_block or self._block_index < len(self._lengths):
            raise e.InvalidArgument("fewer bytes than the file's blocks hold")
        # HDFS names the CRCs per block only for files of more than one block.
        per_block = self._block_size // CHECKSUM_BYTES_PER_CRC if len(self._lengths) > 1 else 0
        raw = struct.pack(">iq", CHECKSUM_BYTES_PER_CRC, per_block) + self._block_md5s.digest()
        return {"FileChecksum": {
            "algorithm": f"MD5-of-{per_block}MD5-of-{CHECKSUM_BYTES_PER_CRC}CRC32C",
            "bytes": raw.hex(),
            "length": len(raw),
        }}
