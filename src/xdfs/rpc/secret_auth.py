"""An RPC authenticator for a shared secret between servers (the journal secret, read by
:func:`xdfs.common.secrets.read_secret_file`).

The caller logs in as ``user`` with the secret as its password, by SCRAM-SHA-256
(:mod:`xdfs.rpc.scram`): neither side sends the secret, and each proves it holds it.
"""

from __future__ import annotations

from xdfs.errors import AuthenticationFailed
from xdfs.rpc import scram
from xdfs.rpc.handling import PasswordLogin, Principal
from xdfs.rpc.messages import Hello


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
