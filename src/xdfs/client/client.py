"""The Python API: :class:`AsyncClient` (asyncio) and :class:`Client` (synchronous).

Both default to the configuration's ``[client]`` section (``XDFS_CONF``, ``XDFS_FS``,
``XDFS_USER``, ``XDFS_PASSWORD``). Several NameNode addresses in the URI are tried in order
with the RPC layer's failover (3 tries per address, then the next).
"""

from __future__ import annotations

import asyncio
import inspect
import io
import os
import posixpath
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import msgspec.structs

from xdfs.client import transfer
from xdfs.client.datanodes import DataNodePool
from xdfs.client.failover import namenode_probe
from xdfs.client.reader import FileReader
from xdfs.client.shards import ShardedRpcClient
from xdfs.client.sync_files import SyncReader, SyncWriter, buffered_reader, buffered_writer
from xdfs.client.writer import FileWriter, LeaseRenewer
from xdfs.common.addresses import format_fs_uri, parse_fs_uri, same_cluster, split_uri
from xdfs.config import XdfsConfig, load_config
from xdfs.errors import AlreadyExists, ConfigError, InvalidArgument, NotFound, UnknownMethod
from xdfs.protocol import namenode as p
from xdfs.protocol.blocks import BlockRecord
from xdfs.protocol.datanode import BadReplica, BadReplicasRequest
from xdfs.protocol.sharding import SlotMapResponse
from xdfs.rpc.client import RpcClient
from xdfs.rpc.messages import PROTOCOL_VERSION, Empty, Hello
from xdfs.rpc.sync import LoopThread
from xdfs.rpc.tls import client_context

DEFAULT_MODE = p.DEFAULT_MODE
T = TypeVar("T")


