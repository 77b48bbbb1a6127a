"""What an RPC handler sees and gives back (the server's side of a call, without the
server): the call's context and principal, its retry-cache key, the markers that choose how
a handler runs (:func:`eager`, :func:`deferring`) and the route they give a method
(:class:`Route`, :func:`routes_of`), and the answers other than a plain response
(:class:`Download`, :class:`Deferred`). See :mod:`xdfs.rpc.server_connection` for dispatch.
"""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import msgspec
from mypy_extensions import mypyc_attr

from xdfs.errors import XdfsError
from xdfs.rpc.messages import Hello
from xdfs.rpc.scram import ScramCredentials
from xdfs.rpc.service import Method, MethodKind, Service, method_table

#: (client id, call number) of the call a handler task runs, when the client sent both: the
#: key of a retry cache (as HDFS's Server.getClientId/getCallId). Set in each async call's
#: own task, so whatever the handler awaits sees its own call's key.
CallKey = tuple[bytes, int]
CURRENT_CALL: contextvars.ContextVar[CallKey | None] = contextvars.ContextVar(
    "xdfs_rpc_current_call", default=None
)


def current_call() -> CallKey | None:
    """The retry-cache key of the call being handled, None when there is none."""
    return CURRENT_CALL.get()


@mypyc_attr(allow_interpreted_subclasses=True)
@dataclass(frozen=True)
class Principal:
    """Who is on the other end of a connection, as the authenticator established it."""

    user: str
    #: Free-form facts the authenticator wants handlers to see (groups, node id ...).
    attributes: tuple[tuple[str, str], ...] = ()
    #: Authenticated as nobody (may only log in): the connection keeps the limits of an
    #: unauthenticated one (small frames, idle timeout, evicted first at the limit).
    anonymous: bool = False


class Caller(Protocol):
    """What a handler may know of its connection."""

    #: From the handshake (b"" when unsent): with a call's number, its retry key.
    client_id: bytes


class CallContext:
    """What a handler knows of its call. (A plain class: compiled, its ``__init__`` is
    native, where a dataclass's is generated Python, run for every call.)"""

    __slots__ = ("call", "connection", "peer", "principal")

    def __init__(self, principal: Principal, peer: str, connection: Caller, call: int = 0) -> None:
        self.principal = principal
        self.peer = peer
        self.connection = connection
        #: The client's number for this logical call (the same on each retry), 0 when unsent.
        self.call = call

    def __repr__(self) -> str:
        return f"CallContext({self.principal!r}, {self.peer!r}, call={self.call})"


@dataclass(frozen=True)
class Download:
    """What a download handler returns: the head struct, then the payload chunks."""

    head: msgspec.Struct
    chunks: Iterable[bytes | memoryview] | AsyncIterable[bytes | memoryview]


@dataclass(frozen=True)
class PasswordLogin:
    """An authenticator's answer to a Hello that logs in with SCRAM (``hello.scram``): the
    connection runs the exchange against ``credentials`` (decoy ones for an unknown user),
    then calls ``succeeded`` for the principal or ``failed`` for the error to answer (where
    the authenticator counts failures)."""

    user: str
    credentials: ScramCredentials
    succeeded: Callable[[], Principal]
    failed: Callable[[], XdfsError]


class Authenticator(Protocol):
    async def authenticate(self, hello: Hello, peer: str) -> Principal | PasswordLogin:
        """Return the principal (a token, nobody), the SCRAM login to run, or raise
        AuthenticationFailed."""
        ...


class TrustingAuthenticator:
    """Accepts the user the client names (for servers without accounts, and tests)."""

    async def authenticate(self, hello: Hello, peer: str) -> Principal | PasswordLogin:
        return Principal(hello.user or "anonymous")


HandlerT = TypeVar("HandlerT", bound=Callable[..., Awaitable[Any]])

#: The handlers marked :func:`eager` and :func:`deferring`, as their classes hold them. A
#: set rather than an attribute on each: a method of a class compiled with mypyc is a
#: method descriptor, which takes no attributes (xdfs.common.native).
_EAGER: set[object] = set()
_DEFERRING: set[object] = set()


def eager(handler: HandlerT) -> HandlerT:
    """Mark an async unary handler to start at once, in the loop turn its request arrived
    in, a task taking over only when it has to wait (:meth:`ServerConnection._start_unary`).
    Only for handlers that need no task before their first wait: no ``current_task()``,
    ``asyncio.timeout`` or ``TaskGroup`` until they have awaited something pending."""
    _EAGER.add(handler)
    return handler


PlainT = TypeVar("PlainT", bound=Callable[..., Any])


