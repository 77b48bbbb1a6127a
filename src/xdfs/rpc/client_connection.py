"""One multiplexed connection to an RPC server: many calls at once over one socket,
matched by id, and the uploads and downloads (streams) it carries.
:class:`~xdfs.rpc.client.RpcClient` owns these connections and applies the retry and
failover rules above them."""

from __future__ import annotations

import asyncio
import math
import ssl
from typing import Any, TypeVar

import msgspec
import msgspec.structs

from xdfs.common.addresses import parse_address
from xdfs.config import RpcConfig
from xdfs.errors import (
    ConnectionLost,
    ProtocolError,
    RpcTimeout,
    StreamError,
    Unavailable,
    XdfsError,
    error_from_code,
)
from xdfs.rpc.connection import (
    DECODE_ERRORS,
    ERROR_DECODER,
    RpcProtocol,
    decode_error,
)
from xdfs.rpc.messages import (
    K_CANCEL,
    K_CHALLENGE,
    K_CHUNK,
    K_CREDIT,
    K_ERROR,
    K_HEAD,
    K_HELLO,
    K_PROOF,
    K_REQUEST,
    K_RESPONSE,
    K_TAIL,
    K_WELCOME,
    Challenge,
    Hello,
    InEnvelope,
    Welcome,
)
from xdfs.rpc.scram import ClientLogin
from xdfs.rpc.service import Method, MethodKind, Req, Resp
from xdfs.rpc.streams import UPLOAD_CHUNKS_AHEAD, ChunkSource, StreamReceiver, StreamSender

T = TypeVar("T")

_WELCOME = msgspec.msgpack.Decoder(Welcome)
_CHALLENGE = msgspec.msgpack.Decoder(Challenge)
#: A call awaiting its answer: its future, method, deadline (loop time) and timeout (s).
_Pending = tuple[asyncio.Future[Any], Method[Any, Any], float, float]
_ANSWERS, _STREAM_FRAMES = (K_RESPONSE, K_HEAD), (K_CHUNK, K_TAIL, K_CREDIT)


