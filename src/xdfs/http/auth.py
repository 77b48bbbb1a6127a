"""Who sends an HTTP request: the credentials it carries, parsed (not checked).

Accepted, in this order: a ``delegation=TOKEN`` query parameter (WebHDFS's delegation
token; an xdfs token), ``Authorization: Bearer TOKEN`` (an xdfs token, as Hadoop's OAuth2
client sends it), ``Authorization: Basic`` with an xdfs user and password. Only when
``http.auth = "simple"`` is a bare ``user.name=NAME`` accepted, trusted as it stands: that
is HDFS's insecure default ("simple" authentication), off unless configured.

Checking them is the server's business (the NameNode verifies tokens and passwords itself,
a DataNode hands them to the NameNode through its xdfs client)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

from xdfs.config import AUTH_SIMPLE
from xdfs.errors import AuthenticationFailed, NotAuthenticated


@dataclass(frozen=True)
class Credentials:
    token: str = ""
    user: str = ""
    password: str = ""
    #: ``user`` is only claimed (``user.name`` in simple mode): trusted, never checked.
    simple: bool = False


def request_credentials(
    query: Mapping[str, str], headers: Mapping[str, str], mode: str
) -> Credentials:
    """The credentials of a request; NotAuthenticated when it carries none (a 401 that
    names the accepted ways), AuthenticationFailed when they are malformed."""
    delegation = query.get("delegation", "")
    if delegation:
        return Credentials(token=delegation)
    header = headers.get("Authorization", "")
    if header:
        return _from_header(header)
    user = query.get("user.name", "")
    if user and mode == AUTH_SIMPLE:
        return Credentials(user=user, simple=True)
    raise NotAuthenticated(
        "authentication required: pass delegation=TOKEN, or an Authorization header "
        "(Bearer TOKEN, or Basic with an xdfs user and password)"
        + ("" if mode == AUTH_SIMPLE else "; user.name alone is not trusted here")
    )


def _from_header(header: str) -> Credentials:
    scheme, _, value = header.strip().partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer" and value:
        return Credentials(token=value)
    if scheme.lower() == "basic" and value:
        try:
            text = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise AuthenticationFailed("malformed Basic credentials") from None
        user, sep, password = text.partition(":")
        if not sep or not user:
            raise AuthenticationFailed("malformed Basic credentials (want user:password)")
        return Credentials(user=user, password=password)
    raise AuthenticationFailed(
        f"unsupported Authorization scheme {scheme[:20]!r} (use Bearer or Basic)"
    )


class PasswordCache:
    """Passwords already checked, so that a client sending them on every request (as HTTP
    Basic clients do) or opening connection after connection (the NameNode's handshake and
    login) costs one scrypt check per ``ttl_s``, not one per request.

    Entries are keyed by HMAC-SHA256(key, user NUL password) under a key that never leaves
    the process, and remember the user's credential generation: a password change or a
    removed user misses. A wrong password never matches an entry. Pure: the caller passes
    the key and the time."""

    def __init__(self, key: bytes, ttl_s: float, entries_max: int) -> None:
        self._key = key
        self._ttl_s = ttl_s
        self._entries_max = entries_max
        self._entries: OrderedDict[bytes, tuple[str, int, float]] = OrderedDict()

    def _digest(self, user: str, password: str) -> bytes:
        text = f"{user}\0{password}".encode("utf-8", "surrogatepass")
        return hmac.new(self._key, text, hashlib.sha256).digest()

    def generation(self, user: str, password: str, now_s: float) -> int | None:
        """The generation the password was checked for, if it was and has not expired."""
        digest = self._digest(user, password)
        entry = self._entries.get(digest)
        if entry is None or entry[0] != user:
            return None
        if entry[2] <= now_s:
            del self._entries[digest]
            return None
        return entry[1]

    def checked(self, user: str, password: str, generation: int, now_s: float) -> None:
        if self._ttl_s <= 0 or self._entries_max <= 0:
            return
        digest = self._digest(user, password)
        self._entries[digest] = (user, generation, now_s + self._ttl_s)
        self._entries.move_to_end(digest)
        while len(self._entries) > self._entries_max:
            self._entries.popitem(last=False)