class AsyncClient:
    def __init__(
        self,
        fs: str | None = None,
        *,
        user: str | None = None,
        password: str | None = None,
        token: str | None = None,
        config: XdfsConfig | None = None,
        client_name: str | None = None,
    ) -> None:
        self.config = config or load_config()
        uri = fs or self.config.client.fs or self.config.ha.default_fs()
        if not uri:
            raise ConfigError("no file system given: pass fs=, set XDFS_FS or client.fs")
        self.addresses = parse_fs_uri(uri, self.config.ha.nameservices())
        self.user = user if user is not None else self.config.client.user
        self.client_name = client_name or f"xdfs-client-{uuid.uuid4().hex[:12]}"
        hello = Hello(
            PROTOCOL_VERSION,
            client_name=self.client_name,
            user=self.user,
            password=password if password is not None else self.config.client.password,
            token=token if token is not None else self.config.client.token,
        )
        ssl_context = client_context(self.config.rpc)
        self.rpc = ShardedRpcClient(
            self.addresses, self.config.rpc, hello=hello, ssl_context=ssl_context,
            probe=namenode_probe(self.config.client),
        )
        self.datanodes = DataNodePool(self.config.rpc, self.client_name, ssl_context)
        self.leases = LeaseRenewer(self.rpc, self.client_name)
        self._home: str | None = None
        #: The NameNode has no ``create_with_block`` (an older version).
        self._old_namenode = False

    async def close(self) -> None:
        await self.leases.close()
        await self.datanodes.close()
        await self.rpc.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- paths ----------------------------------------------------------------------------

    async def home(self) -> str:
        """``/user/<the authenticated user>``, where relative paths resolve (HDFS's working
        directory). The user is the one the NameNode authenticated (a token names it)."""
        if self._home is None:
            await self.rpc.call(p.STAT, p.PathRequest("/"))  # connects, with failover
            user = self.rpc.authenticated_user
            if not user:
                raise InvalidArgument("a relative path needs a user: this client is anonymous")
            self._home = f"/user/{user}"
        return self._home

    async def absolute(self, path: str) -> str:
        """The absolute path ``path`` names on this client's cluster, as HDFS resolves it:
        an ``xdfs://HOST:PORT/p`` URI of this cluster is ``/p`` (one of another cluster is
        refused: InvalidArgument), a relative path resolves against :meth:`home`. A path
        that starts with ``/`` is itself: the calls made most often (stat, mkdirs, create,
        complete ...) use such a path as it is, without awaiting this."""
        uri = split_uri(path)
        if uri is not None:
            authority, local = uri
            if authority and not same_cluster(authority, ",".join(self.addresses)):
                raise InvalidArgument(
                    f"{path} names another cluster than this client's "
                    f"({format_fs_uri(self.addresses)})"
                )
            return local
        if path.startswith("/"):
            return path
        resolved = posixpath.normpath(f"{await self.home()}/{path}")
        return resolved + "/" if path.endswith("/") and resolved != "/" else resolved

    # -- metadata -----------------------------------------------------------------------

    async def login(self, user: str, password: str, lifetime_s: float = 0.0) -> p.LoginResponse:
        """A token for ``user``: asked for on a connection of its own that logs in as
        ``user`` by SCRAM, so the password never travels (the request carries none)."""
        hello = msgspec.structs.replace(self.rpc.hello, user=user, password=password,
                                        token="", client_id=b"")  # (an id of its own)
        rpc = RpcClient(self.addresses, self.config.rpc, hello=hello,
                        ssl_context=self.rpc.ssl_context,
                        probe=namenode_probe(self.config.client))
        try:
            return await rpc.call(p.LOGIN, p.LoginRequest(user, "", lifetime_s))
        finally:
            await rpc.close()

    async def mkdirs(
        self, path: str, mode: int = DEFAULT_MODE, parents: bool = True
    ) -> p.FileStatus:
        path = path if path[:1] == "/" else await self.absolute(path)
        return await self.rpc.call(p.MKDIRS, p.MkdirsRequest(path, mode, parents))

    async def stat(self, path: str) -> p.FileStatus:
        path = path if path[:1] == "/" else await self.absolute(path)
        return await self.rpc.call(p.STAT, p.PathRequest(path))

    async def exists(self, path: str) -> bool:
        try:
            await self.stat(path)
        except NotFound:
            return False
        return True

    async def iter_dir(self, path: str, page_size: int = 1000) -> AsyncIterator[p.FileStatus]:
        """Every entry of a directory, fetched page by page (a file yields itself)."""
        path = await self.absolute(path)
        start = ""
        while True:
            listing = await self.rpc.call(p.LIST, p.ListRequest(path, start, page_size))
            for entry in listing.entries:
                yield entry
            if not listing.remaining or not listing.entries:
                return
            start = listing.entries[-1].path.rsplit("/", 1)[1]

    async def list_dir(self, path: str) -> list[p.FileStatus]:
        return [entry async for entry in self.iter_dir(path)]

    async def delete(
        self, path: str, recursive: bool = False, skip_trash: bool = False
    ) -> p.DeleteResponse:
        path = path if path[:1] == "/" else await self.absolute(path)
        return await self.rpc.call(p.DELETE, p.DeleteRequest(path, recursive, skip_trash))

    async def rename(self, src: str, dst: str) -> str:
        src = src if src[:1] == "/" else await self.absolute(src)
        dst = dst if dst[:1] == "/" else await self.absolute(dst)
        return (await self.rpc.call(p.RENAME, p.RenameRequest(src, dst))).dst

    async def set_permission(self, path: str, mode: int) -> None:
        path = await self.absolute(path)
        await self.rpc.call(p.SET_PERMISSION, p.SetPermissionRequest(path, mode))

    async def set_owner(self, path: str, owner: str = "", group: str = "") -> None:
        path = await self.absolute(path)
        await self.rpc.call(p.SET_OWNER, p.SetOwnerRequest(path, owner, group))

    async def set_replication(self, path: str, replication: int) -> None:
        path = await self.absolute(path)
        await self.rpc.call(p.SET_REPLICATION, p.SetReplicationRequest(path, replication))

    async def set_times(self, path: str, mtime_ms: int = -1, atime_ms: int = -1) -> None:
        path = await self.absolute(path)
        await self.rpc.call(p.SET_TIMES, p.SetTimesRequest(path, mtime_ms, atime_ms))

    async def content_summary(self, path: str) -> p.ContentSummary:
        path = await self.absolute(path)
        return await self.rpc.call(p.CONTENT_SUMMARY, p.PathRequest(path))

    async def block_locations(
        self, path: str, offset: int = 0, length: int = -1, ticket: str = ""
    ) -> p.LocatedBlocks:
        """``ticket``: a WebHDFS read URL's token, which reads ``path`` as its user."""
        path = await self.absolute(path)
        return await self.rpc.call(
            p.BLOCK_LOCATIONS, p.BlockLocationsRequest(path, offset, length, ticket))

    async def access(self, path: str, access: int) -> None:
        """AccessDenied unless this user may access ``path`` with the permission bits
        ``access`` (4 read, 2 write, 1 execute)."""
        path = await self.absolute(path)
        await self.rpc.call(p.ACCESS, p.AccessRequest(path, access))

    async def restore(self, trash_path: str) -> str:
        trash_path = await self.absolute(trash_path)
        return (await self.rpc.call(p.RESTORE, p.RestoreRequest(trash_path))).path

    async def expunge(self, immediate: bool = False) -> None:
        await self.rpc.call(p.EXPUNGE, p.ExpungeRequest(immediate))

    # -- reading and writing file data ------------------------------------------------

    async def open_read(self, path: str, ticket: str = "") -> FileReader:
        """A reader over ``path`` (block locations are fetched once, refreshed on failure;
        ``ticket``: as for :meth:`block_locations`)."""
        path = await self.absolute(path)
        located = await self.block_locations(path, ticket=ticket)
        return FileReader(self.rpc, self.datanodes, self.config.client, path, located,
                          ticket=ticket)

    async def open_write(self, path: str, **options: Any) -> FileWriter:
        """Create ``path`` (options as :meth:`create`) and return its writer;
        ``await writer.close()`` completes it. The file comes with its first block
        (``create_with_block``: one NameNode call less per small file)."""
        created = await self.create_with_block(path, **options)
        return FileWriter(self.rpc, self.datanodes, self.config.client, self.client_name,
                          created.status, self.leases, first=created.block)

    async def append(self, path: str) -> FileWriter:
        """Reopen ``path`` to write at its end (HDFS's append): the writer continues a
        partial last block where it is, ``await writer.hflush()`` makes what was written
        visible to new readers, ``await writer.close()`` completes the file."""
        path = await self.absolute(path)
        reopened = await self.rpc.call(p.APPEND, p.AppendRequest(path, self.client_name))
        return FileWriter.appending(
            self.rpc, self.datanodes, self.config.client, self.client_name, reopened,
            self.leases,
        )

    async def truncate(self, path: str, length: int) -> bool:
        """Cut ``path`` to ``length`` bytes (HDFS's truncate). True when done at once; False
        when its last block is being recovered to the new length: the file stays open
        (append and truncate refuse it with RecoveryInProgress) until that is done."""
        path = await self.absolute(path)
        response = await self.rpc.call(p.TRUNCATE, p.TruncateRequest(path, length,
                                                                     self.client_name))
        return response.done

    async def concat(self, target: str, sources: list[str]) -> None:
        """Move the blocks of ``sources`` to the end of ``target`` and delete the sources
        (HDFS's concat: closed files of one directory with the same block size)."""
        target = await self.absolute(target)
        sources = [await self.absolute(source) for source in sources]
        await self.rpc.call(p.CONCAT, p.ConcatRequest(target, sources))

    async def read_file(self, path: str, offset: int = 0, size: int = -1) -> bytes:
        reader = await self.open_read(path)
        return await reader.pread(offset, size)

    async def write_file(self, path: str, data: bytes, **options: Any) -> p.FileStatus:
        """Create ``path`` holding ``data`` (options as :meth:`open_write`)."""
        writer = await self.open_write(path, **options)
        async with writer:
            await writer.write(data)
        return await self.stat(path)

    async def put(self, local: str, dst: str, *, overwrite: bool = False, **options: Any
                  ) -> list[str]:
        """Upload a local file or tree (through ``._COPYING_`` files renamed when done)."""
        dst = await self.absolute(dst)
        return await transfer.put(self, local, dst, overwrite=overwrite, **options)

    async def get(self, src: str, local: str, progress: transfer.Progress | None = None
                  ) -> list[str]:
        """Download a file or tree to the local file system (``progress`` gets the length
        of each chunk written, as :meth:`put`'s and :meth:`copy`'s)."""
        src = await self.absolute(src)
        return await transfer.get(self, src, local, progress)

    async def copy(self, src: str, dst: str, *, overwrite: bool = False,
                   progress: transfer.Progress | None = None) -> str:
        src = await self.absolute(src)
        dst = await self.absolute(dst)
        return await transfer.copy(self, src, dst, overwrite=overwrite, progress=progress)

    async def copy_to(
        self, src: str, sink: Callable[[bytes | memoryview], object], offset: int = 0,
        size: int = -1,
    ) -> int:
        """Stream a byte range of ``src`` into ``sink`` (``cat``, ``tail``)."""
        src = await self.absolute(src)
        return await transfer.copy_to(self, src, sink, offset, size)

    async def report_bad_replicas(self, replicas: list[BadReplica]) -> None:
        await self.rpc.call(p.REPORT_BAD_REPLICAS, BadReplicasRequest(replicas))

    # -- writing (metadata side) --------------------------------------------------------

    async def create(
        self,
        path: str,
        *,
        overwrite: bool = False,
        replication: int = 0,
        block_size: int = 0,
        mode: int = DEFAULT_MODE,
        create_parents: bool = True,
    ) -> p.FileStatus:
        path = path if path[:1] == "/" else await self.absolute(path)
        request = p.CreateRequest(path, self.client_name, mode, replication, block_size,
                                  overwrite, create_parents)
        return await self.rpc.call(p.CREATE, request)

    async def create_with_block(
        self,
        path: str,
        *,
        overwrite: bool = False,
        replication: int = 0,
        block_size: int = 0,
        mode: int = DEFAULT_MODE,
        create_parents: bool = True,
    ) -> p.CreateBlockResponse:
        """:meth:`create`, and the file's first block allocated in the same call (a
        NameNode without that method: its plain create, the block left to add_block)."""
        path = path if path[:1] == "/" else await self.absolute(path)
        request = p.CreateRequest(path, self.client_name, mode, replication, block_size,
                                  overwrite, create_parents)
        if not self._old_namenode:
            try:
                return await self.rpc.call(p.CREATE_WITH_BLOCK, request)
            except UnknownMethod:
                self._old_namenode = True
        return p.CreateBlockResponse(await self.rpc.call(p.CREATE, request))

    async def complete(self, path: str, blocks: list[BlockRecord]) -> p.FileStatus:
        path = path if path[:1] == "/" else await self.absolute(path)
        return await self.rpc.call(p.COMPLETE, p.CompleteRequest(path, self.client_name, blocks))

    async def recover_lease(self, path: str) -> bool:
        """Start lease recovery of an open file, whoever writes it (HDFS's recoverLease);
        True when the file is closed now (False: recovery is under way, ask again)."""
        response = await self.rpc.call(p.RECOVER_LEASE, p.RecoverLeaseRequest(path))
        return response.closed

    async def touchz(self, path: str) -> p.FileStatus:
        """Create an empty file (an existing empty file is left as it is, as hdfs -touchz)."""
        path = await self.absolute(path)
        try:
            status = await self.stat(path)
        except NotFound:
            await self.create(path)
            return await self.complete(path, [])
        if status.is_dir or status.length:
            raise AlreadyExists(f"{path} exists and is not an empty file")
        return status

    # -- administration -----------------------------------------------------------------

    async def safe_mode(self, action: str = "get") -> p.SafeModeStatus:
        return await self.rpc.call(p.SAFE_MODE, p.SafeModeRequest(action))

    async def save_namespace(self) -> int:
        return (await self.rpc.call(p.SAVE_NAMESPACE, Empty())).txid

    async def roll_edits(self) -> int:
        return (await self.rpc.call(p.ROLL_EDITS, Empty())).txid

    async def add_user(self, name: str, password: str, groups: list[str] | None = None) -> None:
        await self.rpc.call(p.ADD_USER, p.UserRequest(name, password, groups or []))

    async def remove_user(self, name: str) -> None:
        await self.rpc.call(p.REMOVE_USER, p.UserRequest(name))

    async def set_password(self, name: str, password: str) -> None:
        await self.rpc.call(p.SET_PASSWORD, p.UserRequest(name, password))

    async def set_quota(
        self, path: str, ns_quota: int | None = None, ds_quota: int | None = None
    ) -> None:
        """Set (a number) or clear (-1) a directory's name and/or space quota; None leaves
        that one as it is (superuser only)."""
        path = await self.absolute(path)
        await self.rpc.call(p.SET_QUOTA, p.SetQuotaRequest(path, ns_quota, ds_quota))

    async def shard_maps(self) -> list[SlotMapResponse]:
        """The slot map and every shard's inode count (xdfs admin -shards)."""
        return await self.rpc.shard_maps()

    async def status(self) -> p.NameNodeStatus:
        return await self.rpc.call(p.STATUS, Empty())

    async def datanode_report(self) -> p.DataNodeReport:
        return await self.rpc.call(p.DATANODE_REPORT, Empty())

    async def refresh_nodes(self) -> p.RefreshNodesResponse:
        """Have the NameNode re-read its include, exclude and maintenance files."""
        return await self.rpc.call(p.REFRESH_NODES, Empty())

    async def balancer_blocks(self, node_id: str, bytes_max: int) -> list[p.BalancerBlock]:
        answer = await self.rpc.call(p.BALANCER_BLOCKS, p.BalancerBlocksRequest(node_id, bytes_max))
        return answer.blocks

    async def move_replica(self, block_id: int, source: str, target: str) -> p.MoveReplicaResponse:
        """Move one replica (node ids); answers once the target reported it (or not)."""
        return await self.rpc.call(p.MOVE_REPLICA, p.MoveReplicaRequest(block_id, source, target))

    async def fsck(
        self, path: str, files: bool = False, blocks: bool = False, locations: bool = False
    ) -> p.FsckReport:
        path = await self.absolute(path)
        return await self.rpc.call(p.FSCK, p.FsckRequest(path, files, blocks, locations))

    async def fetch_image(self, directory: str | os.PathLike[str]) -> Path:
        """Download the NameNode's newest fsimage into ``directory`` (as ``fsimage_<txid>``
        plus its ``.md5``, md5 verified, installed atomically); returns its path."""
        from xdfs.common.images import receive_image
        from xdfs.protocol.backup import FETCH_IMAGE

        target = Path(directory)
        await asyncio.to_thread(target.mkdir, parents=True, exist_ok=True)
        async with await self.rpc.download(FETCH_IMAGE, Empty()) as stream:
            return await receive_image(stream.head, stream, target)

    async def block_map(
        self, sink: Callable[[list[p.BlockMapRow]], object]
    ) -> p.BlockMapHead:
        """Stream the NameNode's live block map (superuser only): ``sink`` gets the rows a
        batch at a time as they arrive (so a large map is never held whole); returns the
        head (block and replica counts, the DataNodes)."""
        from xdfs.protocol.block_map import FrameDecoder

        decoder = FrameDecoder()
        async with await self.rpc.download(p.BLOCK_MAP, Empty()) as stream:
            async for chunk in stream:
                for rows in decoder.feed(chunk):
                    sink(rows)
            decoder.finish()
            head: p.BlockMapHead = stream.head
            return head


