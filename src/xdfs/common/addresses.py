"""Parsing ``host:port`` addresses and ``xdfs://`` file-system URIs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from xdfs.errors import ConfigError

SCHEME = "xdfs://"


def parse_address(address: str) -> tuple[str, int]:
    """``"h:p"`` or ``"[v6]:p"`` -> ``(host, port)``; raises ConfigError when malformed.

    An IPv6 host must be bracketed: ``::1`` alone is ambiguous and refused."""
    host, sep, port_text = address.strip().rpartition(":")
    if not sep or not host or not (port_text.isascii() and port_text.isdigit()):
        raise ConfigError(f"address {address!r} is not HOST:PORT")
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ConfigError(f"address {address!r}: port out of range")
    if host.startswith("[") or host.endswith("]"):
        if not (host.startswith("[") and host.endswith("]")) or len(host) < 3:
            raise ConfigError(f"address {address!r}: bad [IPv6] host")
        host = host[1:-1]
    elif ":" in host:
        raise ConfigError(f"address {address!r}: write an IPv6 host in brackets, [{host}]")
    return host, port


def format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_fs_uri(uri: str, nameservices: Mapping[str, Sequence[str]] | None = None
                 ) -> list[str]:
    """``xdfs://h1:p1,h2:p2[/ignored/path]`` (or bare ``h:p,...``) -> list of addresses;
    ``xdfs://NAMESERVICE`` -> the addresses ``nameservices`` gives it (HA: ``ha.nameservice``
    names the pair of ``ha.namenodes``, as ``hdfs://mycluster``).

    Several addresses name one file system served by several NameNodes (active first);
    clients fail over between them in order.
    """
    text = uri.strip()
    if text.startswith(SCHEME):
        text = text[len(SCHEME) :]
    elif "://" in text:
        raise ConfigError(f"file system URI {uri!r} must start with {SCHEME}")
    authority = text.split("/", 1)[0]
    if nameservices and authority in nameservices:
        return list(nameservices[authority])
    addresses = [part for part in authority.split(",") if part]
    if not addresses:
        raise ConfigError(f"file system URI {uri!r} names no address")
    for address in addresses:
        parse_address(address)
    return addresses


def format_fs_uri(addresses: list[str]) -> str:
    return SCHEME + ",".join(addresses)


def split_uri(text: str) -> tuple[str, str] | None:
    """``xdfs://AUTHORITY/a/b`` -> ``("AUTHORITY", "/a/b")`` (an empty authority, as in
    ``xdfs:///a``, means the default file system; no path means ``/``); None when ``text``
    is not an ``xdfs://`` URI."""
    if not text.startswith(SCHEME):
        return None
    authority, _slash, path = text[len(SCHEME) :].partition("/")
    return authority, "/" + path


def same_cluster(first: str, second: str) -> bool:
    """Whether two file system URIs (or authorities) share a NameNode address."""
    return bool(set(parse_fs_uri(first)) & set(parse_fs_uri(second)))
