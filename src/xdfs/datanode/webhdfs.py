"""The data part of WebHDFS on a DataNode: what the NameNode's gateway redirects to.

``PUT ?op=CREATE`` streams the request body into a new file, ``GET ?op=OPEN`` streams a
byte range out, ``GET ?op=GETFILECHECKSUM`` computes HDFS's MD5-of-MD5-of-CRC32C. Like
HDFS's DataNode with its DFSClient, the DataNode does it through an xdfs client of its
NameNode, authenticated with the request's credentials (the ``delegation`` token the
NameNode put in the redirect of a write), so the NameNode checks the user exactly as for
any client. A read's redirect carries instead a token that reads that one file
(``ticket``, xdfs.namenode.webhdfs.scoped_urls): the client connects without credentials
and hands it to the NameNode with its ``block_locations`` calls, the only ones it opens."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

from xdfs.client.client import AsyncClient
from xdfs.client.transfer import stream_to
from xdfs.common.addresses import format_fs_uri
from xdfs.config import AUTH_CREDENTIALS, XdfsConfig
from xdfs.errors import AccessDenied, InvalidArgument, IsADirectory
from xdfs.http import webhdfs as w
from xdfs.http.auth import request_credentials
from xdfs.http.server import body_chunks
from xdfs.protocol import namenode as p
from xdfs.protocol.namenode import DEFAULT_MODE
from xdfs.rpc.messages import Hello

log = logging.getLogger(__name__)

Operation = Callable[["DataNodeWebHdfs", web.Request, AsyncClient, str],
                     Awaitable[web.StreamResponse]]


class DataNodeWebHdfs:
    def __init__(self, config: XdfsConfig, namenode_addresses: list[str],
                 login: Callable[[], Hello] | None = None) -> None:
        """``login``: how this DataNode logs in to its NameNode (to exchange the token of
        a write URL); None: write URLs are refused."""
        self.config = config
        self.fs_uri = format_fs_uri(namenode_addresses)
        self._login = login
        self._ops: dict[tuple[str, str], Operation] = {
            ("PUT", "CREATE"): _create,
            ("GET", "OPEN"): _open,
            ("GET", "GETFILECHECKSUM"): _checksum,
            ("POST", "APPEND"): _append,
        }

    def routes(self) -> list[web.RouteDef]:
        return [web.route("*", w.PREFIX + r"{path:[\s\S]*}", self.handle)]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            op = request.query.get("op", "").upper()
            function = self._ops.get((request.method, op))
            if function is None:
                raise InvalidArgument(
                    f'Invalid value for webhdfs parameter "op": {op[:40] or "(none)"} is not '
                    f"a {request.method} operation of a DataNode")
            path = w.request_path(request)
            client = await self._client(request, op, path)
            try:
                return await function(self, request, client, path)
            finally:
                await client.close()
        except w.StreamBroken:
            raise  # the status went out already: the cut connection says it failed
        except Exception as exc:
            return w.remote_exception(exc)


    def body(self, request: web.Request) -> AsyncIterator[bytes]:
        http = self.config.http
        return body_chunks(request, http.data_chunk_bytes, http.body_idle_timeout_s)

    async def _client(self, request: web.Request, op: str, path: str) -> AsyncClient:
        """A client of the NameNode as the request's user. A scoped URL's (``ticket``):
        for a read, one without credentials (the token goes with each call); for a write,
        one with the token of the user this DataNode gets for it. Else one with the
        request's own credentials."""
        ticket = request.query.get(w.TICKET_PARAM, "")
        if not ticket:
            # user.name is never trusted here: the NameNode's redirect carries a token
            credentials = request_credentials(request.query, request.headers,
                                              AUTH_CREDENTIALS)
            return self._new_client(credentials.user, credentials.password, credentials.token)
        if op in w.READ_OPS:
            return self._new_client("", "", "")
        return self._new_client("", "", await self._write_login(ticket, op, path))

    def _new_client(self, user: str, password: str, token: str) -> AsyncClient:
        return AsyncClient(self.fs_uri, config=self.config, user=user, password=password,
                           token=token, client_name=f"webhdfs-{uuid.uuid4().hex[:12]}")

    async def _write_login(self, ticket: str, op: str, path: str) -> str:
        """The token of the user a write URL's ticket names, from the NameNode, which
        gives it to a DataNode only (it stays here, and expires with the URL's)."""
        if self._login is None:
            raise AccessDenied("this DataNode takes no write URL (it has no NameNode login)")
        hello = self._login()
        client = self._new_client(hello.user, hello.password, hello.token)
        try:
            answer = await client.rpc.call(p.WEBHDFS_WRITE_LOGIN,
                                           p.WebHdfsWriteRequest(ticket, op, path))
        finally:
            await client.close()
        return answer.token