def deferring(handler: PlainT) -> PlainT:
    """Mark a plain ``def`` unary handler that may answer later: it returns the response,
    or a :class:`Deferred`, and its context carries the call's number (:func:`call_key`)."""
    _DEFERRING.add(handler)
    return handler


def same_markers(original: object, wrapper: PlainT) -> PlainT:
    """``wrapper`` marked :func:`eager` and :func:`deferring` as ``original`` is (a
    handler that wraps another keeps how the server runs it)."""
    if original in _EAGER:
        _EAGER.add(wrapper)
    if original in _DEFERRING:
        _DEFERRING.add(wrapper)
    return wrapper


@dataclass(frozen=True)
class Route:
    """How the server runs the handler of one method."""

    method: Method[Any, Any]
    handler: Callable[..., Any]
    is_async: bool
    eager: bool = False
    #: A plain ``def`` unary handler: answered inline by
    #: :meth:`ServerConnection._call_inline`, the per-call fast path.
    inline: bool = False
    #: An inline handler marked :func:`deferring`: it may return a Deferred.
    deferring: bool = False


def routes_of(service: Service, impl: object) -> Iterator[tuple[str, Route]]:
    """Each method of ``service`` routed to the same-named method of ``impl``."""
    for name, method in method_table([service]).items():
        handler = getattr(impl, name, None)
        assert callable(handler), f"{type(impl).__name__} lacks handler {name}"
        declared = getattr(type(impl), name, None)  # what a marker saw (None: not a method)
        is_async = inspect.iscoroutinefunction(handler)
        assert is_async or method.kind is not MethodKind.UPLOAD, f"{name} must be async"
        eager_start = is_async and declared in _EAGER
        inline = not is_async and method.kind is MethodKind.UNARY
        deferrable = inline and declared in _DEFERRING
        yield name, Route(method, handler, is_async, eager_start, inline, deferrable)


def call_key(ctx: CallContext) -> CallKey | None:
    """The retry-cache key of a call (as :func:`current_call`, for a plain handler)."""
    client_id = ctx.connection.client_id
    return (client_id, ctx.call) if ctx.call > 0 and client_id else None


class Deferred:
    """The answer of a plain-``def`` handler that comes later, with no task: the handler
    returns this, and whoever completes the work calls :meth:`resolve`, :meth:`fail` or
    :meth:`settle` (a NameNode mutation: once its edits are synced). Replies settled in
    one loop turn leave in one write per connection. :meth:`running` wraps an awaitable
    instead (the slow path): it runs as an async call's task, with the call's retry key.

    When the client cancels the call or goes away, the server stops listening (nothing
    is sent) and calls ``on_cancel`` if the producer set one."""

    __slots__ = (
        "_call", "_listener", "awaitable", "convert", "error", "on_cancel", "settled", "value",
    )

    def __init__(
        self,
        convert: Callable[[Any], Any] | None = None,
        awaitable: Awaitable[Any] | None = None,
    ) -> None:
        """``convert``: what the value settled becomes (the reply)."""
        self.convert = convert
        self.awaitable = awaitable
        self.settled = False
        self.value: Any = None
        self.error: BaseException | None = None
        self.on_cancel: Callable[[], None] | None = None
        self._listener: Callable[[Deferred], None] | None = None
        #: what the listener needs to answer (the server's call): kept here, no closure
        self._call: Any = None

    @staticmethod
    def running(awaitable: Awaitable[Any]) -> Deferred:
        """The answer ``awaitable`` gives, awaited in a task of the call's own."""
        return Deferred(None, awaitable)

    def resolve(self, value: Any) -> None:
        self.settle(None, value)

    def fail(self, error: BaseException) -> None:
        self.settle(error, None)

    def settle(self, error: BaseException | None, value: Any) -> None:
        """``error``, or else ``value``, is the answer (the first settle counts)."""
        if self.settled:
            return
        self.settled = True
        if error is not None:
            self.error = error
        elif self.convert is not None:
            try:
                self.value = self.convert(value)
            except Exception as exc:  # a bug: a reply (InternalError), not a lost call
                self.error = exc
        else:
            self.value = value
        listener, self._listener = self._listener, None
        if listener is not None:
            listener(self)

    def listen(self, listener: Callable[[Deferred], None], call: Any = None) -> None:
        """Call ``listener(self)`` once settled (now, if it is); ``call`` is kept for it."""
        self._call = call
        if self.settled:
            listener(self)
        else:
            self._listener = listener

    def cancel(self) -> None:
        self._listener = None
        hook, self.on_cancel = self.on_cancel, None
        if hook is not None:
            hook()
