"""Passwords (pure: the salt is passed in); tokens live in :mod:`xdfs.common.tokens`.

Passwords are stored as salted scrypt hashes (``hashlib.scrypt``, N=2**14, r=8, p=1: about
16 MiB and tens of milliseconds per check, which is the point).
"""

from __future__ import annotations

import hashlib
import hmac

from xdfs.namenode.ops import UserRecord

SCRYPT_N = 2**14
SCRYPT_R = 8
SCRYPT_P = 1
SALT_BYTES = 16


def hash_password(password: str, salt: bytes) -> bytes:
    return hashlib.scrypt(
        password.encode("utf-8"), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=32
    )


def verify_password(user: UserRecord | None, password: str) -> bool:
    """Constant-time check; an unknown user costs a hash too, so timing does not tell."""
    salt = user.salt if user is not None else b"\0" * SALT_BYTES
    expected = user.password_hash if user is not None else b"\0" * 32
    return hmac.compare_digest(hash_password(password, salt), expected) and user is not None
