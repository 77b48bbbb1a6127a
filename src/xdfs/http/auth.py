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
from collections.abc import Mapping
from dataclasses import dataclass

from xdfs.errors import AuthenticationFailed, ConfigError, NotAuthenticated

AUTH_CREDENTIALS = "credentials"
AUTH_SIMPLE = "simple"
AUTH_MODES = (AUTH_CREDENTIALS, AUTH_SIMPLE)


@dataclass(frozen=True)
class Credentials:
    token: str = ""
    user: str = ""
    password: str = ""
    #: ``user`` is only claimed (``user.name`` in simple mode): trusted, never checked.
    simple: bool = False


def check_mode(mode: str) -> None:
    if mode not in AUTH_MODES:
        raise ConfigError(f"http.auth must be one of {', '.join(AUTH_MODES)}, not {mode!r}")


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