class DownloadStream:
    """The head of a download, and an async iterator over its verified chunks."""

    def __init__(
        self,
        head: Any,
        receiver: StreamReceiver,
        conn: ClientConnection,
        call_id: int,
        chunk_timeout_s: float,
    ) -> None:
        self.head = head
        self._receiver = receiver
        self._conn = conn
        self._id = call_id
        self._timeout_s = chunk_timeout_s

    def __aiter__(self) -> DownloadStream:
        return self

    async def __anext__(self) -> memoryview | bytes:
        try:
            async with asyncio.timeout(self._timeout_s):
                return await self._receiver.__anext__()
        except TimeoutError:
            await self.aclose()
            raise RpcTimeout(f"no chunk within {self._timeout_s} s") from None

    async def read_all(self) -> bytes:
        return b"".join([bytes(part) async for part in self])

    async def aclose(self) -> None:
        """Abandon the stream early (tells the server to stop sending)."""
        if not self._receiver.finished:
            self._receiver.fail(StreamError("download abandoned by the reader"))
            self._conn.send(K_CANCEL, self._id, "", None)
        self._conn.receivers.pop(self._id, None)

    async def __aenter__(self) -> DownloadStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class ClientConnection(RpcProtocol):
    def __init__(self, config: RpcConfig) -> None:
        super().__init__(config)
        self.address = ""
        self.welcome: Welcome | None = None
        self._loop = asyncio.get_running_loop()
        self._welcome_future: asyncio.Future[Welcome] = self._loop.create_future()
        self._login: ClientLogin | None = None  # during the handshake
        self._next_id = 1
        #: Calls awaiting their answer: future, method, deadline (loop time; infinite while
        #: an upload still sends) and timeout.
        self._pending: dict[int, _Pending] = {}
        #: One timer for every call's deadline (see _watch), armed at ``_sweep_at``.
        self._sweep: asyncio.TimerHandle | None = None
        self._sweep_at = math.inf
        self._flush_soon = False  # a flush of queued requests is scheduled (_send_request)
        self._request_batch_bytes: float = config.request_batch_bytes or math.inf

    @classmethod
    async def open(
        cls,
        address: str,
        config: RpcConfig,
        hello: Hello,
        ssl_context: ssl.SSLContext | None = None,
    ) -> ClientConnection:
        """Connect and complete the handshake within ``connect_timeout_s``."""
        host, port = parse_address(address)
        loop = asyncio.get_running_loop()
        conn: ClientConnection | None = None
        try:
            async with asyncio.timeout(config.connect_timeout_s):
                _, conn = await loop.create_connection(
                    lambda: cls(config), host, port, ssl=ssl_context,
                    server_hostname=host if ssl_context else None,
                )
                conn.address = address
                login = conn._login = ClientLogin(hello)
                conn.send(K_HELLO, 0, "", login.hello)
                welcome = await conn._welcome_future
                login.verify(welcome)  # before any call: an impersonator gets nothing
                conn._login = None
                conn.welcome = welcome
        except TimeoutError:
            if conn is not None:
                conn.close()
            raise Unavailable(f"connecting to {address} timed out") from None
        except (OSError, ssl.SSLError) as exc:
            raise Unavailable(f"cannot connect to {address}: {exc}") from None
        except (XdfsError, asyncio.CancelledError):  # cancelled: a failover probe moved on
            if conn is not None:
                conn.close()
            raise
        return conn

    # -- incoming -----------------------------------------------------------------------

    def on_envelope(self, envelope: InEnvelope) -> None:
        kind = envelope.kind
        if kind in _ANSWERS:
            # An answer (most frames), taken here: one Python call less per call.
            entry = self._pending.pop(envelope.id, None)
            if entry is None:
                return  # the caller timed out or cancelled: the late answer is dropped
            future, method = entry[0], entry[1]
            if future.done():
                return
            try:
                future.set_result(method.response_decoder.decode(envelope.body))
            except DECODE_ERRORS as exc:
                future.set_exception(
                    decode_error(exc, ProtocolError, f"{method.name}: bad response"))
        elif kind in _STREAM_FRAMES:
            self.on_stream_frame(envelope)
            receiver = self.receivers.get(envelope.id)
            if receiver is not None and receiver.finished:
                del self.receivers[envelope.id]
        elif kind == K_ERROR:
            self._on_error(envelope)
        elif kind in (K_WELCOME, K_CHALLENGE):
            self._on_handshake(envelope)
        else:
            raise ProtocolError(f"unexpected frame kind {kind} from a server")

    def _on_handshake(self, envelope: InEnvelope) -> None:
        """A WELCOME, or a SCRAM challenge (answered with the proof at once)."""
        if envelope.kind == K_WELCOME:
            try:
                welcome = _WELCOME.decode(envelope.body)
            except DECODE_ERRORS as exc:
                raise decode_error(exc, ProtocolError, "bad handshake answer") from None
            if not self._welcome_future.done():
                self._welcome_future.set_result(welcome)
            return
        if self._login is None:
            raise ProtocolError("unexpected SCRAM challenge from the server")
        try:
            challenge = _CHALLENGE.decode(envelope.body)
            proof = self._login.answer(challenge)
        except DECODE_ERRORS as exc:
            self._fail_all(decode_error(exc, ProtocolError, "bad SCRAM challenge"))
            self.close()
            return
        except XdfsError as exc:  # the opener gets the reason, not ConnectionLost
            self._fail_all(exc)
            self.close()
            return
        self.send(K_PROOF, 0, "", proof)

    def _on_error(self, envelope: InEnvelope) -> None:
        try:
            info = ERROR_DECODER.decode(envelope.body)
            error = error_from_code(info.code, info.message)
        except DECODE_ERRORS as exc:
            error = decode_error(exc, ProtocolError, "bad error frame")
        if envelope.id == 0:  # the connection itself failed; the server closes it
            self._fail_all(error)
            return
        entry = self._pending.pop(envelope.id, None)
        if entry is not None and not entry[0].done():
            entry[0].set_exception(error)
        receiver = self.receivers.pop(envelope.id, None)
        if receiver is not None:
            receiver.fail(error)
        sender = self.senders.pop(envelope.id, None)
        if sender is not None:
            sender.fail(error)

    def _fail_all(self, error: XdfsError) -> None:
        if not self._welcome_future.done():
            self._welcome_future.set_exception(error)
        for entry in self._pending.values():
            if not entry[0].done():
                entry[0].set_exception(error)
        self._pending.clear()
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep, self._sweep_at = None, math.inf
        for receiver in self.receivers.values():
            receiver.fail(error)
        for sender in self.senders.values():
            sender.fail(error)

    def on_connection_lost(self, error: ConnectionLost) -> None:
        self._fail_all(error)

    # -- calls --------------------------------------------------------------------------

    def _new_call(
        self, method: Method[Any, Any], timeout_s: float | None = None
    ) -> tuple[int, asyncio.Future[Any]]:
        """A new call's id and future; its deadline starts now, or (``timeout_s`` None, an
        upload still to send) at :meth:`_await_answer`."""
        if self.is_closing:
            raise ConnectionLost(f"connection to {self.address} is closed")
        call_id = self._next_id
        self._next_id += 1
        future: asyncio.Future[Any] = self._loop.create_future()
        if timeout_s is None:
            self._pending[call_id] = (future, method, math.inf, 0.0)
            return call_id, future
        # What _watch does, not called: this runs for every call.
        deadline = self._loop.time() + timeout_s
        self._pending[call_id] = (future, method, deadline, timeout_s)
        if deadline < self._sweep_at:
            self._arm(deadline)
        return call_id, future

    def _watch(
        self, call_id: int, future: asyncio.Future[Any], method: Method[Any, Any],
        timeout_s: float,
    ) -> None:
        """Expire call ``call_id`` ``timeout_s`` from now. One timer serves every call of
        the connection (:meth:`_expire_due`): a timer made and cancelled per call cost more
        than the rest of a small call's bookkeeping (a handle, a heap entry, a cancelled
        entry left in the heap), while deadlines in this order rarely move the shared one."""
        deadline = self._loop.time() + timeout_s
        self._pending[call_id] = (future, method, deadline, timeout_s)
        if deadline < self._sweep_at:
            self._arm(deadline)

    def _arm(self, when: float) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
        self._sweep = self._loop.call_at(when, self._expire_due)
        self._sweep_at = when

    def _expire_due(self) -> None:
        """Expire the calls past their deadline; the timer then waits for the next one.
        Answered calls are gone from ``_pending``: the timer armed for one of them finds
        the others' later deadlines (one pass over the calls in flight)."""
        self._sweep, self._sweep_at = None, math.inf
        now = self._loop.time()
        due = [call_id for call_id, entry in self._pending.items() if entry[2] <= now]
        for call_id in due:
            self._expire(call_id)
        if self._pending and not self.is_closing:
            upcoming = min(entry[2] for entry in self._pending.values())
            if upcoming < math.inf:
                self._arm(upcoming)

    async def _await_answer(
        self, call_id: int, future: asyncio.Future[T], method: Method[Any, Any], timeout_s: float
    ) -> T:
        """The answer of a stream's call, its deadline starting now (the stream sent)."""
        if call_id in self._pending:
            self._watch(call_id, future, method, timeout_s)
        try:
            return await future
        except asyncio.CancelledError:
            self.abandon(call_id)
            raise

    def abandon(self, call_id: int) -> None:
        """The caller gave up on a call (cancelled): tell the server, drop the answer."""
        if self._pending.pop(call_id, None) is not None and not self.is_closing:
            self.send(K_CANCEL, call_id, "", None)

    def _expire(self, call_id: int) -> None:
        entry = self._pending.pop(call_id, None)
        if entry is not None and not entry[0].done():
            future, method, _deadline, timeout_s = entry
            future.set_exception(
                RpcTimeout(f"{method.name} got no answer within {timeout_s} s"))
            self.send(K_CANCEL, call_id, "", None)

    async def call(
        self, method: Method[Req, Resp], request: Req, timeout_s: float, logical_call: int = 0
    ) -> Resp:
        """``logical_call``: the number all tries of this call carry (see RpcClient)."""
        call_id, future = self.start_call(method, request, timeout_s, logical_call)
        try:
            return await future
        except asyncio.CancelledError:
            self.abandon(call_id)
            raise

    def start_call(
        self, method: Method[Req, Resp], request: Req, timeout_s: float, logical_call: int = 0
    ) -> tuple[int, asyncio.Future[Resp]]:
        """Send a unary call: its id and the future of its answer. The caller awaits the
        future and, cancelled, calls :meth:`abandon` (:meth:`call` does both; RpcClient
        does it itself, one coroutine less per call)."""
        assert method.kind is MethodKind.UNARY, f"{method.name} is not a unary method"
        call_id, future = self._new_call(method, timeout_s)
        try:
            self._send_request(call_id, method.name, request, logical_call)
        except BaseException:  # the request could not be encoded
            self.abandon(call_id)
            raise
        return call_id, future

    def _send_request(self, call_id: int, name: str, request: Any, logical_call: int) -> None:
        """Send a unary request; with other calls in flight, at the end of this loop turn
        together with the others made in it (many callers woken by one batch of answers
        send one write, not one system call each). A lone call goes out at once."""
        if len(self._pending) <= 1 or self._receiving:
            self.flush()  # anything queued goes first: frames keep their order
            self.send(K_REQUEST, call_id, name, request, logical_call)
            return
        self.queue(K_REQUEST, call_id, name, request, logical_call)
        tail = self._out_tail
        if tail is not None and len(tail) >= self._request_batch_bytes:
            # Written in parts: the server starts on the first while the callers still to
            # step this turn make the rest (one write of all of them made the two ends take
            # turns, each idle while the other worked: see rpc.request_batch_bytes).
            self.flush()
            return
        if not self._flush_soon:
            self._flush_soon = True
            self._loop.call_soon(self._flush_queued)

    def _flush_queued(self) -> None:
        self._flush_soon = False
        self.flush()

    def send(
        self, kind: int, call_id: int, method: str, body: Any, logical_call: int = 0
    ) -> None:
        if self._out and not self._receiving:
            self.flush()  # requests queued by _send_request go first
        super().send(kind, call_id, method, body, logical_call)

    async def upload(
        self,
        method: Method[Req, Resp],
        request: Req,
        chunks: ChunkSource,
        timeout_s: float,
        logical_call: int = 0,
    ) -> Resp:
        assert method.kind is MethodKind.UPLOAD, f"{method.name} is not an upload method"
        call_id, future = self._new_call(method)
        sender = StreamSender(self, call_id, timeout_s, lent=UPLOAD_CHUNKS_AHEAD)
        self.senders[call_id] = sender
        self.send(K_HEAD, call_id, method.name, request, logical_call)
        try:
            await sender.send_all(chunks, self.config.stream_chunk_bytes)
        except XdfsError:
            if not future.done():  # our side failed; the server's error wins otherwise
                self.send(K_CANCEL, call_id, "", None)
                self._pending.pop(call_id, None)
                raise
        except BaseException:
            self.send(K_CANCEL, call_id, "", None)
            self._pending.pop(call_id, None)
            raise
        finally:
            self.senders.pop(call_id, None)
        return await self._await_answer(call_id, future, method, timeout_s)

    async def download(
        self, method: Method[Req, Resp], request: Req, timeout_s: float, logical_call: int = 0
    ) -> DownloadStream:
        assert method.kind is MethodKind.DOWNLOAD, f"{method.name} is not a download method"
        call_id, future = self._new_call(method)
        receiver = StreamReceiver(self, call_id, self.config.stream_window_chunks)
        self.receivers[call_id] = receiver
        self.send(K_REQUEST, call_id, method.name, request, logical_call)
        receiver.grant_window()
        try:
            head = await self._await_answer(call_id, future, method, timeout_s)
        except BaseException:
            self.receivers.pop(call_id, None)
            raise
        return DownloadStream(head, receiver, self, call_id, timeout_s)
