"""SCRAM-SHA-256 logins of the RPC handshake (RFC 5802 and 7677, through ``scramp``): both
sides prove they know the password (or shared secret) and neither sends it.

Pure and synchronous: the connections (:mod:`xdfs.rpc.server_connection`,
:mod:`xdfs.rpc.client_connection`, :mod:`xdfs.rpc.blocking`) carry the messages.

* :class:`ClientLogin` turns a ``Hello`` that holds a password into one that holds the
  client-first message instead (RFC 5802's messages, no channel binding), answers the
  server's :class:`~xdfs.rpc.messages.Challenge` with a :class:`~xdfs.rpc.messages.Proof`,
  and checks the server's signature in the ``Welcome``
  (:class:`~xdfs.errors.ServerNotAuthenticated` when it is wrong or missing).
* :class:`ServerLogin` checks one exchange against the :class:`ScramCredentials` the server
  stores (StoredKey, ServerKey, salt, iterations: what PostgreSQL stores), which let it
  verify a proof but not make one.

A *prehash* turns the password into the SCRAM password before PBKDF2: ``scrypt:N:r:p``
means ``hex(scrypt(password, salt, N, r, p, 32 bytes))`` with the SCRAM salt. User
passwords use it (so a stolen StoredKey costs an attacker a scrypt per guess, and the
scrypt hashes of older namespaces convert without a password reset); shared secrets, random
already, use none.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass

import msgspec
import msgspec.structs
from scramp import ScramException, ScramMechanism

from xdfs.errors import AuthenticationFailed, ProtocolError, ServerNotAuthenticated
from xdfs.rpc.messages import Challenge, Hello, Proof, Welcome

MECHANISM = "SCRAM-SHA-256"
#: RFC 7677's minimum (and PostgreSQL's default): the password's own strength is its
#: prehash's (scrypt), this only has to be SCRAM.
ITERATIONS = 4096
SALT_BYTES = 16
_MECHANISM = ScramMechanism(MECHANISM)

#: The largest scrypt a server may ask a client for (a fake server must not make a client
#: spend gigabytes): N * r * 128 bytes of memory, 128 MiB here.
_SCRYPT_MEMORY_MAX = 128 * 1024 * 1024
#: The most iterations a client does for a server (a fake server must not make it spin).
ITERATIONS_MAX = 1_000_000
#: SaltedPasswords the clients of this process derived (clients open connection after
#: connection): (prehash, salt, iterations, password) -> SaltedPassword.
_SALTED: OrderedDict[tuple[str, bytes, int, str], bytes] = OrderedDict()
_SALTED_MAX = 64
_SALTED_LOCK = threading.Lock()


@dataclass(frozen=True)
class ScramCredentials:
    """What a server keeps to check one principal's logins (never the password)."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes
    prehash: str = ""


def scrypt_prehash(n: int, r: int, p: int) -> str:
    return f"scrypt:{n}:{r}:{p}"


def prehash(spec: str, password: str, salt: bytes) -> str:
    """The SCRAM password of ``password`` under the prehash ``spec`` (see the module doc);
    ProtocolError for a spec this client does not do, or one too costly."""
    if not spec:
        return password
    kind, _, params = spec.partition(":")
    try:
        n, r, p = (int(part) for part in params.split(":"))
    except ValueError:
        raise ProtocolError(f"unknown password prehash {spec!r}") from None
    if kind != "scrypt" or n < 2 or n & (n - 1) or not 1 <= r <= 32 or not 1 <= p <= 16:
        raise ProtocolError(f"unknown password prehash {spec!r}")
    if n * r * 128 > _SCRYPT_MEMORY_MAX:
        raise ProtocolError(f"password prehash {spec!r} needs more memory than allowed")
    digest = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p,
                            maxmem=2 * _SCRYPT_MEMORY_MAX, dklen=32)
    return digest.hex()


