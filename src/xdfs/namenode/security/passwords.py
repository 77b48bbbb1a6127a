"""Passwords and the DataNode secret (pure: the salt is passed in); tokens live in
:mod:`xdfs.common.tokens`.

Passwords are stored as salted scrypt hashes (``hashlib.scrypt``, N=2**14, r=8, p=1: about
16 MiB and tens of milliseconds per check, which is the point).
"""

from __future__ import annotations

import hashlib
import hmac

from xdfs.namenode.namespace.ops import UserRecord

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


# --- the DataNode secret --------------------------------------------------------------------

#: Where a NameNode writes the DataNode secret (hex) in each of its name dirs (mode 0600).
DATANODE_SECRET_FILE = "datanode.secret"
DATANODE_SECRET_BYTES = 32


def datanode_secret_text(secret: bytes) -> str:
    """The secret as a DataNode presents it (its password) and as the file holds it."""
    return secret.hex()


def check_datanode_secret(secret: bytes, offered: str) -> bool:
    """Constant-time; nothing matches while the namespace has no secret."""
    expected = datanode_secret_text(secret).encode("ascii")
    return bool(secret) and hmac.compare_digest(expected, offered.encode("utf-8"))
