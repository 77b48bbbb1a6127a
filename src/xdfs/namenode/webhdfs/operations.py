"""WebHDFS operations beyond the file-system core (:mod:`.gateway`): quota usage, concat,
the server's defaults, the trash root, access checks and the delegation-token calls, each
with HDFS's parameters and JSON shape. Registered on import (the gateway imports this)."""

from __future__ import annotations

from aiohttp import web

from xdfs.common import tokens
from xdfs.errors import AccessDenied, AuthenticationFailed, InvalidArgument, Unsupported
from xdfs.http import webhdfs as w
from xdfs.http.auth import Credentials
from xdfs.namenode.namespace.trash import trash_root
from xdfs.namenode.webhdfs.gateway import WebHdfsGateway, operation

#: HDFS's DataChecksum.Type id of CRC32C (what xdfs checksums with), and the id of its
#: default storage policy (HOT): the numbers FsServerDefaults carries.
CHECKSUM_TYPE_CRC32C = 2
STORAGE_POLICY_HOT = 7
#: HDFS's defaults for the values xdfs has no setting of (dfs.client-write-packet-size,
#: io.file.buffer.size): clients size their buffers by them.
WRITE_PACKET_BYTES = 64 * 1024
FILE_BUFFER_BYTES = 4096


@operation("GET", "GETQUOTAUSAGE")
async def _quota_usage(gw: WebHdfsGateway, request: web.Request, user: str, path: str,
                       credentials: Credentials) -> web.StreamResponse:
    return w.json_response(w.quota_usage(await gw.fs.content_summary(user, path)))


@operation("GET", "GETSERVERDEFAULTS")
async def _server_defaults(gw: WebHdfsGateway, request: web.Request, user: str, path: str,
                           credentials: Credentials) -> web.StreamResponse:
    nn = gw.config.namenode
    return w.json_response({"FsServerDefaults": {
        "blockSize": nn.default_block_size_bytes,
        "bytesPerChecksum": w.CHECKSUM_BYTES_PER_CRC,
        "checksumType": CHECKSUM_TYPE_CRC32C,
        "defaultStoragePolicyId": STORAGE_POLICY_HOT,
        "encryptDataTransfer": False,
        "fileBufferSize": FILE_BUFFER_BYTES,
        "keyProviderUri": "",
        "replication": nn.default_replication,
        "trashInterval": int(nn.trash_interval_s // 60),  # minutes, as fs.trash.interval
        "writePacketSize": WRITE_PACKET_BYTES,
    }})


@operation("GET", "GETTRASHROOT")
async def _trash_root(gw: WebHdfsGateway, request: web.Request, user: str, path: str,
                      credentials: Credentials) -> web.StreamResponse:
    """The user's trash (``/user/<user>/.Trash``) whatever the path: xdfs has no
    encryption zones, whose trash roots are what the path chooses in HDFS."""
    return w.json_response({"Path": trash_root(user)})


def fs_action(value: str) -> int:
    """HDFS's FsAction symbol (``r-x``, ``rw-``, ...) as permission bits."""
    if len(value) != 3 or any(c not in (bit, "-") for c, bit in zip(value, "rwx", strict=True)):
        raise InvalidArgument(
            f'Invalid value for webhdfs parameter "fsaction": {value[:40]!r} '
            "(three characters of rwx, - for none, as r-x)")
    return sum(bit for c, bit in zip(value, (4, 2, 1), strict=True) if c != "-")


@operation("GET", "CHECKACCESS")
async def _check_access(gw: WebHdfsGateway, request: web.Request, user: str, path: str,
                        credentials: Credentials) -> web.StreamResponse:
    """200 with no body when ``user`` may, else AccessControlException (HDFS's access)."""
    gw.fs.access(user, path, fs_action(request.query.get("fsaction", "")))
    return web.Response(status=200)


@operation("POST", "CONCAT")
async def _concat(gw: WebHdfsGateway, request: web.Request, user: str, path: str,
                  credentials: Credentials) -> web.StreamResponse:
    """``sources=/d/a,/d/b``: their blocks appended to ``path``, the sources removed."""
    sources = [source for source in request.query.get("sources", "").split(",") if source]
    if not sources or not all(source.startswith("/") for source in sources):
        raise InvalidArgument('Invalid value for webhdfs parameter "sources": a '
                              "comma-separated list of absolute paths")
    await gw.fs.concat(user, path, sources)
    return web.Response(status=200)


def _own_token(gw: WebHdfsGateway, user: str, token: str) -> tokens.TokenBody:
    """The body of ``token`` (``token=`` parameter), which must be valid and ``user``'s."""
    if not token:
        raise InvalidArgument('Missing webhdfs parameter "token"')
    try:
        body = tokens.verify_token(token, gw.fs.ns.token_keys, gw.fs.now_ms())
    except AuthenticationFailed as exc:  # (bad signature, expired): the token is the input
        raise InvalidArgument(f"token: {exc.message}") from None
    if body.user != user:
        raise AccessDenied(f"Permission denied: user={user} is not the owner of the token "
                           f"(of {body.user})")
    return body


@operation("PUT", "RENEWDELEGATIONTOKEN")
async def _renew_token(gw: WebHdfsGateway, request: web.Request, user: str, path: str,
                       credentials: Credentials) -> web.StreamResponse:
    """``{"long": expiry ms}``. An xdfs token is signed with its expiry, so a renewal
    cannot extend it: the answer is the expiry it has (a renewer schedules by it and
    fetches a new token then)."""
    return w.json_response({"long": _own_token(gw, user, request.query.get("token", "")
                                               ).expires_ms})


@operation("PUT", "CANCELDELEGATIONTOKEN")
async def _cancel_token(gw: WebHdfsGateway, request: web.Request, user: str, path: str,
                        credentials: Credentials) -> web.StreamResponse:
    """Refused: xdfs keeps no list of tokens to strike one from. A token ends at its
    expiry, or with every other token of the user when the password changes."""
    body = _own_token(gw, user, request.query.get("token", ""))
    raise Unsupported(f"CANCELDELEGATIONTOKEN: xdfs tokens cannot be cancelled one by one; "
                      f"this one expires at {body.expires_ms} ms, and changing the password "
                      f"of {user} ends all of that user's tokens at once")
