"""Passwords and the DataNode secret (pure: the salt is passed in); tokens live in
:mod:`xdfs.common.tokens`.

A user's password is stored as SCRAM-SHA-256 credentials (RFC 5802: StoredKey, ServerKey,
salt, iterations, as PostgreSQL stores them) of its scrypt *prehash*: the SCRAM password is
``hex(scrypt(password, salt))`` (``hashlib.scrypt``, N=2**14, r=8, p=1: about 16 MiB and
tens of milliseconds, which is the point), and the login's client computes it from the
parameters the server's challenge names (:mod:`xdfs.rpc.scram`). The credentials let a
server check a login but not make one, and a guess at a stolen StoredKey costs a scrypt.

Namespaces written before SCRAM logins store the scrypt hash itself (``password_hash``):
that hash is exactly the SCRAM password above, so :func:`converted` turns such a record
(or op) into credentials when it is loaded, and its users keep their passwords.
"""

from __future__ import annotations

import hashlib

from xdfs.namenode.namespace.ops import UserRecord
from xdfs.rpc import scram

SCRYPT_N = 2**14
SCRYPT_R = 8
SCRYPT_P = 1
SALT_BYTES = 16
#: How a login's client turns the password into the SCRAM password (see the module doc).
PREHASH = scram.scrypt_prehash(SCRYPT_N, SCRYPT_R, SCRYPT_P)


def hash_password(password: str, salt: bytes) -> bytes:
    """The scrypt prehash of ``password`` (what older namespaces stored)."""
    return hashlib.scrypt(
        password.encode("utf-8"), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=32
    )


def new_credentials(password: str, salt: bytes) -> scram.ScramCredentials:
    """The credentials to store for a new password (a scrypt: run it off the loop)."""
    return credentials_of_hash(hash_password(password, salt), salt)


def credentials_of_hash(password_hash: bytes, salt: bytes) -> scram.ScramCredentials:
    return scram.credentials(password_hash.hex(), salt, PREHASH)


def converted(password_hash: bytes, salt: bytes, stored_key: bytes, server_key: bytes,
              iterations: int) -> tuple[bytes, bytes, int]:
    """``(stored_key, server_key, iterations)`` of an op or record: its own, or those of
    its scrypt hash when it comes from an older namespace (deterministic: replay and every
    NameNode convert alike)."""
    if stored_key or not password_hash:
        return stored_key, server_key, iterations
    made = credentials_of_hash(password_hash, salt)
    return made.stored_key, made.server_key, made.iterations


def converted_record(record: UserRecord) -> UserRecord:
    """``record`` with SCRAM credentials and no scrypt hash (itself when it has them)."""
    if not record.password_hash:
        return record
    stored, server, iterations = converted(record.password_hash, record.salt,
                                           record.stored_key, record.server_key,
                                           record.iterations)
    return UserRecord(record.name, b"", record.salt, record.groups, record.created_ms,
                      record.generation, stored, server, iterations)


def record_credentials(record: UserRecord) -> scram.ScramCredentials:
    return scram.ScramCredentials(record.salt, record.iterations, record.stored_key,
                                  record.server_key, PREHASH)


def verify_password(user: UserRecord | None, password: str) -> bool:
    """Constant-time check of a password received in clear (HTTP Basic auth, the web UI,
    the login call); an unknown user costs a check too, so timing does not tell."""
    stored = record_credentials(user) if user is not None else _UNKNOWN
    return scram.matches(stored, password) and user is not None


#: What an unknown user's password is checked against (nothing matches it).
_UNKNOWN = scram.ScramCredentials(b"\0" * SALT_BYTES, scram.ITERATIONS, b"\0" * 32,
                                  b"\0" * 32, PREHASH)


# --- the DataNode secret --------------------------------------------------------------------

#: Where a NameNode writes the DataNode secret (hex) in each of its name dirs (mode 0600).
DATANODE_SECRET_FILE = "datanode.secret"
DATANODE_SECRET_BYTES = 32


def datanode_secret_text(secret: bytes) -> str:
    """The secret as a DataNode presents it (its password) and as the file holds it."""
    return secret.hex()

