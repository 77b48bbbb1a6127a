"""A blocking connection: a socket a thread makes unary calls (and one-chunk uploads: a
small file's block, see :meth:`BlockingConnection.upload`) over itself, no event loop.

A synchronous caller (the :class:`~xdfs.client.client.Client`, fsspec) that hops to the
event loop's thread for every call pays two thread wakeups and the loop's task, future and
timer per call, several times the call's own work on a small one (a stat): so
:class:`~xdfs.rpc.client.RpcClient` lets a calling thread make a unary call over a socket
it takes from the client's idle ones (or opens) and gives back after the call, writing the
request and reading the answer itself (see :meth:`RpcClient.call`). The frames and the
handshake are the ones of :class:`~xdfs.rpc.client_connection.ClientConnection`, with the client's
``Hello`` (its client id: the server's retry cache treats every connection of one client
alike).

One call at a time per connection (by the thread that took it). An answer that comes after
its call was given up (a timeout) is read and dropped with the next call, as the
multiplexed connection drops it.
"""

from __future__ import annotations

import collections
import contextlib
import math
import select
import socket
import ssl
import struct
import time
from typing import Any

import crc32c
import msgspec

from xdfs.common.addresses import parse_address
from xdfs.config import RpcConfig
from xdfs.errors import ConnectionLost, ProtocolError, Unavailable, XdfsError, error_from_code
from xdfs.rpc.connection import (
    DECODE_ERRORS,
    ERROR_DECODER,
    decode_error,
    encode_chunk_head,
    encode_frame,
)
from xdfs.rpc.framing import FrameReader
from xdfs.rpc.messages import (
    K_CANCEL,
    K_CHALLENGE,
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
    Chunk,
    Hello,
    InEnvelope,
    Tail,
    Welcome,
)
from xdfs.rpc.scram import ClientLogin
from xdfs.rpc.service import Method, Resp

_ENVELOPE = msgspec.msgpack.Decoder(InEnvelope)
_WELCOME = msgspec.msgpack.Decoder(Welcome)
_CHALLENGE = msgspec.msgpack.Decoder(Challenge)
#: What a socket operation raises when the peer or the network failed (TimeoutError, a
#: subclass of OSError, is caught before these where a deadline matters).
_SOCKET_ERRORS = (OSError, ssl.SSLError)
#: The longest a read waits in the kernel before the caller's deadline is checked again.
_KERNEL_WAIT_S = 0.25
#: A connection that answered a call this recently is taken without the idle check's
#: read by a caller that copes with finding it lost (see :meth:`BlockingConnection.usable`).
FRESH_S = 0.5


