"""Shared secrets between servers (the journal secret): files holding one, and an RPC
authenticator that admits exactly the callers presenting it.

A secret file holds hex text (mode 0600); :func:`new_secret_file` writes one. The caller
logs in as ``user`` with the secret as its password, by SCRAM-SHA-256
(:mod:`xdfs.rpc.scram`): neither side sends the secret, and each proves it holds it.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from xdfs.common.files import atomic_write
from xdfs.errors import AuthenticationFailed, ConfigError
from xdfs.rpc import scram
from xdfs.rpc.handling import PasswordLogin, Principal
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
    """Admits ``user`` proving it holds the shared secret, and nobody else."""

    def __init__(self, user: str, secret: str) -> None:
        self.user = user
        self._credentials = scram.secret_credentials(secret)
        self._principal = Principal(user)

    async def authenticate(self, hello: Hello, peer: str) -> Principal | PasswordLogin:
        if hello.user != self.user or not hello.scram:
            raise AuthenticationFailed(f"{peer}: wrong user or secret for this server")
        return PasswordLogin(self.user, self._credentials, self._admit, lambda: self._refuse(peer))

    def _admit(self) -> Principal:
        return self._principal

    def _refuse(self, peer: str) -> AuthenticationFailed:
        return AuthenticationFailed(f"{peer}: wrong user or secret for this server")
