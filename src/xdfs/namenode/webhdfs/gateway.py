"""WebHDFS on the NameNode: ``/webhdfs/v1/<path>?op=...`` with HDFS's JSON shapes, errors
and statuses, plus an OAuth2 token endpoint for Hadoop's WebHDFS client.

Metadata operations run here, against the namesystem, as the request's user, with the
checks an RPC call of that user gets (the same namesystem methods, the same caller check).
Data operations (CREATE, APPEND, OPEN, GETFILECHECKSUM) are answered as HDFS answers them: a 307
redirect to a DataNode's HTTP server, whose URL carries a token good for that one
operation on that one file (``ticket=``, :mod:`.scoped_urls`): the DataNode reads with it,
or exchanges it for a token of the user to write through an xdfs client.

In an HA pair the gateway runs on each NameNode whatever its state: a standby (or a
NameNode still starting or stopping) answers every file-system request with HDFS's
``StandbyException`` (HTTP 403, RemoteException JSON), so a WebHDFS client that knows
both addresses moves on to the other, as HDFS's WebHdfsFileSystem does. The OAuth2
endpoint is the exception: a standby issues tokens too (:func:`standby_token`), because
Hadoop's token provider knows one URL only."""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol
from urllib.parse import quote, urlencode

from aiohttp import web

from xdfs.common import tokens
from xdfs.config import XdfsConfig
from xdfs.errors import (
    AccessDenied,
    AlreadyExists,
    AuthenticationFailed,
    InvalidArgument,
    NotFound,
    Standby,
    Unavailable,
    Unsupported,
    XdfsError,
)
from xdfs.http import webhdfs as w
from xdfs.http.auth import Credentials, PasswordCache, request_credentials
from xdfs.http.server import read_form
from xdfs.namenode.handlers.client import principal_user
from xdfs.namenode.namespace.ops import UserRecord
from xdfs.namenode.namespace.trash import home
from xdfs.namenode.namesystem import Namesystem
from xdfs.namenode.security.auth import ANONYMOUS, NameNodeAuth, UserPrincipal
from xdfs.namenode.webhdfs.listing import PerUserLimit, stream_listing
from xdfs.namenode.webhdfs.scoped_urls import issue_read_token, issue_write_token
from xdfs.protocol.ha import STATE_ACTIVE, STATE_STANDBY
from xdfs.protocol.namenode import DEFAULT_MODE
from xdfs.rpc.handling import Principal

log = logging.getLogger(__name__)

OAUTH2_TOKEN_PATH = "/oauth2/token"
#: Entries of one LISTSTATUS_BATCH page (HDFS: dfs.ls.limit, 1000).
LIST_PAGE_ENTRIES = 1000

_NO_ACLS = "xdfs has no ACLs (permissions are owner, group and mode bits)"
_NO_XATTRS = "xdfs has no extended attributes"
_NO_SNAPSHOTS = "xdfs has no snapshots"
_NO_POLICIES = "xdfs has one storage type and no storage policies"
_NO_EC = "xdfs has no erasure coding (files are replicated)"
#: HDFS's WebHDFS operations this gateway does not provide, and why: refused with
#: UnsupportedOperationException (an op HDFS does not know is IllegalArgumentException).
NOT_PROVIDED: dict[str, str] = {
    **dict.fromkeys(("GETACLSTATUS", "MODIFYACLENTRIES", "REMOVEACLENTRIES",
                     "REMOVEDEFAULTACL", "REMOVEACL", "SETACL"), _NO_ACLS),
    **dict.fromkeys(("GETXATTRS", "LISTXATTRS", "SETXATTR", "REMOVEXATTR"), _NO_XATTRS),
    **dict.fromkeys(("GETSNAPSHOTDIFF", "GETSNAPSHOTDIFFLISTING",
                     "GETSNAPSHOTTABLEDIRECTORYLIST", "GETSNAPSHOTLIST", "CREATESNAPSHOT",
                     "RENAMESNAPSHOT", "DELETESNAPSHOT", "ALLOWSNAPSHOT", "DISALLOWSNAPSHOT"),
                    _NO_SNAPSHOTS),
    **dict.fromkeys(("GETALLSTORAGEPOLICY", "GETSTORAGEPOLICY", "SETSTORAGEPOLICY",
                     "UNSETSTORAGEPOLICY", "SATISFYSTORAGEPOLICY", "SETQUOTABYSTORAGETYPE"),
                    _NO_POLICIES),
    **dict.fromkeys(("GETECPOLICY", "SETECPOLICY", "UNSETECPOLICY", "ENABLEECPOLICY",
                     "DISABLEECPOLICY"), _NO_EC),
    **dict.fromkeys(("CREATESYMLINK", "GETLINKTARGET", "GETFILELINKSTATUS"),
                    "xdfs has no symbolic links"),
    "SETQUOTA": "set quotas with `xdfs admin -setQuota` / `-setSpaceQuota` (RPC)",
}

