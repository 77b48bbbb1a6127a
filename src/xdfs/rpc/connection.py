"""Frame I/O, write flow control and stream bookkeeping shared by both ends of a connection.

Subclasses (:class:`~xdfs.rpc.server_connection.ServerConnection`,
:class:`~xdfs.rpc.client_connection.ClientConnection`) implement :meth:`RpcProtocol.on_envelope`.
Anything wrong with what the peer sent either fails that one call (wrong body type, unknown
method) or, when the byte stream itself can no longer be trusted (oversized or undecodable
frame, protocol violation), sends one connection-level error and closes. No input a peer can
send escapes as an exception into the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from typing import Any, Final, cast

import msgspec
from mypy_extensions import mypyc_attr

from xdfs.config import RpcConfig
from xdfs.errors import ConnectionLost, InternalError, InvalidArgument, ProtocolError, XdfsError
from xdfs.rpc.framing import FrameReader
from xdfs.rpc.messages import (
    K_CHUNK,
    K_ERROR,
    K_RESPONSE,
    K_TAIL,
    LENGTH_PREFIX,
    LENGTH_PREFIX_BYTES,
    Chunk,
    Credit,
    ErrorInfo,
    InEnvelope,
    OutCallEnvelope,
    OutEnvelope,
    Tail,
)
from xdfs.rpc.streams import StreamReceiver, StreamSender

log = logging.getLogger(__name__)

# (Final: in the compiled module, a C static instead of a dict lookup per frame.)
_ENVELOPE: Final = msgspec.msgpack.Decoder(InEnvelope)
_ENCODER: Final = msgspec.msgpack.Encoder()
_LENGTH_PREFIX: Final = LENGTH_PREFIX
CHUNK_DECODER: Final = msgspec.msgpack.Decoder(Chunk)
TAIL_DECODER: Final = msgspec.msgpack.Decoder(Tail)
CREDIT_DECODER: Final = msgspec.msgpack.Decoder(Credit)
ERROR_DECODER: Final = msgspec.msgpack.Decoder(ErrorInfo)

#: What decoding a peer's bytes can raise: malformed msgpack or a wrong type, and invalid
#: UTF-8 in a string (for which msgspec raises UnicodeDecodeError, not DecodeError).
DECODE_ERRORS: Final = (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError)


def decode_error(exc: Exception, error_type: type[XdfsError], what: str) -> XdfsError:
    """The typed error for a failed decode of a peer's message (the one place that maps
    them): ``InvalidArgument`` when a string is not valid UTF-8 (the content is bad, not the
    framing), else ``error_type``."""
    if isinstance(exc, UnicodeDecodeError):
        return InvalidArgument(f"{what}: a string is not valid UTF-8 ({exc.reason})")
    return error_type(f"{what}: {exc}")


def encode_frame(
    kind: int, call_id: int, method: str, body: Any, logical_call: int = 0
) -> bytearray:
    """One complete frame (length prefix included) in a fresh buffer."""
    buf = bytearray()
    append_frame(buf, kind, call_id, method, body, logical_call)
    return buf


_ZERO_PREFIX: Final = bytes(LENGTH_PREFIX_BYTES)


def append_frame(
    buf: bytearray, kind: int, call_id: int, method: str, body: Any, logical_call: int = 0
) -> None:
    """Append one complete frame to ``buf`` (frames sent together go out as one buffer,
    not one each)."""
    start = len(buf)
    buf += _ZERO_PREFIX
    envelope = (
        OutCallEnvelope(kind, call_id, method, body, logical_call)
        if logical_call
        else OutEnvelope(kind, call_id, method, body)
    )
    _ENCODER.encode_into(envelope, buf, start + LENGTH_PREFIX_BYTES)
    _LENGTH_PREFIX.pack_into(buf, start, len(buf) - start - LENGTH_PREFIX_BYTES)


_NO_DATA = memoryview(b"")
_BIN8, _BIN16, _BIN32 = struct.Struct(">BB"), struct.Struct(">BH"), struct.Struct(">BI")


def encode_chunk_head(call_id: int, chunk: Chunk) -> bytearray:
    """The frame of a CHUNK up to its data, which is written right after it, uncopied.

    The bytes are exactly those of :func:`encode_frame`: the chunk's data is the last field
    of the envelope, so the envelope encoded with empty data ends in the msgpack header of
    an empty ``bin``, which is replaced by the real one.
    """
    size = chunk.data.nbytes
    buf = encode_frame(K_CHUNK, call_id, "", Chunk(chunk.seq, chunk.crc32c, _NO_DATA))
    del buf[-2:]  # 0xc4 0x00: bin 8 of length 0
    if size < 1 << 8:
        buf += _BIN8.pack(0xC4, size)
    elif size < 1 << 16:
        buf += _BIN16.pack(0xC5, size)
    else:
        buf += _BIN32.pack(0xC6, size)
    LENGTH_PREFIX.pack_into(buf, 0, len(buf) - LENGTH_PREFIX.size + size)
    return buf


def _immutable(data: memoryview) -> bool:
    """Whether ``data`` views ``bytes``, which the transport may keep without a copy."""
    return isinstance(data.obj, bytes) and data.c_contiguous


# Compiled (xdfs.common.native): the client's connection and tests subclass it in Python.
@mypyc_attr(allow_interpreted_subclasses=True)
class RpcProtocol(asyncio.BufferedProtocol):
    def __init__(
        self, config: RpcConfig, *, frame_bytes_max: int = 0, buffer_bytes: int = 0
    ) -> None:
        """``frame_bytes_max`` / ``buffer_bytes``: start with these instead of the configured
        ones (a server's connections start small until the peer authenticates)."""
        self.config = config
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self._reader = FrameReader(
            frame_bytes_max or config.frame_bytes_max, buffer_bytes or config.receive_buffer_bytes
        )
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._closed = asyncio.get_running_loop().create_future()
        self._payload_is_shared = True
        #: Small frames sent during this loop turn, written together at its end (one
        #: socket write for every reply a turn produces: see :meth:`send`).
        self._out: list[bytes | bytearray | memoryview] = []
        #: The last buffer of ``_out`` when frames may still be appended to it (one
        #: buffer for a run of small frames instead of one each); None after a chunk's
        #: data and after a flush (the transport may still hold what it was given).
        self._out_tail: bytearray | None = None
        self._receiving = False
        #: Set by a server connection: replies sent outside a receive (calls that awaited,
        #: answered together when a group commit wakes them) are written once per loop turn.
        self._reply_loop: asyncio.AbstractEventLoop | None = None
        self._flush_pending = False
        self.senders: dict[int, StreamSender] = {}
        self.receivers: dict[int, StreamReceiver] = {}
        #: Receivers opened during this read whose window grant waits for its end: a
        #: stream whose tail came in the same read needs none (see :meth:`grant_window`).
        self._grants: list[StreamReceiver] = []
        #: Frames one read may hand on in one loop turn (0: all of them; see _dispatch).
        self.frames_per_turn = 0

    @property
    def buffer_bytes_held(self) -> int:
        """Bytes of receive buffers this connection holds now (for limits and tests)."""
        return self._reader.allocated_bytes

    # -- transport callbacks ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        transport = cast(asyncio.Transport, transport)
        self.transport = transport
        high = self.config.write_buffer_high_bytes
        transport.set_write_buffer_limits(high=high, low=high // 4)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._reader.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self._dispatch(nbytes)

    def _dispatch(self, nbytes: int, held: list[memoryview] | None = None) -> None:
        """Decode and hand on the frames the last ``nbytes`` read completed (or those
        ``held`` from an earlier read), at most ``frames_per_turn`` of them in this loop
        turn: the rest wait (:meth:`hold`)."""
        self._receiving = True
        try:
            payloads = self._reader.feed(nbytes) if held is None else held
            shared = self._reader.shared_buffer
            transport = self.transport
            assert transport is not None  # set before the first read, never unset
            limit = self.frames_per_turn
            if limit and len(payloads) > limit:
                self.hold(payloads[limit:])
                payloads = payloads[:limit]
            for payload in payloads:
                if transport.is_closing():
                    return
                try:
                    envelope = _ENVELOPE.decode(payload)
                except DECODE_ERRORS as exc:
                    raise decode_error(exc, ProtocolError, "undecodable frame") from None
                # Payloads cut from the shared receive buffer are overwritten by the next
                # recv; oversized frames own their buffer and can be handed on uncopied.
                self._payload_is_shared = payload.obj is shared
                self.on_envelope(envelope)
        except XdfsError as exc:
            self.abort_with(exc)
        except Exception as exc:  # a bug must cost one connection, never the server
            log.exception("unexpected error handling a frame from %s", self.peer)
            self.abort_with(InternalError(f"{type(exc).__name__}: {exc}"))
        finally:
            if self._grants:
                self._send_grants()
            self._receiving = False
            self.flush()

    def hold(self, payloads: list[memoryview]) -> None:
        """Keep frames of this read for a later loop turn (a subclass with a
        ``frames_per_turn`` pauses reading meanwhile: they view the receive buffer)."""
        raise NotImplementedError

    def eof_received(self) -> bool | None:
        return None  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self._out = []
        self._out_tail = None
        if not self._closed.done():
            self._closed.set_result(None)
        self._can_write.set()
        lost = ConnectionLost(f"connection to {self.peer} closed" + (f": {exc}" if exc else ""))
        for sender in self.senders.values():
            sender.fail(lost)
        for receiver in self.receivers.values():
            receiver.fail(lost)
        self.senders.clear()
        self.receivers.clear()
        self.on_connection_lost(lost)

    def pause_writing(self) -> None:
        self._can_write.clear()
        self.on_write_paused()

    def resume_writing(self) -> None:
        self._can_write.set()
        self.on_write_resumed()

    # -- hooks for subclasses -----------------------------------------------------------

    def on_envelope(self, envelope: InEnvelope) -> None:
        raise NotImplementedError

    def on_connection_lost(self, error: ConnectionLost) -> None:
        pass

    def on_write_paused(self) -> None:
        pass

    def on_write_resumed(self) -> None:
        pass

    # -- sending ------------------------------------------------------------------------

    @property
    def is_closing(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed)

    def send(
        self, kind: int, call_id: int, method: str, body: Any, logical_call: int = 0
    ) -> None:
        """``logical_call``: the number every retry of this call carries (REQUEST, HEAD)."""
        if not self._receiving and self.is_closing:
            # (While receiving, what is queued is dropped by flush if the connection
            # closed meanwhile: one check per read, not per frame.)
            return  # connection_lost fails whoever is waiting
        if kind == K_CHUNK and isinstance(body, Chunk) and _immutable(body.data):
            # Bulk data goes to the socket without being copied into the frame first
            # (one writelines: a single writev, as one frame was).
            head = encode_chunk_head(call_id, body)
            if self._receiving:
                self._out += (head, body.data)
                self._out_tail = None  # what follows goes after the data
            else:
                assert self.transport is not None
                self.transport.writelines((head, body.data))
            return
        if self._receiving:
            # Sent while handling what one read brought (a batch of requests answered at
            # once, their credits): queued and written in one go when the batch is done,
            # not one system call each. Deferring to a later loop turn instead would cost
            # every lone call an extra turn of the loop, more than the write it saves.
            self.queue(kind, call_id, method, body, logical_call)
            return
        if (
            self._reply_loop is not None
            and kind in (K_RESPONSE, K_ERROR)
            and (self._out or self.replies_may_follow())
        ):
            # A reply from a call's task: the tasks a group commit wakes all run in one
            # loop turn, so their replies go out in one write at its end instead of one
            # system call each. (Only replies: stream frames keep their flow control.)
            # The answer of the connection's only call leaves at once: nothing could
            # join it, and waiting would cost it a loop turn.
            self.queue(kind, call_id, method, body, logical_call)
            if not self._flush_pending:
                self._flush_pending = True
                self._reply_loop.call_soon(self._flush_replies)
            return
        assert self.transport is not None
        self.transport.write(encode_frame(kind, call_id, method, body, logical_call))

    def queue(self, kind: int, call_id: int, method: str, body: Any, logical_call: int) -> None:
        """Add a small frame to what :meth:`flush` writes next, in the buffer of the frames
        queued just before it when there is one."""
        tail = self._out_tail
        if tail is None:
            tail = self._out_tail = bytearray()
            self._out.append(tail)
        append_frame(tail, kind, call_id, method, body, logical_call)

    def replies_may_follow(self) -> bool:
        """Whether other calls of this connection may answer in this loop turn (a server
        connection knows; see :meth:`send`)."""
        return True

    def _flush_replies(self) -> None:
        self._flush_pending = False
        self.flush()

    def flush(self) -> None:
        """Write the frames :meth:`send` queued while receiving (in their order)."""
        out = self._out
        if not out:
            return
        self._out = []
        self._out_tail = None
        if self.is_closing:
            return
        assert self.transport is not None
        if len(out) == 1:
            self.transport.write(out[0])
        else:
            self.transport.writelines(out)

    def grant_window(self, receiver: StreamReceiver) -> None:
        """Grant a new receiver's window: at the end of the read that opened it, and only
        if its tail has not come too (a small upload's head, chunk and tail arrive in one
        read; its sender, which sent its one chunk ahead of the grant, never needs it: the
        grant would cost this end a write and the sender a wake-up for nothing)."""
        if self._receiving:
            self._grants.append(receiver)
        else:
            receiver.grant_window()

    def _send_grants(self) -> None:
        grants, self._grants = self._grants, []
        for receiver in grants:
            if not receiver.tail_received:
                receiver.grant_window()

    def send_error(self, call_id: int, error: XdfsError) -> None:
        self.send(K_ERROR, call_id, "", ErrorInfo(error.code, error.message))

    async def drain(self) -> None:
        """Wait while the socket's write buffer is above its high-water mark."""
        if not self._can_write.is_set():
            await self._can_write.wait()
        if self._closed.done():
            raise ConnectionLost(f"connection to {self.peer} closed")

    def abort_with(self, error: XdfsError) -> None:
        """Tell the peer why (connection-level error, id 0), then close."""
        if self.is_closing:
            return
        log.info("closing connection %s: %s", self.peer, error.message)
        self.send_error(0, error)
        self.close()

    def close(self) -> None:
        """Close after writing what is queued (the transport flushes its own buffer)."""
        if self.transport is not None and not self.transport.is_closing():
            self.flush()
            self.transport.close()

    # -- stream frames, the same for both directions ------------------------------------

    def on_stream_frame(self, envelope: InEnvelope) -> None:
        """Route CHUNK, TAIL and CREDIT frames to their stream (late frames are dropped)."""
        try:
            if envelope.kind == K_CHUNK:
                receiver = self.receivers.get(envelope.id)
                if receiver is not None:
                    chunk = CHUNK_DECODER.decode(envelope.body)
                    if self._payload_is_shared:
                        chunk.data = memoryview(bytes(chunk.data))
                    receiver.on_chunk(chunk)
            elif envelope.kind == K_TAIL:
                receiver = self.receivers.get(envelope.id)
                if receiver is not None:
                    receiver.on_tail(TAIL_DECODER.decode(envelope.body))
            else:
                sender = self.senders.get(envelope.id)
                credit = CREDIT_DECODER.decode(envelope.body)
                if sender is not None and credit.count > 0:
                    sender.on_credit(credit.count)
        except DECODE_ERRORS as exc:
            raise decode_error(exc, ProtocolError, "bad stream frame") from None
