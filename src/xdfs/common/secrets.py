"""Shared secrets between servers (the journal secret): files holding one, and an RPC
authenticator that admits exactly the callers presenting it.

A secret file holds hex text (mode 0600); :func:`new_secret_file` writes one. The caller
logs in as ``user`` with the secret as its password; the check is constant-time.
"""

from __future__ import annotations

import hmac
import secrets
from pathlib import Path

from xdfs.common.files import atomic_write
from xdfs.errors import AuthenticationFailed, ConfigError
from xdfs.rpc.handling import Principal
from xdfs.rpc.messages import Hello

SECRET_BYTES = 32


def read_secret_file(path: str | Path, what: str) -> str:
    """The secret in ``path``; ConfigError naming ``what`` (the config key) if unusable."""
    if not str(path):
        raise ConfigError(f"{what} is not set: give the file holding the secret")
    try:
        text = Path(path).read_text("ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{what}: cannot read {path}: {exc}") from None
    if len(text) < 2 * 16:
        raise ConfigError(f"{what}: {path} holds no secret of at least 16 bytes (hex)")
    return text


def new_secret_file(path: Path) -> str:
    """Write a fresh secret to ``path`` (0600) and return it."""
    text = secrets.token_hex(SECRET_BYTES)
    atomic_write(path, (text + "\n").encode("ascii"), mode=0o600)
    return text


class SecretAuthenticator:
    """Admits ``user`` with the shared secret as its password, and nobody else."""

    def __init__(self, user: str, secret: str) -> None:
        self.user = user
        self._secret = secret.encode("ascii")

    async def authenticate(self, hello: Hello, peer: str) -> Principal:
        offered = hello.password.encode("utf-8")
        if hello.user == self.user and hmac.compare_digest(offered, self._secret):
            return Principal(self.user)
        raise AuthenticationFailed(f"{peer}: wrong user or secret for this server")