Operation = Callable[["WebHdfsGateway", web.Request, str, str, Credentials],
                     Awaitable[web.StreamResponse]]
_OPS: dict[tuple[str, str], Operation] = {}


def operation(method: str, name: str) -> Callable[[Operation], Operation]:
    def register(function: Operation) -> Operation:
        _OPS[(method, name)] = function
        return function

    return register


class GatewayNode(Protocol):
    """What the gateway asks of its NameNode: its namesystem and authentication (both
    replaced when it becomes active), and whether it serves clients."""

    @property
    def fs(self) -> Namesystem | None: ...

    @property
    def auth(self) -> NameNodeAuth | None: ...

    @property
    def ha_state(self) -> str: ...


class WebHdfsGateway:
    def __init__(self, config: XdfsConfig, node: GatewayNode,
                 rpc_address: Callable[[], str], *,
                 path_check: Callable[[web.Request, str], None] | None = None) -> None:
        """``path_check(request, path)``: a sharded NameNode's refusal of a path it does
        not own (before anything runs)."""
        self.config = config
        self._path_check = path_check
        self._node = node
        self._rpc_address = rpc_address
        http = config.http
        self._passwords = PasswordCache(os.urandom(32), http.password_cache_s,
                                        http.password_cache_entries_max)
        #: Listings of one user at once (.listing: a big one must not crowd others out).
        self.listings = PerUserLimit(http.heavy_calls_per_user_max)

    @property
    def fs(self) -> Namesystem:
        fs = self._node.fs
        assert fs is not None
        return fs

    @property
    def auth(self) -> NameNodeAuth:
        auth = self._node.auth
        assert auth is not None
        return auth

    def check_active(self) -> None:
        """Standby (HDFS's StandbyException) unless this NameNode serves clients."""
        state = self._node.ha_state
        if state != STATE_ACTIVE or self._node.fs is None or self._node.auth is None:
            raise Standby(f"Operation category READ/WRITE is not supported in state {state}: "
                          "ask the active NameNode's WebHDFS gateway")

    def routes(self) -> list[web.RouteDef]:
        return [
            web.route("*", w.PREFIX + r"{path:[\s\S]*}", self.handle),
            web.post(OAUTH2_TOKEN_PATH, self.oauth2_token),
        ]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            self.check_active()
            op = request.query.get("op", "").upper()
            function = _OPS.get((request.method, op))
            if function is None and op in NOT_PROVIDED:
                raise Unsupported(f"{op}: {NOT_PROVIDED[op]}")
            if function is None:
                raise InvalidArgument(
                    f'Invalid value for webhdfs parameter "op": {op[:40] or "(none)"} is not '
                    f"a {request.method} operation of this server")
            credentials = request_credentials(request.query, request.headers,
                                              self.config.http.auth)
            user = await self._user(credentials, request.remote or "")
            path = w.request_path(request)
            if self._path_check is not None:
                self._path_check(request, path)
            return await function(self, request, user, path, credentials)
        except w.StreamBroken:
            raise  # the status went out already: the cut connection says it failed
        except Exception as exc:
            return w.remote_exception(exc)

    async def user(self, credentials: Credentials, peer: str) -> str:
        """The xdfs user these credentials prove (the web UI logs users in the same way)."""
        return await self._user(credentials, peer)

    async def _user(self, credentials: Credentials, peer: str) -> str:
        user = credentials.user
        record = self.fs.ns.users.get(user) if user else None
        if credentials.simple:  # trusted as it stands (http.auth = "simple" only)
            if record is None:
                raise AuthenticationFailed(f"no user {user}")
            return principal_user(UserPrincipal(user, generation=record.generation), self.fs)
        now_s = self.fs.now_ms() / 1000
        if record is not None and not credentials.token and self._passwords.generation(
                user, credentials.password, now_s) == record.generation:
            # a locked-out address stays locked, even with the password remembered as right
            self.auth.guard.check_login(user, peer, now_s)
            return principal_user(UserPrincipal(user, generation=record.generation), self.fs)
        principal: Principal
        if credentials.token:
            principal = self.auth.token_principal(credentials.token)
        elif user:
            found = await self.auth.check_password(user, credentials.password, f"{peer}:0")
            principal = UserPrincipal(user, generation=found.generation)
        else:
            principal = Principal(ANONYMOUS, anonymous=True)
        checked = principal_user(principal, self.fs)
        if not credentials.token and isinstance(principal, UserPrincipal):
            self._passwords.checked(user, credentials.password, principal.generation, now_s)
        return checked

    # -- OAuth2 (RFC 6749 client credentials, as Hadoop's ConfCredentialBased provider) --

    async def oauth2_token(self, request: web.Request) -> web.StreamResponse:
        """``grant_type=client_credentials&client_id=USER&client_secret=PASSWORD`` ->
        ``{"access_token": <an xdfs token>, "token_type": "bearer", "expires_in": s}``.

        Answered by the active and by a standby alike (Hadoop's client takes one
        ``refresh.url``, which must keep working across a failover): see
        :func:`standby_token` for what a standby issues."""
        fs, auth = self._node.fs, self._node.auth
        active = self._node.ha_state == STATE_ACTIVE
        if fs is None or auth is None or not (active or self._node.ha_state == STATE_STANDBY):
            return w.remote_exception(Standby(
                f"the token endpoint is not served in state {self._node.ha_state}: ask "
                "another NameNode"))
        try:
            form = await read_form(request, self.config.http.body_idle_timeout_s)
            fields = {key: str(value) for key, value in form.items()}
            if fields.get("grant_type") != "client_credentials":
                return w.json_response({"error": "unsupported_grant_type"}, 400)
            user, password = fields.get("client_id", ""), fields.get("client_secret", "")
            if not user:
                return w.json_response({"error": "invalid_request"}, 400)
            peer = f"{request.remote or ''}:0"
            if active:
                token, expires_ms = await auth.login(user, password, 0.0, peer)
            else:
                record = await auth.check_password(user, password, peer)
                token, expires_ms = standby_token(fs, record, user)
        except Standby as exc:
            return w.remote_exception(exc)
        except XdfsError as exc:
            log.info("oauth2 token refused: %s", exc.message)
            return w.json_response({"error": "invalid_client"}, 401)
        expires_in = max(0, (expires_ms - fs.now_ms()) // 1000)
        return w.json_response(
            {"access_token": token, "token_type": "bearer", "expires_in": expires_in})

    # -- redirects to DataNodes ---------------------------------------------------------

    def write_redirect(self, request: web.Request, user: str, path: str,
                       params: Mapping[str, str]) -> web.StreamResponse:
        """A write's (CREATE, APPEND) redirect to any DataNode, with a token for that
        write of that file only."""
        op = request.query["op"].upper()
        token = issue_write_token(self.fs, user, op, path,
                                  self.config.http.redirect_token_lifetime_s)
        url = self._datanode_url(self.any_datanode(), path, op,
                                 {**params, w.TICKET_PARAM: token})
        return _redirect(request, url)

    def read_url(self, user: str, path: str, op: str, offset: int,
                 params: Mapping[str, str]) -> str:
        """The DataNode URL of a read of ``path`` by ``user`` (OPEN, GETFILECHECKSUM): on
        a holder of the block at ``offset``, with a token that reads this file only."""
        located = self.fs.block_locations(user, path, offset, 1)
        holders = located.blocks[0].locations if located.blocks else []
        token = issue_read_token(self.fs, user, path, self.config.http.read_url_lifetime_s)
        return self._datanode_url(self.datanode_for(list(holders)), path, op,
                                  {**params, w.TICKET_PARAM: token})

    def _datanode_url(self, http_address: str, path: str, op: str,
                      params: Mapping[str, str]) -> str:
        query = {"op": op, **params, "namenoderpcaddress": self._rpc_address()}
        return f"http://{http_address}{w.PREFIX}{quote(path)}?{urlencode(query)}"

    def any_datanode(self) -> str:
        nodes = [node.http_address for node in self.fs.blocks.datanodes.live_nodes()
                 if node.http_address]
        if not nodes:
            raise Unavailable("no live DataNode serves HTTP (datanode.http_address)")
        return random.choice(nodes)

    def datanode_for(self, addresses: list[str]) -> str:
        """The HTTP server of one of these DataNodes (a replica's holders), else any."""
        for address in random.sample(addresses, len(addresses)):
            node = self.fs.blocks.datanodes.live_at(address)
            if node is not None and node.http_address:
                return node.http_address
        return self.any_datanode()


def standby_token(fs: Namesystem, record: UserRecord, user: str) -> tuple[str, int]:
    """A token of ``user`` issued by a standby, which the active accepts: signed with the
    newest token key of the standby's namespace (the active's keys, tailed from the
    journal) and carrying the user's generation there. The password was checked against
    the standby's record of the user, so a user it has not seen yet is refused, and a
    token issued from a record the active has since changed (a new password, a removed
    user) carries a generation the active refuses. A standby writes nothing, so it cannot
    add a key: the token ends when the key does, if that comes before a full
    ``namenode.token_lifetime_s``; with no valid key it refuses (Standby)."""
    now = fs.now_ms()
    key = tokens.newest_key(fs.ns.token_keys, now)
    if key is None:
        raise Standby("this standby holds no valid token key yet: ask the active NameNode")
    expires_ms = min(now + int(1000 * fs.config.token_lifetime_s), key.expires_ms)
    body = tokens.TokenBody("user", user, key.key_id, now, expires_ms,
                            generation=record.generation)
    return tokens.issue_token(body, key), expires_ms


def _redirect(request: web.Request, url: str) -> web.StreamResponse:
    """307 to ``url``, or with ``noredirect=true`` 200 and ``{"Location": url}`` (HDFS)."""
    if w.bool_param(request.query, "noredirect", False):
        return w.json_response({"Location": url})
    return web.Response(status=307, headers={"Location": url})


def _pass(query: Mapping[str, str], *names: str) -> dict[str, str]:
    return {name: query[name] for name in names if name in query}


# -- reads --------------------------------------------------------------------------------


@operation("GET", "GETFILESTATUS")
async def _get_file_status(gw: WebHdfsGateway, request: web.Request, user: str, path: str,
                           credentials: Credentials) -> web.StreamResponse:
    return w.json_response({"FileStatus": w.file_status(gw.fs.stat(user, path))})


@operation("GET", "LISTSTATUS")
async def _list_status(gw: WebHdfsGateway, request: web.Request, user: str, path: str,
                       credentials: Credentials) -> web.StreamResponse:
    async with gw.listings.hold(user):
        return await stream_listing(gw.fs, request, user, path,
                                    gw.config.http.list_batch_entries)


@operation("GET", "LISTSTATUS_BATCH")
async def _list_status_batch(gw: WebHdfsGateway, request: web.Request, user: str, path: str,
                             credentials: Credentials) -> web.StreamResponse:
    """One page of HDFS's paged listing, after ``startAfter`` (a name)."""
    start = request.query.get("startAfter", "")
    async with gw.listings.hold(user):
        page, remaining = gw.fs.list_dir(user, path, start, LIST_PAGE_ENTRIES)
    return w.json_response({"DirectoryListing": {
        "partialListing": {"FileStatuses": w.statuses(path, page)},
        "remainingEntries": remaining,
    }})


@operation("GET", "GETCONTENTSUMMARY")
async def _content_summary(gw: WebHdfsGateway, request: web.Request, user: str, path: str,
                           credentials: Credentials) -> web.StreamResponse:
    return w.json_response(w.content_summary(await gw.fs.content_summary(user, path)))


@operation("GET", "GETHOMEDIRECTORY")
async def _home(gw: WebHdfsGateway, request: web.Request, user: str, path: str,
                credentials: Credentials) -> web.StreamResponse:
    return w.json_response({"Path": home(user)})


@operation("GET", "GETDELEGATIONTOKEN")
async def _delegation_token(gw: WebHdfsGateway, request: web.Request, user: str, path: str,
                            credentials: Credentials) -> web.StreamResponse:
    """A token of the user (``namenode.token_lifetime_s``). Not for a request that came
    with a token (that would extend it) nor in simple mode (HDFS answers null there)."""
    if credentials.simple:
        return w.json_response({"Token": None})
    if credentials.token:
        raise AccessDenied("a delegation token cannot be issued to a request authenticated "
                           "by a token: authenticate with a user and password")
    token, _ = await gw.auth.issue_token(gw.fs.ns.users[user], user, 0.0)
    return w.json_response({"Token": {"urlString": token}})


@operation("GET", "OPEN")
async def _open(gw: WebHdfsGateway, request: web.Request, user: str, path: str,
                credentials: Credentials) -> web.StreamResponse:
    query = request.query
    offset = w.int_param(query, "offset", 0)
    w.int_param(query, "length", -1)  # checked here, applied by the DataNode
    return _redirect(request, gw.read_url(user, path, "OPEN", offset,
                                          _pass(query, "offset", "length", "buffersize")))


@operation("GET", "GETFILEBLOCKLOCATIONS")
async def _block_locations(gw: WebHdfsGateway, request: web.Request, user: str, path: str,
                           credentials: Credentials) -> web.StreamResponse:
    """Where the blocks of ``[offset, offset+length)`` are (Spark's locality hints)."""
    offset = w.int_param(request.query, "offset", 0)
    length = w.int_param(request.query, "length", -1, minimum=-1)
    located = gw.fs.block_locations(user, path, offset, length)
    return w.json_response(w.block_locations(located))


@operation("GET", "GETFILECHECKSUM")
async def _checksum(gw: WebHdfsGateway, request: web.Request, user: str, path: str,
                    credentials: Credentials) -> web.StreamResponse:
    status = gw.fs.stat(user, path)
    if status.is_dir:
        raise NotFound(f"Path is not a file: {path}")
    params = {"blocksize": str(status.block_size)}  # HDFS names it in the algorithm
    return _redirect(request, gw.read_url(user, path, "GETFILECHECKSUM", 0, params))


# -- changes ------------------------------------------------------------------------------


@operation("PUT", "CREATE")
async def _create(gw: WebHdfsGateway, request: web.Request, user: str, path: str,
                  credentials: Credentials) -> web.StreamResponse:
    query = request.query
    w.bool_param(query, "overwrite", False)
    w.int_param(query, "replication", 0)
    w.int_param(query, "blocksize", 0)
    w.permission_param(query, DEFAULT_MODE)
    params = _pass(query, "overwrite", "replication", "blocksize", "permission", "buffersize")
    return gw.write_redirect(request, user, path, params)


@operation("PUT", "MKDIRS")
async def _mkdirs(gw: WebHdfsGateway, request: web.Request, user: str, path: str,
                  credentials: Credentials) -> web.StreamResponse:
    mode = w.permission_param(request.query, DEFAULT_MODE)
    await gw.fs.mkdirs(user, path, mode, True)
    return w.json_response(w.boolean(True))


@operation("PUT", "RENAME")
async def _rename(gw: WebHdfsGateway, request: web.Request, user: str, path: str,
                  credentials: Credentials) -> web.StreamResponse:
    """HDFS's old rename: false (not an error) when the source is missing or the
    destination exists; permission and path errors are errors."""
    destination = request.query.get("destination", "")
    if not destination.startswith("/"):
        raise InvalidArgument(
            f'Invalid value for webhdfs parameter "destination": {destination[:200]!r} '
            "(an absolute path)")
    try:
        await gw.fs.rename(user, path, destination)
    except (NotFound, AlreadyExists):
        return w.json_response(w.boolean(False))
    return w.json_response(w.boolean(True))


@operation("DELETE", "DELETE")
async def _delete(gw: WebHdfsGateway, request: web.Request, user: str, path: str,
                  credentials: Credentials) -> web.StreamResponse:
    """false when there is nothing to delete; ``skiptrash`` defaults to true (as
    FileSystem.delete, which HDFS's WebHDFS client calls)."""
    recursive = w.bool_param(request.query, "recursive", False)
    skip_trash = w.bool_param(request.query, "skiptrash", True)
    try:
        await gw.fs.delete(user, path, recursive=recursive, skip_trash=skip_trash)
    except NotFound:
        return w.json_response(w.boolean(False))
    return w.json_response(w.boolean(True))


@operation("PUT", "SETPERMISSION")
async def _set_permission(gw: WebHdfsGateway, request: web.Request, user: str, path: str,
                          credentials: Credentials) -> web.StreamResponse:
    # HDFS's default when the parameter is missing: 755
    await gw.fs.set_permission(user, path, w.permission_param(request.query, 0o755))
    return web.Response(status=200)


@operation("PUT", "SETOWNER")
async def _set_owner(gw: WebHdfsGateway, request: web.Request, user: str, path: str,
                     credentials: Credentials) -> web.StreamResponse:
    owner, group = request.query.get("owner", ""), request.query.get("group", "")
    if not owner and not group:
        raise InvalidArgument("Both owner and group are empty.")
    await gw.fs.set_owner(user, path, owner, group)
    return web.Response(status=200)


@operation("PUT", "SETREPLICATION")
async def _set_replication(gw: WebHdfsGateway, request: web.Request, user: str, path: str,
                           credentials: Credentials) -> web.StreamResponse:
    """false for a directory (HDFS)."""
    replication = w.int_param(request.query, "replication", 0)
    if gw.fs.stat(user, path).is_dir:
        return w.json_response(w.boolean(False))
    await gw.fs.set_replication(user, path, replication)
    return w.json_response(w.boolean(True))


@operation("PUT", "SETTIMES")
async def _set_times(gw: WebHdfsGateway, request: web.Request, user: str, path: str,
                     credentials: Credentials) -> web.StreamResponse:
    mtime = w.int_param(request.query, "modificationtime", -1, minimum=-1)
    atime = w.int_param(request.query, "accesstime", -1, minimum=-1)
    await gw.fs.set_times(user, path, mtime, atime)
    return web.Response(status=200)


@operation("POST", "APPEND")
async def _append(gw: WebHdfsGateway, request: web.Request, user: str, path: str,
                  credentials: Credentials) -> web.StreamResponse:
    """The data goes to a DataNode (redirect), which appends through an xdfs client."""
    gw.fs.stat(user, path)  # a missing file is FileNotFound here, before any redirect
    params = _pass(request.query, "buffersize")
    return gw.write_redirect(request, user, path, params)


@operation("POST", "TRUNCATE")
async def _truncate(gw: WebHdfsGateway, request: web.Request, user: str, path: str,
                    credentials: Credentials) -> web.StreamResponse:
    """``{"boolean": true}`` when done at once (a block boundary), false while the last
    block is recovered to the new length (HDFS)."""
    new_length = w.int_param(request.query, "newlength", -1, minimum=0)
    done = await gw.fs.truncate(user, path, new_length)
    return w.json_response(w.boolean(done))


# The operations of .operations register themselves on import.
from xdfs.namenode.webhdfs import operations as _operations  # noqa: E402,F401