def credentials(scram_password: str, salt: bytes, prehash_spec: str = "",
                iterations: int = ITERATIONS) -> ScramCredentials:
    """The credentials of a SCRAM password (already prehashed: hex, or a secret's hex
    text, which SASLprep leaves as they are), by RFC 5802's formulas. (Not scramp's
    ``make_auth_info``: that refuses the short salts of some old records, which must load
    all the same; their logins then fail, typed.)"""
    salted = _pbkdf2(scram_password, salt, iterations)
    client_key = hmac.digest(salted, b"Client Key", "sha256")
    server_key = hmac.digest(salted, b"Server Key", "sha256")
    return ScramCredentials(salt, iterations, hashlib.sha256(client_key).digest(), server_key,
                            prehash_spec)


def _pbkdf2(scram_password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's SaltedPassword, Hi(password, salt, i)."""
    return hashlib.pbkdf2_hmac("sha256", scram_password.encode("utf-8"), salt, iterations)


def secret_credentials(secret: str) -> ScramCredentials:
    """Credentials of a shared secret, with a fresh salt (a server makes them once)."""
    return credentials(secret, secrets.token_bytes(SALT_BYTES))


def matches(stored: ScramCredentials, password: str) -> bool:
    """Whether ``password`` is the one ``stored`` was made from (constant-time): for the
    logins that receive a password (HTTP Basic auth, the web UI, the login call)."""
    if not stored.stored_key:
        return False
    scram_password = prehash(stored.prehash, password, stored.salt)
    made = credentials(scram_password, stored.salt, stored.prehash, stored.iterations)
    return hmac.compare_digest(made.stored_key, stored.stored_key)


def decoy_credentials(key: bytes, user: str, prehash_spec: str) -> ScramCredentials:
    """Credentials no password matches, stable per ``user`` under ``key``: an unknown user
    gets a challenge like a known one's, so the exchange does not tell who exists."""
    seed = hmac.digest(key, user.encode("utf-8"), "sha256")
    return ScramCredentials(seed[:SALT_BYTES], ITERATIONS, hmac.digest(key, seed, "sha256"),
                            hmac.digest(seed, key, "sha256"), prehash_spec)


def _salted_password(spec: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's SaltedPassword of ``password`` under the prehash ``spec``, kept for this
    process's next connections (a prehash costs tens of ms, the PBKDF2 about one)."""
    key = (spec, salt, iterations, password)
    with _SALTED_LOCK:  # (blocking clients log in from several threads)
        found = _SALTED.get(key)
        if found is not None:
            _SALTED.move_to_end(key)
            return found
    found = _pbkdf2(prehash(spec, password, salt), salt, iterations)
    with _SALTED_LOCK:
        _SALTED[key] = found
        if len(_SALTED) > _SALTED_MAX:
            _SALTED.popitem(last=False)
    return found


def _fields(message: str) -> dict[str, str]:
    """``a=1,b=2`` -> {"a": "1", "b": "2"} (ProtocolError when malformed)."""
    fields: dict[str, str] = {}
    for part in message.split(","):
        name, equals, value = part.partition("=")
        if len(name) != 1 or not equals:
            raise ProtocolError("bad SCRAM message from the server")
        fields.setdefault(name, value)
    return fields


def _b64decode(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ProtocolError("bad SCRAM message from the server: bad base64") from None


def _hmac(key: bytes, message: bytes) -> bytes:
    return hmac.digest(key, message, "sha256")


class ClientLogin:
    """The client's side of one connection's login (see the module doc). The messages are
    RFC 5802's with no channel binding; the proof is computed here rather than by
    ``scramp.ScramClient``, which cannot reuse a SaltedPassword: every connection would pay
    a PBKDF2 (and two SASLprep passes). The SCRAM passwords are ASCII (hex: a prehash, or
    a secret file's text), for which SASLprep changes nothing."""

    def __init__(self, hello: Hello) -> None:
        # A token logs in on its own (the server prefers it, as it always did).
        self._password = "" if hello.token else hello.password
        user = hello.user.replace("=", "=3D").replace(",", "=2C")
        self._nonce = secrets.token_urlsafe(18)
        self._first_bare = f"n={user},r={self._nonce}"
        self._server_signature = b""
        #: What goes on the wire: never the password.
        self.hello = msgspec.structs.replace(hello, password="") if hello.password else hello
        if self.uses_scram:
            self.hello = msgspec.structs.replace(self.hello, scram="n,," + self._first_bare)

    @property
    def uses_scram(self) -> bool:
        return bool(self._password)

    def answer(self, challenge: Challenge) -> Proof:
        """The proof for the server's challenge; ProtocolError when none was expected or it
        is malformed (or asks for more work than a client does)."""
        if not self.uses_scram or self._server_signature:
            raise ProtocolError("unexpected SCRAM challenge from the server")
        server_first = challenge.server_first
        fields = _fields(server_first)
        nonce, salt = fields.get("r", ""), _b64decode(fields.get("s", ""))
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce) or not salt:
            raise ProtocolError("bad SCRAM challenge: its nonce or salt is wrong")
        try:
            iterations = int(fields.get("i", ""))
        except ValueError:
            raise ProtocolError("bad SCRAM challenge: no iteration count") from None
        if not ITERATIONS <= iterations <= ITERATIONS_MAX:
            raise ProtocolError(f"bad SCRAM challenge: {iterations} iterations")
        salted = _salted_password(challenge.prehash, self._password, salt, iterations)
        client_key = _hmac(salted, b"Client Key")
        without_proof = f"c=biws,r={nonce}"  # biws: base64 of "n,,"
        auth_message = f"{self._first_bare},{server_first},{without_proof}".encode()
        signature = _hmac(hashlib.sha256(client_key).digest(), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = _hmac(_hmac(salted, b"Server Key"), auth_message)
        return Proof(f"{without_proof},p={base64.b64encode(proof).decode()}")

    def verify(self, welcome: Welcome) -> None:
        """Accept the handshake only when the server proved it knows the password."""
        if not self.uses_scram:
            return
        if not self._server_signature or not welcome.server_final:
            raise ServerNotAuthenticated(
                "the server accepted the login without proving it knows the password")
        given = welcome.server_final
        signature = given[2:] if given.startswith("v=") else ""
        try:
            valid = hmac.compare_digest(base64.b64decode(signature, validate=True),
                                        self._server_signature)
        except (binascii.Error, ValueError):
            valid = False
        if not valid:
            raise ServerNotAuthenticated(
                "the server's SCRAM signature is wrong: it does not know the password")


class ServerLogin:
    """The server's side of one SCRAM exchange: ``challenge`` the client-first message,
    then ``finish`` with the client-final one."""

    def __init__(self, user: str, stored: ScramCredentials) -> None:
        self.user = user
        self._stored = stored
        self._server = _MECHANISM.make_server(self._credentials_of)

    def _credentials_of(self, name: str) -> tuple[bytes, bytes, bytes, int] | None:
        if name != self.user:  # the SCRAM user must be the one the Hello names
            return None
        stored = self._stored
        return stored.salt, stored.stored_key, stored.server_key, stored.iterations

    def challenge(self, client_first: str) -> Challenge:
        """AuthenticationFailed when the message is malformed or names another user."""
        try:
            self._server.set_client_first(client_first)
            return Challenge(self._server.get_server_first(), self._stored.prehash)
        except ScramException:
            raise AuthenticationFailed("bad SCRAM login message") from None

    def finish(self, client_final: str) -> str:
        """The server-final message when the proof is right; AuthenticationFailed when it
        is wrong (a wrong password, a replayed or forged proof)."""
        try:
            self._server.set_client_final(client_final)
            return str(self._server.get_server_final())
        except ScramException:
            raise AuthenticationFailed("wrong user name or password") from None
