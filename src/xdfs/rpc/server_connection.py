"""One connection of an RPC server (:class:`~xdfs.rpc.server.RpcServer`): the handshake,
the dispatch of each call to its handler, and the limits that keep one peer from crowding
out the others.

Limits: ``inflight_per_connection_max`` running calls per connection (beyond it the server
stops reading that socket, which pushes back on the client through TCP), at most
``frames_per_turn`` frames of one read handed on per loop turn, and a peer that stops
reading our replies is disconnected after ``stalled_peer_timeout_s``.

Peers that have not authenticated as anyone cost little and cannot crowd out those that
have: until a handshake names a principal that is not anonymous, a connection has a small
receive buffer and frame limit (``unauthenticated_frame_bytes_max``), and an anonymous
session is closed after ``unauthenticated_idle_timeout_s`` doing nothing. Any connection
whose frame stays incomplete for ``partial_frame_timeout_s`` while the server reads is
closed (a length prefix alone must not hold a buffer forever).

A call that arrives while the connection is at its limit waits (with every frame behind it,
in order, and the socket paused) as long as a running unary call will free a slot on its
own. If every running call is a stream, which may need more frames from this very socket
to finish, pausing could deadlock, so the new call is refused with ``Overloaded``.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import time
from collections import deque
from collections.abc import (
    Awaitable,
    Coroutine,
    Generator,
)
from typing import TYPE_CHECKING, Any, Final, Protocol

import msgspec

from xdfs.config import RpcConfig
from xdfs.errors import (
    AuthenticationFailed,
    BadRequest,
    Cancelled,
    InternalError,
    NotAuthenticated,
    Overloaded,
    ProtocolError,
    UnknownMethod,
    VersionMismatch,
    WrongCluster,
    XdfsError,
)
from xdfs.metrics.rpc_calls import RpcCalls
from xdfs.rpc.connection import DECODE_ERRORS, RpcProtocol, decode_error
from xdfs.rpc.handling import (
    CURRENT_CALL,
    Authenticator,
    CallContext,
    Deferred,
    Download,
    PasswordLogin,
    Principal,
    Route,
)
from xdfs.rpc.messages import (
    CLIENT_ID_BYTES,
    K_CANCEL,
    K_CHALLENGE,
    K_CHUNK,
    K_CREDIT,
    K_HEAD,
    K_HELLO,
    K_PROOF,
    K_REQUEST,
    K_RESPONSE,
    K_TAIL,
    K_WELCOME,
    PROTOCOL_VERSION,
    Hello,
    InEnvelope,
    Proof,
    Welcome,
)
from xdfs.rpc.scram import ServerLogin
from xdfs.rpc.service import MethodKind
from xdfs.rpc.streams import StreamReceiver, StreamSender

if TYPE_CHECKING:
    from xdfs.metrics import ServerMetrics

log = logging.getLogger(__name__)

_HELLO: Final = msgspec.msgpack.Decoder(Hello)
_PROOF: Final = msgspec.msgpack.Decoder(Proof)

#: Receive buffer of a connection until it authenticates (its frames are small: a HELLO, a
#: login); larger ones, up to rpc.unauthenticated_frame_bytes_max, get a buffer of their own.
#: Thousands of idle or half-open peers then cost a few KiB each, not a full buffer.
UNAUTHENTICATED_BUFFER_BYTES: Final = 4096

_STREAM_KINDS: Final = (K_CHUNK, K_TAIL, K_CREDIT)
#: The clock of every call's latency (Final: a C static in the compiled module, not an
#: attribute of the time module looked up twice per call).
_clock: Final = time.perf_counter


class ConnectionOwner(Protocol):
    """What a connection uses of its server (:class:`~xdfs.rpc.server.RpcServer`)."""

    name: str
    config: RpcConfig
    cluster_id: str
    authenticator: Authenticator
    metrics: ServerMetrics
    #: Every method's route by name (the server's own table: routes added later count).
    routes: dict[str, Route]
    connections: set[ServerConnection]

    def make_room(self) -> bool: ...


class ServerConnection(RpcProtocol):
    def __init__(self, server: ConnectionOwner) -> None:
        config = server.config
        super().__init__(
            config,
            frame_bytes_max=config.unauthenticated_frame_bytes_max,
            buffer_bytes=min(UNAUTHENTICATED_BUFFER_BYTES, config.receive_buffer_bytes),
        )
        self.server = server
        self._loop = asyncio.get_running_loop()
        self._reply_loop = self._loop  # replies of awaiting calls: one write per loop turn
        #: Loop time of the last complete frame or finished call (idleness, eviction order).
        self.last_active_s = self._loop.time()
        #: Loop time the frame now arriving began, None between frames.
        self.frame_started_s: float | None = None
        self._frames = 0  # frames dispatched so far; tells buffer_updated one completed
        self._frames_noted = 0
        self.principal: Principal | None = None
        self.client_id = b""  # from the handshake: with a call's number, its retry key
        self._hello_task: asyncio.Task[None] | None = None
        #: A SCRAM login waiting for the client's proof: the exchange and what it is for.
        self._login: tuple[ServerLogin, PasswordLogin, Hello] | None = None
        self._calls: dict[int, asyncio.Task[None]] = {}
        self._unary_calls: set[int] = set()  # ids of running unary calls (they need no input)
        #: Calls whose plain handler answers later, with no task (:class:`Deferred`).
        self._deferred: dict[int, Deferred] = {}
        self._parked: deque[InEnvelope] = deque()  # frames waiting for a free call slot
        self._paused_for_writes = False
        self._handshake_timer: asyncio.TimerHandle | None = None
        self._stall_timer: asyncio.TimerHandle | None = None
        self._routes = server.routes
        self._rpc_metrics: RpcCalls = server.metrics.rpc
        #: The context of every plain-``def`` call (they carry no call number): made once.
        self._inline_context: CallContext | None = None
        #: The listener of every deferred call, bound once.
        self._on_deferred_done = self._deferred_done
        self.frames_per_turn = self.config.frames_per_turn
        #: Frames of a read beyond frames_per_turn, dispatched in a later loop turn (they
        #: view the receive buffer: reading is paused until they are gone).
        self._held: list[memoryview] | None = None

    # -- lifecycle ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        server = self.server
        if len(server.connections) >= server.config.connections_max and not server.make_room():
            log.warning("refusing %s: %d connections open", self.peer, len(server.connections))
            self.abort_with(Overloaded("server has too many connections"))
            return
        self.server.connections.add(self)
        self._handshake_timer = asyncio.get_running_loop().call_later(
            self.config.handshake_timeout_s, self._handshake_deadline
        )

    def _handshake_deadline(self) -> None:
        if self.principal is None:
            self.abort_with(NotAuthenticated("no handshake within the deadline"))

    @property
    def unauthenticated(self) -> bool:
        """No principal yet, or an anonymous one."""
        return self.principal is None or self.principal.anonymous

    @property
    def evictable(self) -> bool:
        """Unauthenticated and doing nothing: no handshake being checked, no call running."""
        if self.principal is None:
            return self._hello_task is None
        return self.principal.anonymous and not self._calls and not self._deferred

    def buffer_updated(self, nbytes: int) -> None:
        super().buffer_updated(nbytes)
        now = self._loop.time()
        if self._frames != self._frames_noted:
            self._frames_noted = self._frames
            self.last_active_s = now
            self.frame_started_s = now if self._reader.buffered_bytes else None
        elif self.frame_started_s is None and self._reader.buffered_bytes:
            self.frame_started_s = now

    def hold(self, payloads: list[memoryview]) -> None:
        # A busy peer's read can bring dozens of calls: dispatching them all in one loop
        # turn would keep every completion waiting for the loop (an edits flush's, other
        # connections' reads) behind them.
        self._held = payloads
        self._update_reading()
        self._loop.call_soon(self._dispatch_held)

    def _dispatch_held(self) -> None:
        held, self._held = self._held, None
        if held is not None and not self.is_closing:
            self._dispatch(0, held)
        self._update_reading()

    def replies_may_follow(self) -> bool:
        # The call answering now is still counted (it leaves when its task is done).
        return len(self._calls) + len(self._deferred) > 1

    def check_deadlines(self, now: float) -> None:
        """Called by the server's sweeper: close a connection stuck in a frame, or an
        anonymous session left idle."""
        config = self.config
        started = self.frame_started_s
        reading = not (self._parked or self._paused_for_writes or self._held)
        if reading and started is not None and now - started > config.partial_frame_timeout_s:
            self.abort_with(ProtocolError(
                f"frame incomplete after {config.partial_frame_timeout_s:g} s"
            ))
        elif (
            self.principal is not None
            and self.principal.anonymous
            and not self._calls
            and not self._deferred
            and now - self.last_active_s > config.unauthenticated_idle_timeout_s
        ):
            self.abort_with(NotAuthenticated(
                f"anonymous session idle for {config.unauthenticated_idle_timeout_s:g} s "
                "without logging in"
            ))

    def on_connection_lost(self, error: XdfsError) -> None:
        self.server.connections.discard(self)
        for timer in (self._handshake_timer, self._stall_timer):
            if timer is not None:
                timer.cancel()
        for task in self._calls.values():
            task.cancel()
        self._drop_deferred()
        if self._hello_task is not None:
            self._hello_task.cancel()

    def shutdown(self) -> None:
        self.close()
        for task in self._calls.values():
            task.cancel()
        self._drop_deferred()

    def _drop_deferred(self) -> None:
        """Stop waiting for the deferred answers: nobody will read them."""
        deferred, self._deferred = self._deferred, {}
        for waiting in deferred.values():
            waiting.cancel()

    async def wait_finished(self) -> None:
        await self.wait_closed()
        tasks = [*self._calls.values(), *([self._hello_task] if self._hello_task else [])]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    # -- flow control -------------------------------------------------------------------

    def _update_reading(self) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        if self._parked or self._paused_for_writes or self._held:
            self.transport.pause_reading()
        else:
            if self.frame_started_s is not None:
                # the peer could not send while we did not read: its frame's time starts now
                self.frame_started_s = self._loop.time()
            self.transport.resume_reading()

    def on_write_paused(self) -> None:
        # The peer is not reading our replies: stop taking new calls from it, and give up
        # on it if it stays stalled.
        self._paused_for_writes = True
        self._update_reading()
        if self._stall_timer is None:
            self._stall_timer = asyncio.get_running_loop().call_later(
                self.config.stalled_peer_timeout_s, self._stalled
            )

    def on_write_resumed(self) -> None:
        self._paused_for_writes = False
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None
        self._update_reading()

    def _stalled(self) -> None:
        if self._paused_for_writes and self.transport is not None:
            log.warning("dropping %s: it stopped reading replies", self.peer)
            self.transport.abort()

    # -- dispatch -----------------------------------------------------------------------

    def on_envelope(self, envelope: InEnvelope) -> None:
        self._frames += 1
        kind = envelope.kind
        if self.principal is None:
            self._before_handshake(envelope)
        elif self._parked:
            self._park(envelope)  # keep the peer's order behind a waiting call
        elif kind == K_REQUEST:
            route = self._routes.get(envelope.method)
            if route is not None and route.inline:
                self._call_inline(envelope, route)
            else:
                self._on_request(envelope, route)
        elif kind in _STREAM_KINDS:
            self.on_stream_frame(envelope)
        elif kind == K_HEAD:
            self._on_upload_head(envelope)
        elif kind == K_CANCEL:
            self._cancel(envelope.id)
        else:
            raise ProtocolError(f"unexpected frame kind {kind} from a client")

    def _call_inline(self, envelope: InEnvelope, route: Route) -> None:
        """A plain ``def`` unary call, answered now: what :meth:`_resolve` and
        :meth:`_on_request` do for it, in one step (most calls of a NameNode are these)."""
        call_id = envelope.id
        self._check_call_numbers(call_id, envelope.call)
        try:
            request = route.method.request_decoder.decode(envelope.body)
        except DECODE_ERRORS as exc:
            self.send_error(call_id, decode_error(exc, BadRequest, envelope.method))
            return
        if route.deferring:
            if not self._admit(envelope):
                return
            context = self._context(envelope.call)  # (its number: the call's retry key)
        else:
            shared = self._inline_context
            if shared is None:
                shared = self._inline_context = self._context()
            context = shared
        started = _clock()
        try:
            response = route.handler(context, request)
        except Exception as exc:  # every failure becomes a reply
            self._reply_error(call_id, route, exc)
        else:
            if type(response) is Deferred:
                if response.awaitable is not None:
                    self._defer_to_task(envelope, route, request, started, response.awaitable)
                else:
                    # answered when its producer settles it, with no task (the reply goes
                    # out with the others settled in that loop turn: RpcProtocol.send)
                    self._deferred[call_id] = response
                    response.listen(self._on_deferred_done, (call_id, route, request, started))
                return
            self.send(K_RESPONSE, call_id, "", response)
        self._observe(route, started, request)

    def _defer_to_task(
        self, envelope: InEnvelope, route: Route, request: Any, started: float,
        awaitable: Awaitable[Any],
    ) -> None:
        """A plain handler's answer that ``awaitable`` gives, awaited in a task."""
        call_id = envelope.id
        self._unary_calls.add(call_id)
        self._spawn(call_id, self._run_unary(
            call_id, envelope.call, route, request, started, awaitable))

    def _deferred_done(self, done: Deferred) -> None:
        call_id, route, request, started = done._call
        if call_id not in self._deferred:
            return  # cancelled, or the connection is gone
        if done.error is None:
            self.send(K_RESPONSE, call_id, "", done.value)
        else:
            self._reply_error(call_id, route, done.error)
        del self._deferred[call_id]  # (after the send: it may wait for the others)
        self._observe(route, started, request)
        self.last_active_s = self._loop.time()
        if self._parked:
            self._unpark()

    def _before_handshake(self, envelope: InEnvelope) -> None:
        if self._login is not None:
            self._on_proof(envelope)
            return
        if envelope.kind != K_HELLO:
            raise NotAuthenticated("the first frame must be the handshake (HELLO)")
        if self._hello_task is not None:
            raise ProtocolError("frames sent before the handshake was answered")
        try:
            hello = _HELLO.decode(envelope.body)
        except DECODE_ERRORS as exc:
            raise decode_error(exc, ProtocolError, "bad handshake") from None
        self._hello_task = asyncio.get_running_loop().create_task(self._handshake(hello))

    async def _handshake(self, hello: Hello) -> None:
        try:
            if hello.protocol_version != PROTOCOL_VERSION:
                raise VersionMismatch(
                    f"client speaks protocol {hello.protocol_version}, server {PROTOCOL_VERSION}"
                )
            if len(hello.client_id) not in (0, CLIENT_ID_BYTES):
                raise BadRequest(
                    f"client id has {len(hello.client_id)} bytes, not {CLIENT_ID_BYTES}"
                )
            if hello.password:
                raise AuthenticationFailed(
                    "a password is never sent in the handshake: log in with SCRAM")
            cluster = self.server.cluster_id
            if cluster and hello.cluster_id and hello.cluster_id != cluster:
                raise WrongCluster(f"server is in cluster {cluster}, not {hello.cluster_id}")
            answer = await self.server.authenticator.authenticate(hello, self.peer)
            if isinstance(answer, PasswordLogin):
                exchange = ServerLogin(answer.user, answer.credentials)
                challenge = exchange.challenge(hello.scram)
                self._login = (exchange, answer, hello)
                self._hello_task = None
                self.send(K_CHALLENGE, 0, "", challenge)
                return
        except XdfsError as exc:
            self.abort_with(exc)
            return
        except Exception as exc:
            log.exception("authenticator failed for %s", self.peer)
            self.abort_with(AuthenticationFailed(f"authentication error: {exc}"))
            return
        self._welcome(hello, answer)

    def _on_proof(self, envelope: InEnvelope) -> None:
        """The client's answer to the SCRAM challenge: the login succeeds or fails here."""
        assert self._login is not None
        exchange, login, hello = self._login
        self._login = None
        if envelope.kind != K_PROOF:
            raise ProtocolError("the answer to a SCRAM challenge must be its proof (PROOF)")
        try:
            proof = _PROOF.decode(envelope.body)
        except DECODE_ERRORS as exc:
            raise decode_error(exc, ProtocolError, "bad SCRAM proof") from None
        try:
            server_final = exchange.finish(proof.client_final)
        except AuthenticationFailed:
            self.abort_with(login.failed())
            return
        self._welcome(hello, login.succeeded(), server_final)

    def _welcome(self, hello: Hello, principal: Principal, server_final: str = "") -> None:
        self.principal = principal
        self.client_id = hello.client_id
        if not principal.anonymous:
            self._reader.grow(self.config.receive_buffer_bytes, self.config.frame_bytes_max)
        self.last_active_s = self._loop.time()
        welcome = Welcome(PROTOCOL_VERSION, self.server.cluster_id, self.server.name,
                          principal.user, server_final)
        self.send(K_WELCOME, 0, "", welcome)

    def _resolve(
        self, envelope: InEnvelope, kind: MethodKind, route: Route | None
    ) -> tuple[Route, Any] | None:
        """The route (``route``: the method's, None when there is none) and decoded request
        of a call, or None after answering with an error."""
        if route is None:
            self.send_error(envelope.id, UnknownMethod(f"no method {envelope.method!r}"))
            return None
        if route.method.kind is not kind and not (
            kind is MethodKind.UNARY and route.method.kind is MethodKind.DOWNLOAD
        ):
            self.send_error(
                envelope.id, BadRequest(f"{envelope.method} is a {route.method.kind.value} call")
            )
            return None
        self._check_call_numbers(envelope.id, envelope.call)
        try:
            request = route.method.request_decoder.decode(envelope.body)
        except DECODE_ERRORS as exc:
            self.send_error(envelope.id, decode_error(exc, BadRequest, envelope.method))
            return None
        return route, request

    def _check_call_numbers(self, call_id: int, call: int) -> None:
        """A new call's id (``call_id``) and number (``call``), as its envelope has them."""
        if call_id <= 0 or call_id in self._calls or call_id in self._deferred:
            raise ProtocolError(f"call id {call_id} is invalid or already in use")
        if call < 0:
            raise ProtocolError(f"call number {call} is negative")

    def _context(self, call: int = 0) -> CallContext:
        assert self.principal is not None
        return CallContext(self.principal, self.peer, self, call)

    def _enter_call(self, call: int) -> CallContext:
        """The context of an async call, and its retry key for whatever it awaits (this
        runs in the call's own task, whose context variables are its own)."""
        if call > 0 and self.client_id:
            CURRENT_CALL.set((self.client_id, call))
        return self._context(call)

    def _on_request(self, envelope: InEnvelope, route: Route | None) -> None:
        resolved = self._resolve(envelope, MethodKind.UNARY, route)
        if resolved is None:
            return
        route, request = resolved
        if route.method.kind is MethodKind.DOWNLOAD:
            if self._admit(envelope):
                # The sender exists before the handler runs: the client's window grant
                # (its first CREDIT) follows the request at once and must not be lost.
                sender = StreamSender(self, envelope.id, self.config.stalled_peer_timeout_s)
                self.senders[envelope.id] = sender
                self._spawn(envelope.id, self._run_download(envelope.id, route, request, sender,
                                                            _clock()))
        elif route.is_async:
            if not self._admit(envelope):
                return
            if route.eager:
                self._start_unary(envelope, route, request)
            else:
                self._unary_calls.add(envelope.id)
                self._spawn(envelope.id, self._run_unary(
                    envelope.id, envelope.call, route, request, _clock()))
        else:
            started = _clock()
            try:
                response = route.handler(self._context(), request)
            except Exception as exc:  # every failure becomes a reply
                self._reply_error(envelope.id, route, exc)
            else:
                self.send(K_RESPONSE, envelope.id, "", response)
            self._observe(route, started, request)

    def _on_upload_head(self, envelope: InEnvelope) -> None:
        resolved = self._resolve(envelope, MethodKind.UPLOAD, self._routes.get(envelope.method))
        if resolved is None:
            return
        route, request = resolved
        if not self._admit(envelope):
            return
        receiver = StreamReceiver(self, envelope.id, self.config.stream_window_chunks)
        self.receivers[envelope.id] = receiver
        self.grant_window(receiver)
        self._spawn(envelope.id, self._run_upload(
            envelope.id, envelope.call, route, request, receiver, _clock()))

    def _admit(self, envelope: InEnvelope) -> bool:
        """Whether a new call may start now; otherwise it is parked or refused."""
        running = len(self._calls) + len(self._deferred)
        if running < self.config.inflight_per_connection_max:
            return True
        if self._unary_calls or self._deferred:
            self._park(envelope)  # a running unary call will free a slot without our help
        else:
            self.send_error(envelope.id, Overloaded(
                f"{len(self._calls)} streams running on this connection; try again later"
            ))
        return False

    def _park(self, envelope: InEnvelope) -> None:
        # The body may view the shared receive buffer: keep a copy. Reading stops, so at
        # most the rest of one receive buffer (or one large frame) is ever parked.
        body = msgspec.Raw(bytes(envelope.body))
        self._parked.append(
            InEnvelope(envelope.kind, envelope.id, envelope.method, body, envelope.call)
        )
        self._update_reading()

    def _unpark(self) -> None:
        """Dispatch parked frames until one has to wait again; resume reading when none do."""
        parked, self._parked = self._parked, deque()
        self._payload_is_shared = False  # parked bodies are private copies
        try:
            while parked and not self._parked and not self.is_closing:
                self.on_envelope(parked.popleft())
        except XdfsError as exc:
            self.abort_with(exc)
        except Exception as exc:
            log.exception("unexpected error handling a frame from %s", self.peer)
            self.abort_with(InternalError(f"{type(exc).__name__}: {exc}"))
        self._parked.extend(parked)
        self._update_reading()

    def _start_unary(self, envelope: InEnvelope, route: Route, request: Any) -> None:
        """Run an async unary call's first step now, in a context of its own; a task
        carries it on only when it has to wait (a mutation, for its sync). A call answered
        without waiting costs no task, and one that waits does its work in this loop turn
        rather than the next (as Python 3.12's eager tasks)."""
        call_id = envelope.id
        context = contextvars.copy_context()
        coro = self._run_unary(call_id, envelope.call, route, request, _clock())
        try:
            awaited = context.run(coro.send, None)
        except StopIteration:
            return  # answered (or failed: _run_unary replies to every failure)
        self._unary_calls.add(call_id)
        self._spawn(call_id, _Resume(coro, awaited), context)

    def _spawn(
        self,
        call_id: int,
        work: Coroutine[Any, Any, None],
        context: contextvars.Context | None = None,
    ) -> None:
        task: asyncio.Task[None] = self._loop.create_task(work, context=context)
        self._calls[call_id] = task
        task.add_done_callback(lambda _t: self._finished(call_id))

    def _finished(self, call_id: int) -> None:
        self.last_active_s = self._loop.time()
        self._calls.pop(call_id, None)
        self._unary_calls.discard(call_id)
        self.receivers.pop(call_id, None)
        self.senders.pop(call_id, None)
        if self._parked:
            self._unpark()

    def _cancel(self, call_id: int) -> None:
        task = self._calls.get(call_id)
        if task is not None:
            task.cancel()
        waiting = self._deferred.pop(call_id, None)
        if waiting is not None:  # answered (and counted) as a cancelled task is
            waiting.cancel()
            _id, route, request, started = waiting._call
            self._reply_error(call_id, route, Cancelled(f"call {call_id} cancelled by the client"))
            self._observe(route, started, request)
            if self._parked:
                self._unpark()
        sender = self.senders.get(call_id)
        if sender is not None:
            sender.fail(Cancelled(f"call {call_id} cancelled by the client"))

    def _reply_error(self, call_id: int, route: Route, exc: BaseException) -> None:
        if isinstance(exc, XdfsError):
            error: XdfsError = exc
        elif isinstance(exc, asyncio.CancelledError):
            error = Cancelled(f"{route.method.name} was cancelled")
        else:
            log.exception("handler %s failed", route.method.name, exc_info=exc)
            error = InternalError(f"{route.method.name}: {exc!r}")
        self.send_error(call_id, error)
        self._rpc_metrics.call_failed(route.method.name, error.code)

    def _observe(self, route: Route, started: float, request: Any) -> None:
        """A finished call (answered or failed): its method's count and latency; a slow
        one is kept for the Slow operations page, unless it was a long poll (a request
        with ``wait_s``: waiting is what it asked for)."""
        seconds = _clock() - started
        rpc = self._rpc_metrics
        rpc.call_done(route.method.name, seconds)
        if seconds >= rpc.slow_call_s and not getattr(request, "wait_s", 0.0):
            user = self.principal.user if self.principal is not None else ""
            rpc.slow(time.time(), route.method.name, seconds, user, self.peer)

    async def _run_unary(
        self, call_id: int, call: int, route: Route, request: Any, started: float,
        awaitable: Awaitable[Any] | None = None,
    ) -> None:
        """``awaitable``: the answer instead of the handler's (what a plain handler deferred
        to a task, :meth:`_defer_to_task`; an upload's, :meth:`_uploaded`)."""
        try:
            context = self._enter_call(call)
            response = await (route.handler(context, request) if awaitable is None
                              else awaitable)
        except BaseException as exc:
            self._reply_error(call_id, route, exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
        else:
            self.send(K_RESPONSE, call_id, "", response)
        finally:
            self._observe(route, started, request)

    async def _run_upload(
        self, call_id: int, call: int, route: Route, request: Any, receiver: StreamReceiver,
        started: float,
    ) -> None:
        await self._run_unary(call_id, call, route, request, started,
                              self._uploaded(call, route, request, receiver))

    async def _uploaded(
        self, call: int, route: Route, request: Any, receiver: StreamReceiver
    ) -> Any:
        """An upload handler's answer, once it has taken the whole stream."""
        response = await route.handler(self._context(call), request, receiver)
        if not receiver.exhausted:
            raise ProtocolError(f"{route.method.name} returned before the stream ended")
        return response

    async def _run_download(
        self, call_id: int, route: Route, request: Any, sender: StreamSender, started: float
    ) -> None:
        try:
            download = route.handler(self._context(), request)
            if inspect.isawaitable(download):
                download = await download
            assert isinstance(download, Download), f"{route.method.name} must return Download"
            self.send(K_HEAD, call_id, "", download.head)
            await sender.send_all(download.chunks, self.config.stream_chunk_bytes)
        except BaseException as exc:
            self._reply_error(call_id, route, exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self._observe(route, started, request)


class _Resume(Coroutine[Any, Any, None]):
    """The rest of ``coro``, whose first step ran outside any task and yielded ``awaited``
    (what it waits for), for a task to run: its first step hands ``awaited`` on to that
    task, the next ones step ``coro``. A cancellation thrown in, even before the first
    step, goes into ``coro`` where it waits (its handler answers the client)."""

    __slots__ = ("_awaited", "_coro", "_started")

    def __init__(self, coro: Coroutine[Any, Any, None], awaited: Any) -> None:
        self._coro = coro
        self._awaited = awaited
        self._started = False

    def send(self, value: Any) -> Any:
        if not self._started:
            self._started = True
            awaited, self._awaited = self._awaited, None
            return awaited
        return self._coro.send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        self._started = True
        self._awaited = None
        if val is None and tb is None:
            return self._coro.throw(typ)
        return self._coro.throw(typ, val, tb)  # (the old three-argument form)

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Generator[Any, None, None]:
        raise TypeError("_Resume is run by a task, not awaited")
