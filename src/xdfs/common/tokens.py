"""Signed, expiring tokens (pure: time is passed in), shared by every role.

A token is ``base64url(msgpack(TokenBody)) "." base64url(HMAC-SHA256(key, body))``. The
NameNode signs login tokens with keys kept in its namespace (edit-logged, so a BackupNode
verifies them after a failover) and *block* tokens with keys derived from those
(:func:`derive_block_key`). DataNodes receive only the derived keys: they can check block
tokens but cannot forge a login token. The body names its key, so keys rotate without
invalidating tokens signed by the previous one until that key expires.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping
from typing import Protocol, TypeVar

import msgspec

from xdfs.errors import AccessDenied, AuthenticationFailed, TokenExpired

TOKEN_BYTES_MAX = 4096
_BLOCK_KEY_LABEL = b"xdfs block token key v1"


class SigningKey(Protocol):
    @property
    def key_id(self) -> int: ...

    @property
    def secret(self) -> bytes: ...

    @property
    def expires_ms(self) -> int: ...


K = TypeVar("K", bound="SigningKey")


class BlockKey(msgspec.Struct, array_like=True, frozen=True):
    """A block-token key as DataNodes hold it (sent in register and heartbeat replies)."""

    key_id: int
    secret: bytes
    expires_ms: int


class TokenBody(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    #: "user" (a login), "block" (DataNode access, per block), "file-read", "file-write"
    kind: str
    user: str
    key_id: int
    issued_ms: int
    expires_ms: int
    #: For block tokens: "<block_id>:<r|w>"; for file-read tokens "<inode_id>:<path>";
    #: for file-write tokens "<op>:<path>"; empty for user tokens.
    scope: str = ""
    #: For user tokens: the user's credential generation when issued (a password change
    #: or a removal makes it stale); tokens issued before generations existed carry 0.
    generation: int = 0


_BODY_DECODER = msgspec.msgpack.Decoder(TokenBody)


def derive_block_key(key: SigningKey) -> BlockKey:
    """The block-token key belonging to a login-token key (one-way: HMAC of the secret)."""
    secret = hmac.new(key.secret, _BLOCK_KEY_LABEL, hashlib.sha256).digest()
    return BlockKey(key.key_id, secret, key.expires_ms)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def issue_token(body: TokenBody, key: SigningKey) -> str:
    assert body.key_id == key.key_id, "token must name the key that signs it"
    raw = msgspec.msgpack.encode(body)
    signature = hmac.digest(key.secret, raw, "sha256")
    return f"{_b64(raw)}.{_b64(signature)}"


def verify_token(token: str, keys: Mapping[int, SigningKey], now_ms: int) -> TokenBody:
    """The token's body if its signature is valid and it has not expired.

    Every malformed or forged token raises the same AuthenticationFailed (no oracle)."""
    if len(token) > TOKEN_BYTES_MAX or token.count(".") != 1:
        raise AuthenticationFailed("invalid token")
    body_text, signature_text = token.split(".")
    try:
        raw = _unb64(body_text)
        signature = _unb64(signature_text)
        body = _BODY_DECODER.decode(raw)
    except (binascii.Error, ValueError, msgspec.DecodeError, msgspec.ValidationError):
        raise AuthenticationFailed("invalid token") from None
    key = keys.get(body.key_id)
    if key is None:
        raise AuthenticationFailed("invalid token")
    # (hmac.digest: OpenSSL's one-shot HMAC, a third cheaper than an hmac.new object;
    # a DataNode checks one block token per replica)
    expected = hmac.digest(key.secret, raw, "sha256")
    if not hmac.compare_digest(expected, signature):
        raise AuthenticationFailed("invalid token")
    if now_ms >= body.expires_ms or now_ms >= key.expires_ms:
        raise TokenExpired("token expired; log in again")
    return body


def block_scope(block_id: int, mode: str) -> str:
    assert mode in ("r", "w"), "block tokens are for reading (r) or writing (w)"
    return f"{block_id}:{mode}"


def check_block_token(
    token: str, keys: Mapping[int, SigningKey], now_ms: int, block_id: int, mode: str
) -> TokenBody:
    """Verify a block token for ``mode`` access to ``block_id``; a write token also reads."""
    if not token:
        raise AccessDenied(f"block {block_id}: a block token is required")
    body = verify_token(token, keys, now_ms)
    allowed = {block_scope(block_id, mode)}
    if mode == "r":
        allowed.add(block_scope(block_id, "w"))
    if body.kind != "block" or body.scope not in allowed:
        raise AccessDenied(f"block {block_id}: token does not grant {mode} access")
    return body


#: A token that reads one file and does nothing else (the URL of a WebHDFS OPEN redirect):
#: a login's checks refuse it (its kind is not "user"), so whoever holds the URL can read
#: that file until it expires, and nothing more.
FILE_READ_KIND = "file-read"


#: A token that lets a DataNode write one file for its user (the URL of a WebHDFS CREATE or
#: APPEND redirect): no login either; only a DataNode can exchange it at the NameNode for
#: a token of the user, for that one write.
FILE_WRITE_KIND = "file-write"


def file_write_scope(op: str, path: str) -> str:
    return f"{op}:{path}"


def file_read_scope(inode_id: int, path: str) -> str:
    """The scope of a file-read token: the inode too, so a file put in the place of the
    one named (deleted, renamed over) is not readable with it."""
    return f"{inode_id}:{path}"


def newest_key(keys: Mapping[int, K], now_ms: int) -> K | None:
    """The key new login tokens are signed with: the newest that is still valid."""
    valid = [key for key in keys.values() if key.expires_ms > now_ms]
    return max(valid, key=lambda key: key.key_id) if valid else None


def block_signing_key(keys: Mapping[int, K], now_ms: int, expires_ms: int) -> K | None:
    """The key a block token valid until ``expires_ms`` is signed with: the oldest that
    outlives it (else the newest still valid). DataNodes learn a new key only with their
    next heartbeat, so a key just added would be refused for a while; rotation adds a key
    a token lifetime before the newest expires, so the oldest is one they have had long."""
    lasting = [key for key in keys.values() if key.expires_ms >= expires_ms]
    if lasting:
        return min(lasting, key=lambda key: key.key_id)
    return newest_key(keys, now_ms)