#: Methods of :class:`AsyncClient` that only resolve their paths and make unary calls: the
#: synchronous client runs them in the calling thread (LoopThread.run_inline), each call
#: over a blocking connection that thread takes for it, with no hop to the event loop's
#: thread and back.
INLINE_METHODS = frozenset({
    "access", "block_locations", "content_summary", "delete", "exists", "expunge", "home",
    "absolute", "mkdirs", "rename", "restore", "set_owner", "set_permission",
    "set_replication", "set_times", "stat", "status", "safe_mode", "datanode_report",
    "fsck", "set_quota", "recover_lease", "concat", "truncate", "login", "list_dir",
    "create", "create_with_block", "complete", "touchz",
})


class Client:
    """Synchronous twin of :class:`AsyncClient`: every coroutine method of the async
    client is available here as a blocking method with the same name and arguments."""

    def __init__(self, fs: str | None = None, **kwargs: Any) -> None:
        self._loop = LoopThread("xdfs-client")
        try:
            self._async = self._loop.run(_construct(fs, kwargs))
        except BaseException:
            self._loop.close()
            raise

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._async, name)
        if not callable(target) or name.startswith("_"):
            return target
        inline = name in INLINE_METHODS and self._async.config.client.inline_calls
        run = self._loop.run_inline if inline else self._loop.run
        call: Callable[..., Any]
        if inspect.iscoroutinefunction(target):  # known once, not looked at per call

            def call(*args: Any, **kwargs: Any) -> Any:
                return run(target(*args, **kwargs))

        else:

            def call(*args: Any, **kwargs: Any) -> Any:
                result = target(*args, **kwargs)
                if hasattr(result, "__aiter__"):
                    return self._loop.run(_collect(result))
                if isinstance(result, Coroutine):
                    return run(result)
                return result

        # Kept: the next call of this method finds it without coming here (every fsspec
        # operation is one of these calls, from any number of threads).
        self.__dict__[name] = call
        return call

    @property
    def async_client(self) -> AsyncClient:
        """The async client this one drives (for helpers written against it, with :meth:`run`)."""
        return self._async

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on this client's event loop and wait for its result."""
        return self._loop.run(coroutine)

    def open_reader(self, path: str) -> SyncReader:
        """A blocking reader; its block locations (``AsyncClient.open_read``: unary calls
        only) are fetched from the calling thread with ``client.inline_calls``, one hop to
        the loop's thread and back fewer per file opened (the data is streamed on the
        loop)."""
        inline = self._async.config.client.inline_calls
        run = self._loop.run_inline if inline else self._loop.run
        return SyncReader(self._loop, run(self._async.open_read(path)))

    def open_writer(self, path: str, **options: Any) -> SyncWriter:
        """A blocking writer (options as :meth:`AsyncClient.open_write`). With
        ``client.inline_calls`` a small file written whole at close is sent to its
        DataNodes from the calling thread (see :meth:`FileWriter.write_and_close`), and
        with ``client.inline_create_complete`` the file is created from it too."""
        config = self._async.config.client
        inline = config.inline_calls
        run = (self._loop.run_inline if inline and config.inline_create_complete
               else self._loop.run)
        return SyncWriter(self._loop, run(self._async.open_write(path, **options)), inline)

    def append(self, path: str) -> SyncWriter:
        """A blocking writer at the end of ``path`` (see :meth:`AsyncClient.append`)."""
        return SyncWriter(self._loop, self._loop.run(self._async.append(path)))

    def open(self, path: str, mode: str = "rb", **options: Any) -> io.BufferedIOBase:
        """A binary file object: ``"rb"`` (seekable), ``"wb"`` (``overwrite=True`` to
        replace an existing file) or ``"ab"`` (append); closing a written file completes
        it."""
        if mode == "rb":
            return buffered_reader(self.open_reader(path), path)
        if mode == "wb":
            return buffered_writer(self.open_writer(path, **options), path)
        if mode == "ab":
            return buffered_writer(self.append(path), path)
        raise ValueError(f"mode must be 'rb', 'wb' or 'ab', not {mode!r}")

    def close(self) -> None:
        if not self._loop.loop.is_closed():
            self._loop.run(self._async.close())
            self._loop.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _construct(fs: str | None, kwargs: dict[str, Any]) -> AsyncClient:
    return AsyncClient(fs, **kwargs)


async def _collect(items: AsyncIterator[Any]) -> list[Any]:
    return [item async for item in items]
