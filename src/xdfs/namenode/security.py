"""Passwords and tokens (pure: randomness and time are passed in).

Passwords are stored as salted scrypt hashes (``hashlib.scrypt``, N=2**14, r=8, p=1: about
16 MiB and tens of milliseconds per check, which is the point). Tokens are
``base64url(msgpack(TokenBody)) "." base64url(HMAC-SHA256(key, body))``, signed with a key
kept in the namespace (edit-logged, in the image), so any NameNode or BackupNode that loads
the namespace verifies them after a failover. The body names its key, so keys rotate
without invalidating tokens signed by the previous one until that key expires.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping

import msgspec

from xdfs.errors import AuthenticationFailed, TokenExpired
from xdfs.namenode.ops import TokenKeyRecord, UserRecord

SCRYPT_N = 2**14
SCRYPT_R = 8
SCRYPT_P = 1
SALT_BYTES = 16
TOKEN_BYTES_MAX = 4096


class TokenBody(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    kind: str  # "user" (a login) or "block" (DataNode access, issued per block)
    user: str
    key_id: int
    issued_ms: int
    expires_ms: int
    #: For block tokens: "<block_id>:<r|w>"; empty for user tokens.
    scope: str = ""


_BODY_DECODER = msgspec.msgpack.Decoder(TokenBody)


def hash_password(password: str, salt: bytes) -> bytes:
    return hashlib.scrypt(
        password.encode("utf-8"), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=32
    )


def verify_password(user: UserRecord | None, password: str) -> bool:
    """Constant-time check; an unknown user costs a hash too, so timing does not tell."""
    salt = user.salt if user is not None else b"\0" * SALT_BYTES
    expected = user.password_hash if user is not None else b"\0" * 32
    return hmac.compare_digest(hash_password(password, salt), expected) and user is not None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def issue_token(body: TokenBody, key: TokenKeyRecord) -> str:
    assert body.key_id == key.key_id, "token must name the key that signs it"
    raw = msgspec.msgpack.encode(body)
    signature = hmac.new(key.secret, raw, hashlib.sha256).digest()
    return f"{_b64(raw)}.{_b64(signature)}"


def verify_token(token: str, keys: Mapping[int, TokenKeyRecord], now_ms: int) -> TokenBody:
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
    expected = hmac.new(key.secret, raw, hashlib.sha256).digest()
    if not hmac.compare_digest(expected, signature):
        raise AuthenticationFailed("invalid token")
    if now_ms >= body.expires_ms or now_ms >= key.expires_ms:
        raise TokenExpired("token expired; log in again")
    return body


def newest_key(keys: Mapping[int, TokenKeyRecord], now_ms: int) -> TokenKeyRecord | None:
    """The key new tokens are signed with: the newest that is still valid."""
    valid = [key for key in keys.values() if key.expires_ms > now_ms]
    return max(valid, key=lambda key: key.key_id) if valid else None
