"""HTTP connections are bounded (per server, per source address) and a connection whose
request headers do not come is closed, with real sockets against a real NameNode, while
its RPC port keeps answering."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import ExitStack
from urllib.parse import urlsplit

import pytest
import requests

from tests.integration.conftest import ROOT, ROOT_PW
from tests.webhdfs.conftest import WebCluster, start_web_cluster
from xdfs.client.client import AsyncClient
from xdfs.common.addresses import parse_address

PER_ADDRESS = 6
TOTAL = 10
#: Long enough for the test to fill the caps on a loaded machine before it fires.
HEADER_TIMEOUT_S = 5.0
#: A header line, then nothing: the half-open request of a slowloris.
HALF_OPEN = b"GET /webhdfs/v1/?op=LISTSTATUS HTTP/1.1\r\n"


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebCluster]:
    yield from start_web_cluster(
        tmp_path_factory.mktemp("caps"), connections_max=TOTAL,
        connections_per_address_max=PER_ADDRESS, header_timeout_s=HEADER_TIMEOUT_S,
        body_idle_timeout_s=1.0)


def _half_open(web: WebCluster, source: str, stack: ExitStack) -> socket.socket:
    sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
    sock.settimeout(30)
    sock.bind((source, 0))  # 127.0.0.0/8 is all loopback: one address per "client"
    sock.connect(parse_address(web.http))
    sock.sendall(HALF_OPEN)
    return sock


def _closed_by_server(sock: socket.socket) -> bytes:
    """What the server sent before it closed ``sock`` (b"" for a plain close)."""
    received = b""
    try:
        while chunk := sock.recv(4096):
            received += chunk
    except ConnectionResetError:
        pass
    return received


def _still_open(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1) == b"never"  # nothing to read: BlockingIOError
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.setblocking(True)
        sock.settimeout(30)


def _rpc_answers(web: WebCluster) -> bool:
    async def stat() -> bool:
        client = AsyncClient(f"xdfs://{web.rpc}", user=ROOT, password=ROOT_PW)
        try:
            return (await client.stat("/")).is_dir
        finally:
            await client.close()

    return bool(web.run(stat()))


def test_connections_over_the_caps_are_refused_and_rpc_answers(capped: WebCluster) -> None:
    with ExitStack() as stack:
        first = [_half_open(capped, "127.0.0.2", stack) for _ in range(PER_ADDRESS)]
        over_address = _half_open(capped, "127.0.0.2", stack)
        assert b" 503 " in _closed_by_server(over_address)
        second = [_half_open(capped, "127.0.0.3", stack) for _ in range(TOTAL - PER_ADDRESS)]
        over_total = _half_open(capped, "127.0.0.4", stack)
        assert b" 503 " in _closed_by_server(over_total)
        assert all(_still_open(sock) for sock in first + second)
        assert _rpc_answers(capped)
        # the half-open ones are closed once their headers are overdue ...
        for sock in first + second:
            assert _closed_by_server(sock) == b""
    # ... which frees their places
    answer = requests.get(f"{capped.url}/", params={"op": "LISTSTATUS"},
                          auth=(ROOT, ROOT_PW), timeout=60)
    assert answer.status_code == 200, answer.text


def test_a_request_within_the_timeout_is_served_on_a_kept_connection(
        capped: WebCluster) -> None:
    with requests.Session() as session:
        for _ in range(3):
            answer = session.get(f"{capped.url}/", params={"op": "GETFILESTATUS"},
                                 auth=(ROOT, ROOT_PW), timeout=60)
            assert answer.status_code == 200


def test_a_stalled_body_is_cut_and_leaves_no_file(capped: WebCluster) -> None:
    path = "/stalled-body"
    location = capped.call("PUT", path, "CREATE", allow_redirects=False).headers["Location"]
    parts = urlsplit(location)
    with socket.create_connection(parse_address(parts.netloc), timeout=30) as sock:
        sock.sendall(f"PUT {parts.path}?{parts.query} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
                     "Content-Length: 100000\r\n\r\n".encode() + b"only this")
        answer = _closed_by_server(sock)
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
    assert b"no byte of the request body" in answer
    assert capped.call("GET", path, "GETFILESTATUS").status_code == 404
