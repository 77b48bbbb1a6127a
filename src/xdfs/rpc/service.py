"""Method tables: each service declares its methods once; servers and clients share them.

A :class:`Method` names the call, its request and response structs, whether it may be
retried blindly (``idempotent``), whether the server answers a retry of it from its retry
cache (``at_most_once``: not idempotent, yet safe to retry with the same call number) and
whether it moves bulk data (``kind``):

* ``UNARY``: request -> response.
* ``UPLOAD``: the request is the head of a stream the caller sends (chunks, tail); the
  server's handler consumes the chunks and returns the response.
* ``DOWNLOAD``: request -> the server answers with a stream whose head is the response
  struct, followed by chunks and a tail.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Generic, TypeVar

import msgspec

from xdfs.errors import NotActive

Req = TypeVar("Req", bound=msgspec.Struct)
Resp = TypeVar("Resp", bound=msgspec.Struct)


class MethodKind(Enum):
    UNARY = "unary"
    UPLOAD = "upload"
    DOWNLOAD = "download"


@dataclass(frozen=True, eq=False)
class Method(Generic[Req, Resp]):
    name: str
    request_type: type[Req]
    response_type: type[Resp]
    idempotent: bool
    kind: MethodKind = MethodKind.UNARY
    doc: str = ""
    #: The server keeps the outcome of each call of this method in a retry cache keyed by
    #: (client id, call number), so a retried call gets the first outcome, never a second
    #: execution: the client may retry it like an idempotent one.
    at_most_once: bool = False
    request_decoder: msgspec.msgpack.Decoder[Req] = field(init=False, repr=False)
    response_decoder: msgspec.msgpack.Decoder[Resp] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # Decoders are built once per method: building one costs far more than using it.
        object.__setattr__(self, "request_decoder", msgspec.msgpack.Decoder(self.request_type))
        object.__setattr__(self, "response_decoder", msgspec.msgpack.Decoder(self.response_type))

    @property
    def retry_safe(self) -> bool:
        """Whether a try that may have run on the server may be repeated."""
        return self.idempotent or self.at_most_once


@dataclass(frozen=True)
class Service:
    """A named group of methods; a server hosts one or more services."""

    name: str
    methods: tuple[Method[Any, Any], ...]

    def __post_init__(self) -> None:
        names = [m.name for m in self.methods]
        assert len(names) == len(set(names)), f"duplicate method in service {self.name}"

    def __iter__(self) -> Iterator[Method[Any, Any]]:
        return iter(self.methods)


def method_table(services: Iterable[Service]) -> dict[str, Method[Any, Any]]:
    """Merge services into one name -> method table; a name may be declared only once."""
    table: dict[str, Method[Any, Any]] = {}
    for service in services:
        for method in service:
            assert method.name not in table, f"method {method.name} declared twice"
            table[method.name] = method
    return table


class NotActiveHandlers:
    """Every method of a service answers ``error(why)`` (NotActive or a subclass), which
    makes the RPC client fail over to the next address: served by a BackupNode and a
    standby NameNode for the NameNode services they do not serve (yet)."""

    def __init__(self, why: Callable[[], str],
                 error: Callable[[str], NotActive] = NotActive) -> None:
        self._why = why
        self._error = error

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("__"):
            raise AttributeError(name)

        async def refuse(ctx: object, request: object, chunks: object = None) -> None:
            raise self._error(f"{name}: {self._why()}")

        return refuse
