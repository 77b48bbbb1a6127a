"""Shared secrets between servers (the journal secret): files holding one.

A secret file holds hex text (mode 0600); :func:`new_secret_file` writes one. The RPC
authenticator that admits exactly the callers presenting it is
:class:`xdfs.rpc.secret_auth.SecretAuthenticator`.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from xdfs.common.files import atomic_write
from xdfs.errors import ConfigError

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
