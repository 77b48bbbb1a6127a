"""Scoped URLs: the token a WebHDFS redirect to a DataNode (and the web UI's Download
link) carries is good for that one operation on that one file, and is no login.

A read (OPEN, GETFILECHECKSUM, the Download link) carries a ``file-read`` token
(xdfs.common.tokens) naming the file's inode and path, valid ``http.read_url_lifetime_s``:
the DataNode connects without credentials and passes it with its ``block_locations``
calls, the one call it is honoured in, for that file only (which also yields the block
tokens the DataNodes check).

A write (CREATE, APPEND) carries a ``file-write`` token naming the operation and the path,
valid ``http.redirect_token_lifetime_s``: the DataNode, logged in as itself, exchanges it
(``webhdfs_write_login``) for a token of the user that never leaves the DataNode and
expires with the URL's, and writes through a client of that user. Whoever holds the URL
can make a DataNode do that one write, nothing else: without a DataNode's credential the
exchange is refused.

Both are signed with the NameNode's login keys and name the user's credential generation,
so a password change or a removed user revokes them; the NameNode's RPC handshake and its
REST gateway refuse them (their check wants a ``user`` token)."""

from __future__ import annotations

from xdfs.common import tokens
from xdfs.errors import AccessDenied, AuthenticationFailed, Overloaded
from xdfs.http import webhdfs as w
from xdfs.namenode.namesystem import Namesystem


def _issue(fs: Namesystem, user: str, kind: str, scope: str, lifetime_s: float) -> str:
    record = fs.ns.users[user]
    now = fs.now_ms()
    expires = now + int(lifetime_s * 1000)
    key = tokens.newest_key(fs.ns.token_keys, expires) or tokens.newest_key(
        fs.ns.token_keys, now)
    if key is None:  # keys rotate well ahead of their expiry: a NameNode still starting
        raise Overloaded("no token key yet; try again in a moment")
    body = tokens.TokenBody(kind, user, key.key_id, now, min(expires, key.expires_ms),
                            scope=scope, generation=record.generation)
    return tokens.issue_token(body, key)


def _verify(fs: Namesystem, token: str, kind: str) -> tokens.TokenBody:
    """The body of a valid, unexpired, unrevoked token of ``kind`` (else the error a
    forged or expired login token gets: no oracle)."""
    body = tokens.verify_token(token, fs.ns.token_keys, fs.now_ms())
    record = fs.ns.users.get(body.user)
    if body.kind != kind or record is None:
        raise AuthenticationFailed("invalid token")
    if body.generation != record.generation:
        raise AuthenticationFailed(f"the token of {body.user} was revoked (password changed "
                                   "since it was issued)")
    return body


def issue_read_token(fs: Namesystem, user: str, path: str, lifetime_s: float) -> str:
    """A token reading ``path`` as ``user`` (who must be able to read it now)."""
    status = fs.stat(user, path)
    return _issue(fs, user, tokens.FILE_READ_KIND,
                  tokens.file_read_scope(status.inode_id, status.path), lifetime_s)


def read_token_user(fs: Namesystem, token: str, path: str) -> str:
    """The user a read token reads ``path`` as; AccessDenied for any other path (or a new
    file in its place), TokenExpired once expired, AuthenticationFailed when forged, not a
    read token, or its user's password changed since."""
    body = _verify(fs, token, tokens.FILE_READ_KIND)
    status = fs.stat(body.user, path)
    if body.scope != tokens.file_read_scope(status.inode_id, status.path):
        raise AccessDenied(f"{path}: this token reads another file")
    return body.user


def issue_write_token(fs: Namesystem, user: str, op: str, path: str,
                      lifetime_s: float) -> str:
    """A token for one ``op`` (CREATE, APPEND) of ``path`` by ``user``."""
    assert op in w.WRITE_OPS, f"no write token for {op}"
    return _issue(fs, user, tokens.FILE_WRITE_KIND, tokens.file_write_scope(op, path),
                  lifetime_s)


def write_token_user(fs: Namesystem, token: str, op: str, path: str) -> tuple[str, int]:
    """The user a write token writes ``path`` as, and when the token expires (ms);
    AccessDenied for another op or path."""
    body = _verify(fs, token, tokens.FILE_WRITE_KIND)
    if body.scope != tokens.file_write_scope(op, path):
        raise AccessDenied(f"{op} {path}: this token is for another write")
    return body.user, body.expires_ms