def _read_token(request: web.Request) -> str:
    """A read URL's ticket ("" for a request with its own credentials)."""
    return request.query.get(w.TICKET_PARAM, "")


async def _create(dn: DataNodeWebHdfs, request: web.Request, client: AsyncClient,
                  path: str) -> web.StreamResponse:
    """201 and ``Location`` once the file is complete (closed on the NameNode); a body cut
    short leaves no file (the partial one is deleted)."""
    query = request.query
    await stream_to(
        client, path, dn.body(request),
        overwrite=w.bool_param(query, "overwrite", False),
        replication=w.int_param(query, "replication", 0),
        block_size=w.int_param(query, "blocksize", 0),
        mode=w.permission_param(query, DEFAULT_MODE),
    )
    return web.Response(status=201, headers={"Location": f"{dn.fs_uri}{path}"})


async def _open(dn: DataNodeWebHdfs, request: web.Request, client: AsyncClient,
                path: str) -> web.StreamResponse:
    offset = w.int_param(request.query, "offset", 0)
    length = w.int_param(request.query, "length", -1, minimum=-1)
    reader = await client.open_read(path, ticket=_read_token(request))
    if offset > reader.length or (offset == reader.length > 0):
        raise InvalidArgument(f"Offset={offset} out of the range [0, {reader.length}); "
                              f"OPEN, path={path}")
    end = reader.length if length < 0 else min(reader.length, offset + length)
    response = web.StreamResponse(status=200, headers={
        "Content-Type": "application/octet-stream"})
    response.content_length = end - offset
    await response.prepare(request)
    try:
        async for piece in reader.iter_range(offset, end - offset):
            await response.write(piece)
    except Exception as exc:
        log.warning("webhdfs OPEN %s failed after %d bytes: %s", path,
                    response.body_length, exc)
        raise w.StreamBroken(str(exc)) from exc
    await response.write_eof()
    return response


async def _checksum(dn: DataNodeWebHdfs, request: web.Request, client: AsyncClient,
                    path: str) -> web.StreamResponse:
    ticket = _read_token(request)
    if ticket:  # the NameNode named the block size (a read URL may not stat)
        block_size = w.int_param(request.query, "blocksize", 0)
    else:
        status = await client.stat(path)
        if status.is_dir:
            raise IsADirectory(f"Path is not a file: {path}")
        block_size = status.block_size
    reader = await client.open_read(path, ticket=ticket)
    checksum = w.FileChecksum([b.block.num_bytes for b in reader.blocks], block_size)
    async for piece in reader.iter_range():
        checksum.update(piece)
    return w.json_response(checksum.result())


async def _append(dn: DataNodeWebHdfs, request: web.Request, client: AsyncClient,
                  path: str) -> web.StreamResponse:
    """200 once the appended data is durable and the file closed again."""
    writer = await client.append(path)
    try:
        async for data in dn.body(request):
            await writer.write(data)
    except BaseException:
        await writer.abort()
        raise
    await writer.close()
    return web.Response(status=200)
