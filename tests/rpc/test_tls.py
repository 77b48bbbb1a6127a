"""TLS on RPC connections (xdfs.rpc.tls), with certificates made by trustme."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import trustme

from tests.rpc.wire import raw_peer
from xdfs.config import RpcConfig
from xdfs.errors import FrameTooLarge, ProtocolError, Unavailable, UnknownMethod
from xdfs.protocol.system import ECHO, PING, SINK, SOURCE, EchoRequest, SourceRequest
from xdfs.protocol.system_handlers import add_system_services
from xdfs.rpc.client import RpcClient
from xdfs.rpc.messages import Empty, Kind
from xdfs.rpc.server import RpcServer
from xdfs.rpc.sync import LoopThread
from xdfs.rpc.tls import client_context, server_context
from xdfs.testing.minicluster import MiniCluster


@dataclass
class Pki:
    server_config: RpcConfig  # tls_cert_file + tls_key_file
    client_config: RpcConfig  # tls_ca_file
    other_ca_config: RpcConfig  # a CA that did not sign the server's certificate


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    base: Path = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert_file, key_file = base / "server.pem", base / "server.key"
    cert.cert_chain_pems[0].write_to_path(cert_file)
    cert.private_key_pem.write_to_path(key_file)
    ca.cert_pem.write_to_path(base / "ca.pem")
    trustme.CA().cert_pem.write_to_path(base / "other-ca.pem")
    config = RpcConfig()
    return Pki(
        server_config=replace(config, tls_cert_file=str(cert_file), tls_key_file=str(key_file)),
        client_config=replace(config, tls_ca_file=str(base / "ca.pem"), tries_per_address=1),
        other_ca_config=replace(
            config, tls_ca_file=str(base / "other-ca.pem"), tries_per_address=1
        ),
    )


@pytest.fixture
async def tls_server(minicluster: MiniCluster, pki: Pki) -> AsyncIterator[RpcServer]:
    context = server_context(pki.server_config)
    assert context is not None
    server = RpcServer("tls", pki.server_config, ssl_context=context)
    add_system_services(server, "test", diagnostics=True)
    await server.start("127.0.0.1", 0)
    minicluster.servers.append(server)  # closed (and checked for leaks) with the cluster
    yield server


def tls_client(minicluster: MiniCluster, address: str, config: RpcConfig) -> RpcClient:
    client = RpcClient(address, config, ssl_context=client_context(config))
    minicluster.clients.append(client)
    return client


def test_contexts_are_none_without_files() -> None:
    assert server_context(RpcConfig()) is None
    assert client_context(RpcConfig()) is None


async def test_calls_and_streams_over_tls(
    minicluster: MiniCluster, tls_server: RpcServer, pki: Pki
) -> None:
    client = tls_client(minicluster, tls_server.address, pki.client_config)
    assert await client.call(PING, Empty()) == Empty()
    assert (await client.call(ECHO, EchoRequest(b"secret"))).payload == b"secret"
    data = bytes(range(256)) * 9000  # about 2.2 MiB, several chunks
    result = await client.upload(SINK, Empty(), [data])
    assert result.total_bytes == len(data)
    stream = await client.download(SOURCE, SourceRequest(3 << 20))
    assert await stream.read_all() == bytes(3 << 20)
    conn = await client.connection(tls_server.address)
    assert conn.transport is not None
    assert conn.transport.get_extra_info("ssl_object") is not None


async def test_inline_calls_over_tls(tls_server: RpcServer, pki: Pki) -> None:
    """A synchronous caller's calls (over a blocking TLS socket, see test_blocking)."""
    client = RpcClient(tls_server.address, pki.client_config,
                       ssl_context=client_context(pki.client_config))
    loop = LoopThread("tls-client", use_uvloop=False)

    def calls() -> list[bytes]:
        big = bytes(range(256)) * 1000  # an answer of several TLS records
        return [loop.run_inline(client.call(ECHO, EchoRequest(payload))).payload
                for payload in (b"secret", big, b"again")]

    try:
        answers = await asyncio.to_thread(calls)
        assert answers == [b"secret", bytes(range(256)) * 1000, b"again"]
        assert not client._connections  # nothing went through the loop
    finally:
        await asyncio.to_thread(loop.run, client.close())
        loop.close()


async def test_plain_client_against_tls_server_fails_fast(
    minicluster: MiniCluster, tls_server: RpcServer
) -> None:
    client = minicluster.client(tls_server.address, tries_per_address=1)
    with pytest.raises((Unavailable, ProtocolError)):
        await client.call(PING, Empty())
    # A raw plaintext peer is hung up on rather than left waiting.
    async with raw_peer(tls_server.address) as peer:
        peer.send(Kind.HELLO, 0, "", {"protocol_version": 1})
        await peer.expect_closed()


async def test_tls_client_against_plain_server_fails_fast(
    minicluster: MiniCluster, pki: Pki
) -> None:
    server = await minicluster.start_server("plain", [])
    client = tls_client(minicluster, server.address, pki.client_config)
    with pytest.raises((Unavailable, ProtocolError)):
        await client.call(PING, Empty())
    # The server saw a TLS ClientHello as an absurd frame length.
    async with raw_peer(server.address) as peer:
        peer.send_raw(b"\x16\x03\x01\x02\x00")
        await peer.expect_connection_error(FrameTooLarge)


async def test_server_certificate_from_an_unknown_ca_is_rejected(
    minicluster: MiniCluster, tls_server: RpcServer, pki: Pki
) -> None:
    client = tls_client(minicluster, tls_server.address, pki.other_ca_config)
    with pytest.raises(Unavailable, match=r"(?i)certificate"):
        await client.call(PING, Empty())
    # A verifying client still gets through afterwards.
    good = tls_client(minicluster, tls_server.address, pki.client_config)
    assert await good.call(PING, Empty()) == Empty()


async def test_tls_raw_peer_speaks_the_protocol(tls_server: RpcServer, pki: Pki) -> None:
    context = ssl.create_default_context(cafile=pki.client_config.tls_ca_file)
    async with raw_peer(tls_server.address, ssl=context, server_hostname="127.0.0.1") as peer:
        await peer.hello()
        peer.send(Kind.REQUEST, 1, "no_such_method", Empty())
        call_id, error = await peer.recv_error()
        assert (call_id, type(error)) == (1, UnknownMethod)
        peer.send_raw(b"\xff\xff\xff\xff")
        await peer.expect_connection_error(FrameTooLarge)
