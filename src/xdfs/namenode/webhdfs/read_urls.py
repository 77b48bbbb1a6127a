"""Read URLs: the token a WebHDFS OPEN (or GETFILECHECKSUM) redirect and the web UI's
Download link carry to a DataNode, good for reading one file and nothing else.

The token is a ``file-read`` token (xdfs.common.tokens) of the user, signed with the
NameNode's login keys, naming the file's inode and path, valid ``http.read_url_lifetime_s``.
It is no login: the NameNode's RPC handshake and its REST gateway refuse it (their check
wants a ``user`` token). The DataNode connects without credentials and passes it with its
``block_locations`` calls, the one call it is honoured in, for that file only (which
also yields the block tokens the DataNodes check)."""

from __future__ import annotations

from xdfs.common import tokens
from xdfs.errors import AccessDenied, AuthenticationFailed, Overloaded
from xdfs.namenode.namesystem import Namesystem


def issue_read_token(fs: Namesystem, user: str, path: str, lifetime_s: float) -> str:
    """A token reading ``path`` as ``user`` (who must be able to read it now)."""
    status = fs.stat(user, path)
    record = fs.ns.users[user]
    now = fs.now_ms()
    expires = now + int(lifetime_s * 1000)
    key = tokens.newest_key(fs.ns.token_keys, expires) or tokens.newest_key(
        fs.ns.token_keys, now)
    if key is None:  # keys rotate well ahead of their expiry: this is a NameNode starting
        raise Overloaded("no token key yet; try again in a moment")
    body = tokens.TokenBody(tokens.FILE_READ_KIND, user, key.key_id, now,
                            min(expires, key.expires_ms),
                            scope=tokens.file_read_scope(status.inode_id, status.path),
                            generation=record.generation)
    return tokens.issue_token(body, key)


def read_token_user(fs: Namesystem, token: str, path: str) -> str:
    """The user a read token reads ``path`` as; AccessDenied for any other path (or a new
    file in its place), TokenExpired once expired, AuthenticationFailed when forged, not a
    read token, or its user's password changed since."""
    ns = fs.ns
    body = tokens.verify_token(token, ns.token_keys, fs.now_ms())
    record = ns.users.get(body.user)
    if body.kind != tokens.FILE_READ_KIND or record is None:
        raise AuthenticationFailed("invalid token")
    if body.generation != record.generation:
        raise AuthenticationFailed(f"the token of {body.user} was revoked (password changed "
                                   "since it was issued)")
    status = fs.stat(body.user, path)
    if body.scope != tokens.file_read_scope(status.inode_id, status.path):
        raise AccessDenied(f"{path}: this token reads another file")
    return body.user
