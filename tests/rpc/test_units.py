"""Pure helpers: retry backoff, address parsing, the sync facade, and the MiniCluster harness."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xdfs.common.addresses import format_address, format_fs_uri, parse_address, parse_fs_uri
from xdfs.errors import ConfigError, InvalidArgument
from xdfs.protocol.system import PING
from xdfs.rpc.client import backoff_s
from xdfs.rpc.messages import Empty
from xdfs.rpc.sync import LoopThread
from xdfs.testing.minicluster import MiniCluster

# -- backoff -----------------------------------------------------------------------------------


def test_backoff_sequence() -> None:
    assert [backoff_s(n, 0.05, 2.0) for n in range(9)] == [
        0.0, 0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0,
    ]
    assert backoff_s(-1, 0.05, 2.0) == 0.0
    assert backoff_s(10_000, 0.05, 2.0) == 2.0  # no overflow for absurd try numbers


@given(
    n=st.integers(0, 200),
    initial=st.floats(0.001, 10, allow_nan=False),
    cap=st.floats(0.001, 100, allow_nan=False),
)
def test_backoff_properties(n: int, initial: float, cap: float) -> None:
    delay = backoff_s(n, initial, cap)
    assert isinstance(delay, float)
    assert 0.0 <= delay <= cap
    assert backoff_s(n + 1, initial, cap) >= delay  # never shrinks
    if n >= 1 and initial * 2 ** (n - 1) <= cap:
        assert delay == pytest.approx(initial * 2 ** (n - 1))


# -- addresses ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("localhost:8020", ("localhost", 8020)),
        ("10.0.0.1:1", ("10.0.0.1", 1)),
        ("[::1]:8020", ("::1", 8020)),
        ("[fe80::1:2]:65535", ("fe80::1:2", 65535)),
        ("  nn.example.com:9000 \n", ("nn.example.com", 9000)),
        ("h:0", ("h", 0)),
    ],
)
def test_parse_address(text: str, expected: tuple[str, int]) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "host", "host:", ":8020", "host:http", "host:-1", "host:65536", "host:1.5",
     "[::1]", "host:80:", "host: 80"],
)
def test_parse_address_rejects(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_address(text)


@pytest.mark.parametrize(
    "text",
    [
        "::1",  # an unbracketed IPv6 host: was read as host ':' port 1
        "::1:80",  # ambiguous without brackets
        "[::1:80",  # unbalanced bracket: was kept in the host
        "::1]:80",
        "[]:80",  # empty host
        "host:\u00b2",  # a digit to str.isdigit(), but int() raised ValueError
    ],
)
def test_parse_address_rejects_ambiguous_input(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_address(text)


@given(
    host=st.one_of(
        st.from_regex(r"[a-z][a-z0-9-]{0,20}(\.[a-z][a-z0-9-]{0,10}){0,3}", fullmatch=True),
        st.ip_addresses().map(str),
    ),
    port=st.integers(0, 65535),
)
def test_format_then_parse_address_round_trips(host: str, port: int) -> None:
    assert parse_address(format_address(host, port)) == (host, port)


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("xdfs://nn1:8020", ["nn1:8020"]),
        ("xdfs://nn1:8020,nn2:8020/user/alice/file", ["nn1:8020", "nn2:8020"]),
        ("xdfs://[::1]:8020,[fe80::2]:9/x", ["[::1]:8020", "[fe80::2]:9"]),
        ("nn1:1,nn2:2", ["nn1:1", "nn2:2"]),
        ("xdfs://a:1,,b:2", ["a:1", "b:2"]),
        ("  xdfs://a:1/  ", ["a:1"]),
    ],
)
def test_parse_fs_uri(uri: str, expected: list[str]) -> None:
    assert parse_fs_uri(uri) == expected
    assert parse_fs_uri(format_fs_uri(expected)) == expected


@pytest.mark.parametrize(
    "uri",
    ["", "xdfs://", "xdfs:///path", "hdfs://nn:8020", "http://nn:80/", "xdfs://nn1:8020,nn2",
     "xdfs://nn", "xdfs://[::1]/x", "xdfs://nn:99999", ","],
)
def test_parse_fs_uri_rejects(uri: str) -> None:
    with pytest.raises(ConfigError):
        parse_fs_uri(uri)


@given(st.one_of(
    st.text(max_size=40),
    st.text(alphabet="xdfs:/[]0123456789a,.\u00b2\u0660 ", max_size=40),
))
def test_parse_fs_uri_raises_only_config_error(text: str) -> None:
    try:
        addresses = parse_fs_uri(text)
    except ConfigError:
        return
    assert addresses
    for address in addresses:
        parse_address(address)


# -- sync facade -------------------------------------------------------------------------------


def test_loop_thread_runs_coroutines_and_propagates_errors() -> None:
    async def add(a: int, b: int) -> int:
        await asyncio.sleep(0)
        return a + b

    async def fail() -> None:
        raise InvalidArgument("bad")

    with LoopThread(use_uvloop=False) as loop:
        assert loop.run(add(2, 3)) == 5
        with pytest.raises(InvalidArgument, match="bad"):
            loop.run(fail())
    loop.close()  # closing twice is fine
    assert loop.loop.is_closed()


def test_loop_thread_drives_an_rpc_client(tmp_path: Path) -> None:
    async def serve_and_call() -> Empty:
        async with MiniCluster(tmp_path, deadline_s=30) as cluster:
            server = await cluster.start_server("sync", [])
            return await cluster.client(server.address).call(PING, Empty())

    with LoopThread() as loop:  # uvloop when installed, as the CLI runs
        assert loop.run(serve_and_call()) == Empty()


# -- the MiniCluster harness ---------------------------------------------------------------------


async def test_minicluster_reports_a_leaked_task(tmp_path: Path) -> None:
    never = asyncio.Event()
    leaked: asyncio.Task[bool] | None = None
    try:
        with pytest.raises(AssertionError, match="leaked tasks") as info:
            async with MiniCluster(tmp_path, deadline_s=30):
                leaked = asyncio.create_task(never.wait(), name="the-leaked-task")
        assert "the-leaked-task" in str(info.value)
        assert leaked is not None
        assert not leaked.done()
    finally:
        if leaked is not None:
            leaked.cancel()
            with pytest.raises(asyncio.CancelledError):
                await leaked


async def test_minicluster_accepts_tasks_that_finish_in_time(tmp_path: Path) -> None:
    async with MiniCluster(tmp_path, deadline_s=30) as cluster:
        server = await cluster.start_server("s", [])
        await cluster.client(server.address).call(PING, Empty())
        asyncio.create_task(asyncio.sleep(0.05))  # noqa: RUF006 - ends during the grace period
    assert not cluster.servers
    assert not cluster.clients


async def test_minicluster_closes_servers_and_clients(tmp_path: Path) -> None:
    async with MiniCluster(tmp_path, deadline_s=30) as cluster:
        server = await cluster.start_server("s", [])
        client = cluster.client(server.address)
        await client.call(PING, Empty())
        conn = await client.connection(server.address)
    assert conn.is_closing
    assert not server.connections


async def test_minicluster_deadline_cancels_the_body(tmp_path: Path) -> None:
    task = asyncio.current_task()
    assert task is not None
    with pytest.raises(asyncio.CancelledError):
        async with MiniCluster(tmp_path, deadline_s=0.2):
            await asyncio.sleep(30)
    task.uncancel()


async def test_minicluster_deadline_works_when_entered_by_a_fixture(tmp_path: Path) -> None:
    # pytest-asyncio runs an async fixture's setup in a task of its own, which is done long
    # before the deadline; the test body runs in another task that must still be cancelled.
    cluster = MiniCluster(tmp_path, deadline_s=0.2)
    await asyncio.create_task(cluster.__aenter__())

    async def body() -> None:
        await asyncio.sleep(30)

    test_task = asyncio.create_task(body())
    with pytest.raises(asyncio.CancelledError):
        await test_task
    await asyncio.create_task(cluster.__aexit__(None, None, None))
