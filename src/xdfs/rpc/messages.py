"""Wire messages of the xdfs RPC protocol (see docs/protocol.md).

A frame is ``u32 big-endian length | msgpack(Envelope)``. The envelope names the frame's
kind and request id; its ``body`` is the typed message of that kind (for requests and
responses, the method's declared struct). Bodies are decoded lazily (``msgspec.Raw``) so the
method can pick the right type before validating.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import Any, Final

import msgspec

#: Bumped on any incompatible change to framing, envelopes or the handshake.
PROTOCOL_VERSION: Final = 2

LENGTH_PREFIX = struct.Struct(">I")
#: Its size (Final: compiled modules use the literal).
LENGTH_PREFIX_BYTES: Final = 4
assert LENGTH_PREFIX.size == LENGTH_PREFIX_BYTES


class Kind(IntEnum):
    HELLO = 1  # client -> server, first frame: Hello
    WELCOME = 2  # server -> client, handshake accepted: Welcome
    REQUEST = 3  # unary or download call: method's request struct
    RESPONSE = 4  # unary reply: method's response struct
    ERROR = 5  # failure of call `id` (id 0: the connection itself): ErrorInfo
    HEAD = 6  # first frame of a stream: upload request or download head struct
    CHUNK = 7  # one piece of a stream's payload: Chunk
    TAIL = 8  # end of a stream: Tail
    CREDIT = 9  # receiver lets the sender have `count` more chunks: Credit
    CANCEL = 10  # caller abandons call `id` (no body)
    CHALLENGE = 11  # server -> client, a SCRAM login's server-first message: Challenge
    PROOF = 12  # client -> server, the SCRAM client-final message: Proof


#: The kinds as plain ints, for the per-frame paths: comparing with an ``IntEnum`` member
#: looks the member up on its class each time (~0.1 us), and msgspec encodes a member
#: through its slow path. (Final: compiled modules use the literal, with no lookup.)
K_HELLO: Final = 1
K_WELCOME: Final = 2
K_REQUEST: Final = 3
K_RESPONSE: Final = 4
K_ERROR: Final = 5
K_HEAD: Final = 6
K_CHUNK: Final = 7
K_TAIL: Final = 8
K_CREDIT: Final = 9
K_CANCEL: Final = 10
K_CHALLENGE: Final = 11
K_PROOF: Final = 12
assert [int(kind) for kind in Kind] == [
    K_HELLO, K_WELCOME, K_REQUEST, K_RESPONSE, K_ERROR, K_HEAD, K_CHUNK, K_TAIL, K_CREDIT, K_CANCEL,
    K_CHALLENGE, K_PROOF]


class OutEnvelope(msgspec.Struct, array_like=True, gc=False):
    """What we send: ``body`` is any struct, encoded in the same pass as the envelope."""

    kind: int
    id: int
    method: str
    body: Any = None


class OutCallEnvelope(msgspec.Struct, array_like=True, gc=False):
    """A REQUEST or HEAD frame of an :class:`~xdfs.rpc.client.RpcClient`: ``call`` numbers
    the logical call, and every retry of it (any connection, any address) carries the same
    number, so a server's retry cache can recognise it. Other frames, stream chunks above
    all, use :class:`OutEnvelope` and stay as they were (the body last)."""

    kind: int
    id: int
    method: str
    body: Any
    call: int


class InEnvelope(msgspec.Struct, array_like=True, gc=False):
    """What we receive: ``body`` stays raw msgpack until its type is known."""

    kind: int
    id: int
    method: str
    body: msgspec.Raw = msgspec.Raw()
    call: int = 0  # OutCallEnvelope's; 0 when the frame has none


#: Length of a client id (random bytes, as HDFS's 16-byte UUID clientId).
CLIENT_ID_BYTES: Final = 16


class Hello(msgspec.Struct, forbid_unknown_fields=True):
    protocol_version: int
    cluster_id: str = ""
    client_name: str = ""
    user: str = ""
    #: Local only, never sent: a connection given one logs ``user`` in with SCRAM-SHA-256
    #: (:mod:`xdfs.rpc.scram`) and sends the Hello with this emptied; a server refuses a
    #: Hello that carries one.
    password: str = ""
    token: str = ""
    #: Identifies the client process across its connections and addresses (empty, or
    #: CLIENT_ID_BYTES random bytes): with each call's ``call`` number, the key of a
    #: server's retry cache.
    client_id: bytes = b""
    #: The SCRAM client-first message (RFC 5802), when the client logs in with a password.
    scram: str = ""


class Challenge(msgspec.Struct, forbid_unknown_fields=True):
    """The SCRAM server-first message, and how the client turns its password into the
    SCRAM password first (:func:`xdfs.rpc.scram.prehash`; empty: it is used as it is)."""

    server_first: str
    prehash: str = ""


class Proof(msgspec.Struct, forbid_unknown_fields=True):
    """The SCRAM client-final message (the client's proof)."""

    client_final: str


class Welcome(msgspec.Struct):
    protocol_version: int
    cluster_id: str
    server_name: str
    user: str
    #: The SCRAM server-final message after a SCRAM login (the server's signature, which
    #: the client checks before it sends anything else).
    server_final: str = ""


class ErrorInfo(msgspec.Struct):
    code: int
    message: str


class Chunk(msgspec.Struct, array_like=True, gc=False):
    seq: int
    crc32c: int
    #: Decoded zero-copy; see RpcProtocol.on_stream_frame for when it must be copied out.
    data: memoryview


class Tail(msgspec.Struct, array_like=True):
    chunks: int
    total_bytes: int


class Credit(msgspec.Struct, array_like=True):
    count: int


class Empty(msgspec.Struct):
    """The body of methods that take or return nothing."""