class BlockingConnection:
    """A connected, handshaken socket to ``address`` used by one thread at a time."""

    def __init__(self, sock: socket.socket, address: str, config: RpcConfig) -> None:
        self.address = address
        self.welcome: Welcome | None = None
        self._sock = sock
        # A plain socket stays blocking: its idle check reads with MSG_DONTWAIT and a wait
        # for an answer polls, no mode switch (a system call each) per call. TLS records
        # need the socket's own timeouts (a readable socket may hold half a record).
        self._tls = isinstance(sock, ssl.SSLSocket)
        sock.settimeout(None)
        if not self._tls:
            # A wait for an answer is one read that the kernel ends after _KERNEL_WAIT_S
            # (then the deadline is checked again), not a poll and then a read: every
            # system call lets the other threads of the process take the interpreter, a
            # context switch or two each under load. A write that the peer does not take
            # (a paused server) fails after the call's timeout instead of hanging.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(_KERNEL_WAIT_S))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO,
                            _timeval(config.call_timeout_s))
        self._poll = select.poll()
        self._poll.register(sock.fileno(), select.POLLIN)
        self._reader = FrameReader(config.frame_bytes_max, config.receive_buffer_bytes)
        #: Frames read beyond the one being waited for, decoded, their bodies owned.
        self._queue: collections.deque[InEnvelope] = collections.deque()
        self._next_id = 1
        self._closed = False
        #: When the last answer was read (monotonic), for :meth:`usable`.
        self._answered_s = -math.inf

    @classmethod
    def open(
        cls, address: str, config: RpcConfig, hello: Hello,
        ssl_context: ssl.SSLContext | None = None,
    ) -> BlockingConnection:
        """Connect and complete the handshake within ``connect_timeout_s`` (Unavailable
        when that fails; the server's refusal, such as bad credentials, as its error)."""
        host, port = parse_address(address)
        deadline = time.monotonic() + config.connect_timeout_s
        try:
            sock = socket.create_connection((host, port), timeout=config.connect_timeout_s)
        except _SOCKET_ERRORS as exc:
            raise Unavailable(f"cannot connect to {address}: {exc}") from None
        conn: BlockingConnection | None = None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if ssl_context is not None:
                sock = ssl_context.wrap_socket(sock, server_hostname=host)
            conn = cls(sock, address, config)
            login = ClientLogin(hello)
            conn._write(encode_frame(K_HELLO, 0, "", login.hello))
            envelope = conn._handshake_frame(deadline)
            if envelope.kind == K_CHALLENGE and login.uses_scram:
                try:
                    challenge = _CHALLENGE.decode(envelope.body)
                except DECODE_ERRORS as exc:
                    raise decode_error(exc, ProtocolError, "bad SCRAM challenge") from None
                conn._write(encode_frame(K_PROOF, 0, "", login.answer(challenge)))
                envelope = conn._handshake_frame(deadline)
            if envelope.kind != K_WELCOME:
                raise conn._unexpected(envelope)
            try:
                welcome = _WELCOME.decode(envelope.body)
            except DECODE_ERRORS as exc:
                raise decode_error(exc, ProtocolError, "bad handshake answer") from None
            login.verify(welcome)  # before any call: an impersonator gets nothing
            conn.welcome = welcome
        except TimeoutError:
            _close(conn, sock)
            raise Unavailable(f"connecting to {address} timed out") from None
        except ConnectionLost as exc:
            _close(conn, sock)
            raise Unavailable(f"cannot connect to {address}: {exc.message}") from None
        except _SOCKET_ERRORS as exc:
            _close(conn, sock)
            raise Unavailable(f"cannot connect to {address}: {exc}") from None
        except BaseException:
            _close(conn, sock)
            raise
        return conn

    @property
    def closed(self) -> bool:
        return self._closed

    def usable(self, fresh_ok: bool = False) -> bool:
        """Whether a call may be sent: the connection is open and the server has not closed
        it while it was idle (an idle anonymous session, a server restarted). Late answers
        waiting in the socket are read and dropped on the way.

        ``fresh_ok``: the caller copes with a call that finds the connection lost after
        all (a call that may be repeated: the failover repeats it on a new connection; a
        block upload: the writer replaces the target, as for a DataNode that fails). Then
        a connection that answered within :data:`FRESH_S` is taken without the check's
        read: one system call less per call, and each one lets another thread take the
        interpreter (a context switch or two with several callers). A server closes a
        connection that just answered only when it stops or fails."""
        if self._closed:
            return False
        if fresh_ok and not self._queue and time.monotonic() - self._answered_s < FRESH_S:
            return True
        try:
            while True:
                while self._queue:
                    self._on_idle_frame(self._queue.popleft())
                try:
                    received = self._receive_now()
                except (BlockingIOError, ssl.SSLWantReadError):
                    return True
                if not received:
                    raise ConnectionLost(f"connection to {self.address} closed")
                self._read(received)
        except (XdfsError, *_SOCKET_ERRORS):
            self.close()
            return False

    def request(self, method: Method[Any, Any], body: Any, logical_call: int) -> int:
        """Send a unary call; its id, for :meth:`answer`. ConnectionLost when the write
        fails (the server may have read part of it: treat it as sent)."""
        call_id = self._new_id()
        self._send([encode_frame(K_REQUEST, call_id, method.name, body, logical_call)])
        return call_id

    def upload(
        self, method: Method[Any, Any], head: Any, data: bytes, logical_call: int,
        crc: int | None = None,
    ) -> int:
        """Send an upload of ``data`` as one chunk (at most ``rpc.stream_chunk_bytes``):
        head, chunk and tail in one write, the chunk sent ahead of the window grant as
        :data:`~xdfs.rpc.streams.UPLOAD_CHUNKS_AHEAD` allows; its id, for :meth:`answer`
        (which passes over the stream's credits). ``crc``: the CRC32C of ``data`` when
        the caller has it (one computation for every target of a block). Errors as
        :meth:`request`'s."""
        call_id = self._new_id()
        frames: list[bytes | bytearray] = [
            encode_frame(K_HEAD, call_id, method.name, head, logical_call)
        ]
        if data:
            chunk = Chunk(0, crc32c.crc32c(data) if crc is None else crc, memoryview(data))
            frames += [encode_chunk_head(call_id, chunk), data]
        frames.append(encode_frame(K_TAIL, call_id, "", Tail(1 if data else 0, len(data))))
        self._send(frames)
        return call_id

    def _new_id(self) -> int:
        call_id = self._next_id
        self._next_id += 1
        return call_id

    def _send(self, frames: list[bytes | bytearray]) -> None:
        try:
            self._write_all(frames)
        except _SOCKET_ERRORS as exc:
            self.close()
            raise ConnectionLost(f"connection to {self.address} failed: {exc}") from None

    def answer(self, call_id: int, method: Method[Any, Resp], wait_s: float) -> Resp:
        """The answer of call ``call_id`` (its error raised), or TimeoutError when none came
        within ``wait_s`` (the call still runs: :meth:`answer` again, or :meth:`cancel`)."""
        deadline = time.monotonic() + max(0.0, wait_s)
        while True:
            envelope = self._next_frame(deadline)
            if envelope is None:
                raise TimeoutError
            kind = envelope.kind
            if envelope.id != call_id or kind == K_CREDIT:  # an upload's credit
                self._on_idle_frame(envelope)
                continue
            if kind == K_ERROR:
                self._answered_s = time.monotonic()
                raise self._error(envelope)
            if kind != K_RESPONSE:
                raise self._fail(self._unexpected(envelope))
            self._answered_s = time.monotonic()
            try:
                result: Resp = method.response_decoder.decode(envelope.body)
            except DECODE_ERRORS as exc:
                raise decode_error(exc, ProtocolError, f"{method.name}: bad response") from None
            return result

    def fileno(self) -> int:
        return self._sock.fileno()

    def has_frames(self) -> bool:
        """Whether a frame may be taken without waiting for the socket: one read already
        (queued), or TLS bytes decrypted and not taken yet."""
        sock = self._sock
        return bool(self._queue) or (isinstance(sock, ssl.SSLSocket) and sock.pending() > 0)

    def cancel(self, call_id: int) -> None:
        """Tell the server the caller gave up on ``call_id`` (its answer is dropped)."""
        try:
            self._write(encode_frame(K_CANCEL, call_id, "", None))
        except _SOCKET_ERRORS:
            self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            _close(None, self._sock)

    # -- frames ---------------------------------------------------------------------------

    def _write(self, frame: bytes | bytearray) -> None:
        self._sock.sendall(frame)

    def _write_all(self, frames: list[bytes | bytearray]) -> None:
        """Write ``frames`` in order, in one system call when the socket takes them all
        (``sendmsg`` gathers them: a chunk's data is not copied into one buffer first)."""
        if self._tls or len(frames) == 1:
            for frame in frames:
                self._sock.sendall(frame)
            return
        views = [memoryview(frame) for frame in frames]
        while views:
            sent = self._sock.sendmsg(views)
            while views and sent >= views[0].nbytes:
                sent -= views[0].nbytes
                views.pop(0)
            if views and sent:
                views[0] = views[0][sent:]

    def _receive(self, wait_s: float) -> int:
        """Read what arrives within ``wait_s`` (or sooner, then TimeoutError) into the
        reader; TimeoutError: nothing came."""
        if self._tls:
            return self._receive_tls(wait_s)
        if wait_s < _KERNEL_WAIT_S:
            if not self._poll.poll(math.ceil(wait_s * 1000)):
                raise TimeoutError
            return self._sock.recv_into(self._reader.get_buffer())
        try:
            return self._sock.recv_into(self._reader.get_buffer())
        except BlockingIOError:  # SO_RCVTIMEO: _KERNEL_WAIT_S passed
            raise TimeoutError from None

    def _receive_now(self) -> int:
        """Read what has arrived (BlockingIOError or SSLWantReadError: nothing has)."""
        if self._tls:
            return self._receive_tls(0.0)
        return self._sock.recv_into(self._reader.get_buffer(), 0, socket.MSG_DONTWAIT)

    def _receive_tls(self, timeout_s: float) -> int:
        """A TLS read under the socket's own timeout (0: only what has arrived)."""
        self._sock.settimeout(timeout_s)
        try:
            return self._sock.recv_into(self._reader.get_buffer())
        finally:
            self._sock.settimeout(None)

    def _next_frame(self, deadline: float) -> InEnvelope | None:
        """The next frame, or None at ``deadline``. Reads whole socket buffers: frames
        beyond the first wait in ``_queue``."""
        try:
            while True:
                if self._queue:
                    return self._queue.popleft()
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                try:
                    received = self._receive(left)
                except TimeoutError:
                    continue  # the deadline, or a kernel wait shorter than it
                if not received:
                    raise ConnectionLost(f"connection to {self.address} closed")
                self._read(received)
        except _SOCKET_ERRORS as exc:
            lost = ConnectionLost(f"connection to {self.address} failed: {exc}")
            raise self._fail(lost) from None
        except XdfsError as exc:  # closed, a frame over the limit, an undecodable one
            raise self._fail(exc) from None

    def _read(self, received: int) -> None:
        """Queue the frames the last ``received`` bytes completed, decoded. A body viewing
        the reader's shared buffer is copied out: the next read overwrites that buffer."""
        shared = self._reader.shared_buffer
        for payload in self._reader.feed(received):
            try:
                envelope = _ENVELOPE.decode(payload)
            except DECODE_ERRORS as exc:
                raise decode_error(exc, ProtocolError, "undecodable frame") from None
            if payload.obj is shared:
                envelope.body = msgspec.Raw(bytes(envelope.body))
            self._queue.append(envelope)

    def _on_idle_frame(self, envelope: InEnvelope) -> None:
        """A frame that answers no waiting call: a late answer (dropped) or the server's
        connection-level error (raised)."""
        if envelope.kind == K_ERROR and envelope.id == 0:
            raise self._fail(self._error(envelope))

    def _error(self, envelope: InEnvelope) -> XdfsError:
        try:
            info = ERROR_DECODER.decode(envelope.body)
            error = error_from_code(info.code, info.message)
        except DECODE_ERRORS as exc:
            return self._fail(decode_error(exc, ProtocolError, "bad error frame"))
        return self._fail(error) if envelope.id == 0 else error

    def _handshake_frame(self, deadline: float) -> InEnvelope:
        envelope = self._next_frame(deadline)
        if envelope is None:
            raise TimeoutError
        return envelope

    def _unexpected(self, envelope: InEnvelope) -> XdfsError:
        if envelope.kind == K_ERROR:
            return self._error(envelope)
        return ProtocolError(f"unexpected frame kind {envelope.kind} from a server")

    def _fail(self, error: XdfsError) -> XdfsError:
        """The connection can no longer be trusted: close it; ``error`` for raising."""
        self.close()
        return error


def _timeval(seconds: float) -> bytes:
    whole = int(seconds)
    return struct.pack("ll", whole, int((seconds - whole) * 1_000_000))


def _close(conn: BlockingConnection | None, sock: socket.socket) -> None:
    """Close ``sock``; shut down first, which wakes a thread blocked reading it (the
    client's close, from another thread)."""
    if conn is not None:
        conn._closed = True
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
