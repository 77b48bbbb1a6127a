"""SCRAM-SHA-256 logins (issue 37 item 2): the password never travels, both sides prove
they know it, and a server that does not know it gets nothing and is refused."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import msgspec
import pytest

from tests.rpc.wire import RawPeer, raw_peer
from xdfs.client.client import AsyncClient
from xdfs.errors import (
    AuthenticationFailed,
    NotAuthenticated,
    ProtocolError,
    ServerNotAuthenticated,
)
from xdfs.protocol.system import PING
from xdfs.rpc import scram
from xdfs.rpc.blocking import BlockingConnection
from xdfs.rpc.connection import encode_frame
from xdfs.rpc.messages import (
    LENGTH_PREFIX,
    PROTOCOL_VERSION,
    Challenge,
    Empty,
    Hello,
    InEnvelope,
    Kind,
    Proof,
    Welcome,
)
from xdfs.rpc.secret_auth import SecretAuthenticator
from xdfs.rpc.server import RpcServer
from xdfs.testing.minicluster import MiniCluster

SECRET = "5e" * 32
USER = "jn"

_ENVELOPE = msgspec.msgpack.Decoder(InEnvelope)
_HELLO = msgspec.msgpack.Decoder(Hello)
_CHALLENGE = msgspec.msgpack.Decoder(Challenge)


def hello(password: str = SECRET, user: str = USER) -> Hello:
    return Hello(PROTOCOL_VERSION, user=user, password=password)


class Impostor:
    """A server that does not know the secret: it answers the HELLO with a challenge (of
    credentials it made up) and then welcomes the client with a forged signature (or, with
    ``challenge=False``, at once). Keeps every byte it received."""

    def __init__(self, challenge: bool = True) -> None:
        self.challenge = challenge
        self.received = bytearray()
        self.proofs = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _frame(self, reader: asyncio.StreamReader) -> InEnvelope:
        prefix = await reader.readexactly(LENGTH_PREFIX.size)
        payload = await reader.readexactly(LENGTH_PREFIX.unpack(prefix)[0])
        self.received += prefix + payload
        return _ENVELOPE.decode(payload)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            first = _HELLO.decode((await self._frame(reader)).body)
            if self.challenge:
                made_up = scram.credentials("not-the-secret", b"s" * 16)
                challenge = scram.ServerLogin(first.user, made_up).challenge(first.scram)
                writer.write(encode_frame(Kind.CHALLENGE, 0, "", challenge))
                await self._frame(reader)
                self.proofs += 1
                forged = "v=" + "QUFB" * 11
                writer.write(encode_frame(Kind.WELCOME, 0, "", Welcome(
                    PROTOCOL_VERSION, "", "impostor", first.user, forged)))
            else:
                writer.write(encode_frame(Kind.WELCOME, 0, "", Welcome(
                    PROTOCOL_VERSION, "", "impostor", first.user)))
            while True:  # whatever else the client sends
                await self._frame(reader)
        writer.close()

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()


@contextlib.asynccontextmanager
async def impostor(challenge: bool = True) -> AsyncIterator[tuple[Impostor, str]]:
    fake = Impostor(challenge)
    address = await fake.start()
    try:
        yield fake, address
    finally:
        await fake.close()


@pytest.mark.parametrize("challenge", [True, False])
async def test_a_server_that_does_not_know_the_secret_learns_nothing_and_is_refused(
    minicluster: MiniCluster, challenge: bool
) -> None:
    async with impostor(challenge) as (fake, address):
        client = minicluster.client(address, hello=hello(), tries_per_address=1)
        with pytest.raises(ServerNotAuthenticated):
            await client.call(PING, Empty())
        with pytest.raises(ServerNotAuthenticated):
            await asyncio.to_thread(
                BlockingConnection.open, address, minicluster.config.rpc, hello())
        await asyncio.sleep(0)
    assert fake.received  # it did get the logins
    assert SECRET.encode() not in bytes(fake.received)
    assert fake.proofs == (2 if challenge else 0)
    # nothing but the handshake: no call reached it
    frames = bytes(fake.received)
    assert b"ping" not in frames


@pytest.fixture
async def secret_server(minicluster: MiniCluster) -> RpcServer:
    return await minicluster.start_server(
        "jn", [], authenticator=SecretAuthenticator(USER, SECRET))


async def test_the_right_secret_logs_in_on_both_clients_and_never_travels(
    minicluster: MiniCluster, secret_server: RpcServer
) -> None:
    client = minicluster.client(secret_server.address, hello=hello())
    await client.call(PING, Empty())
    assert client.authenticated_user == USER
    conn = await asyncio.to_thread(
        BlockingConnection.open, secret_server.address, minicluster.config.rpc, hello())
    assert conn.welcome is not None and conn.welcome.user == USER
    conn.close()


@pytest.mark.parametrize("who", [("wrong-secret", USER), (SECRET, "mallory"), ("", USER)])
async def test_a_wrong_secret_or_user_fails_typed(
    minicluster: MiniCluster, secret_server: RpcServer, who: tuple[str, str]
) -> None:
    password, user = who
    client = minicluster.client(secret_server.address, hello=hello(password, user),
                                tries_per_address=1)
    with pytest.raises(AuthenticationFailed) as caught:
        await client.call(PING, Empty())
    assert type(caught.value) is AuthenticationFailed
    with pytest.raises(AuthenticationFailed):
        await asyncio.to_thread(BlockingConnection.open, secret_server.address,
                                minicluster.config.rpc, hello(password, user))
    await client_still_logs_in(minicluster, secret_server.address)


async def client_still_logs_in(minicluster: MiniCluster, address: str) -> None:
    await minicluster.client(address, hello=hello()).call(PING, Empty())


async def test_a_password_in_the_hello_is_refused(
    minicluster: MiniCluster, secret_server: RpcServer
) -> None:
    async with raw_peer(secret_server.address) as peer:
        peer.send(Kind.HELLO, 0, "", hello())
        await peer.expect_connection_error(AuthenticationFailed)


async def _challenged(peer: RawPeer, login: scram.ClientLogin) -> Proof:
    peer.send(Kind.HELLO, 0, "", login.hello)
    envelope = await peer.recv()
    assert envelope.kind == Kind.CHALLENGE, envelope
    return login.answer(_CHALLENGE.decode(envelope.body))


async def test_a_replayed_or_truncated_exchange_fails_typed_and_the_server_goes_on(
    minicluster: MiniCluster, secret_server: RpcServer
) -> None:
    # an eavesdropper's copy of a good exchange: its proof answers another challenge
    async with raw_peer(secret_server.address) as peer:
        first = scram.ClientLogin(hello())
        recorded = await _challenged(peer, first)
    async with raw_peer(secret_server.address) as peer:
        peer.send(Kind.HELLO, 0, "", first.hello)  # the same client-first again
        envelope = await peer.recv()
        assert envelope.kind == Kind.CHALLENGE
        peer.send(Kind.PROOF, 0, "", recorded)
        await peer.expect_connection_error(AuthenticationFailed)
    # truncated: the client hangs up after the challenge, or sends a call instead
    async with raw_peer(secret_server.address) as peer:
        await _challenged(peer, scram.ClientLogin(hello()))
    async with raw_peer(secret_server.address) as peer:
        await _challenged(peer, scram.ClientLogin(hello()))
        peer.send(Kind.REQUEST, 1, "ping", Empty())
        await peer.expect_connection_error(ProtocolError)
    # a garbled client-first message
    async with raw_peer(secret_server.address) as peer:
        peer.send(Kind.HELLO, 0, "", Hello(PROTOCOL_VERSION, user=USER, scram="n,,junk"))
        await peer.expect_connection_error(AuthenticationFailed)
    await client_still_logs_in(minicluster, secret_server.address)


async def test_a_login_that_never_proves_is_closed_at_the_handshake_deadline(
    minicluster: MiniCluster,
) -> None:
    server = await minicluster.start_server(
        "jn2", [], authenticator=SecretAuthenticator(USER, SECRET), handshake_timeout_s=0.2)
    async with raw_peer(server.address) as peer:
        await _challenged(peer, scram.ClientLogin(hello()))
        error = await peer.expect_connection_error(NotAuthenticated)
        assert "deadline" in str(error)


def test_a_challenge_may_not_ask_for_a_huge_prehash() -> None:
    with pytest.raises(ProtocolError):
        scram.prehash("scrypt:1073741824:8:1", "pw", b"s" * 16)
    with pytest.raises(ProtocolError):
        scram.prehash("argon9:1:1:1", "pw", b"s" * 16)


def test_a_hello_never_carries_the_password_and_a_token_logs_in_alone() -> None:
    with_token = scram.ClientLogin(Hello(PROTOCOL_VERSION, user=USER, password=SECRET,
                                         token="a-token"))
    assert not with_token.uses_scram and with_token.hello.password == ""
    assert with_token.hello.token == "a-token" and not with_token.hello.scram
    by_password = scram.ClientLogin(hello())
    assert by_password.hello.password == "" and by_password.hello.scram.startswith("n,,n=jn,r=")


async def test_the_login_call_sends_no_password_either() -> None:
    async with impostor() as (fake, address):
        client = AsyncClient(f"xdfs://{address}", user="", password="", token="")
        try:
            with pytest.raises(ServerNotAuthenticated):
                await client.login("alice", "alice-secret-pw")
        finally:
            await client.close()
    assert fake.received and b"alice-secret-pw" not in bytes(fake.received)
