"""Issue 17 item 8: strangers on a NameNode's port. Idle, half-sent and pipelined sockets of
peers that never authenticate must cost little, go away, and never lock a real client
out; password guessing is capped, throttled, then locked out, with one log line.

Hostile sockets connect from 127.0.0.2, real clients from 127.0.0.1: password checks and
failures are counted per client host, so the hostile host's limits are its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.rpc.wire import RawPeer
from xdfs.common.process import ProcessGroup, ServerProcess
from xdfs.errors import (
    AuthenticationFailed,
    FrameTooLarge,
    LockedOut,
    LoginThrottled,
    Overloaded,
    ProtocolError,
    XdfsError,
)
from xdfs.protocol import namenode as p
from xdfs.rpc.connection import encode_frame
from xdfs.rpc.messages import LENGTH_PREFIX, Kind
from xdfs.rpc.server_connection import UNAUTHENTICATED_BUFFER_BYTES
from xdfs.testing.minicluster import MiniCluster
from xdfs.testing.poll import eventually

from .conftest import ROOT, ROOT_PW, connect, run_xdfs

HOSTILE_HOST = "127.0.0.2"
KiB, MiB = 1 << 10, 1 << 20


async def hostile(address: str, *, hello: bool = True) -> RawPeer:
    """A raw socket from the hostile host, anonymous after its HELLO (when ``hello``)."""
    peer = await RawPeer.connect(address, local_addr=(HOSTILE_HOST, 0))
    if hello:
        await peer.hello()
    return peer


@contextlib.asynccontextmanager
async def peers_closed_at_exit() -> AsyncIterator[list[RawPeer]]:
    peers: list[RawPeer] = []
    try:
        yield peers
    finally:
        for peer in peers:
            peer.writer.transport.abort()


async def start_namenode(
    processes: ProcessGroup, tmp_path: Path, *overrides: str
) -> tuple[ServerProcess, str]:
    env = {"XDFS_USER": ROOT, "XDFS_PASSWORD": ROOT_PW}
    name_dir = tmp_path / "nn"
    code, _out, err = await run_xdfs("namenode", "--name-dir", str(name_dir), "-format", env=env)
    assert code == 0, err
    options = [arg for override in overrides for arg in ("-D", override)]
    proc = await asyncio.to_thread(
        processes.start_xdfs, "nn", *options, "namenode", "--name-dir", str(name_dir),
        "--rpc-address", "127.0.0.1:0", ready_pattern=r"namenode serving on (\S+)", env=env,
    )
    assert proc.match is not None
    return proc, proc.match.group(1)


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * KiB
    raise AssertionError("no VmRSS")


def login_frame(call_id: int, user: str, password: str) -> bytes:
    return bytes(encode_frame(Kind.REQUEST, call_id, p.LOGIN.name, p.LoginRequest(user, password)))


async def test_hostile_sockets_cost_little_and_never_lock_a_real_client_out(
    processes: ProcessGroup, tmp_path: Path
) -> None:
    nn, address = await start_namenode(
        processes, tmp_path, "rpc.connections_max=256", "rpc.handshake_timeout_s=120",
        "rpc.unauthenticated_idle_timeout_s=120",
    )
    async with connect(address, ROOT, ROOT_PW) as warm:
        await warm.mkdirs("/before")
        rss_before = rss_bytes(nn.pid)
    async with peers_closed_at_exit() as peers:
        # 100 that connect and say nothing, 100 anonymous sessions left idle ...
        for _ in range(100):
            peers.append(await hostile(address, hello=False))
        for _ in range(100):
            peers.append(await hostile(address))
        # ... 20 that announce a 4 MiB frame (refused before anything is allocated) ...
        for _ in range(20):
            peer = await hostile(address)
            peer.send_raw(LENGTH_PREFIX.pack(4 * MiB) + b"\x94\x03")
            await peer.expect_connection_error(FrameTooLarge)
        # ... and 100 in the middle of the largest frame an anonymous peer may send
        for _ in range(100):
            peer = await hostile(address)
            peer.send_raw(LENGTH_PREFIX.pack(16 * KiB) + bytes(10))
            peers.append(peer)
        # (what the strangers cost, measured before the guesses: a password check's 16 MiB
        # of scrypt memory stays in the allocator afterwards)
        growth = rss_bytes(nn.pid) - rss_before
        # one more pipelines 1,000 password guesses
        guesser = await hostile(address)
        peers.append(guesser)
        guesser.send_raw(b"".join(login_frame(i, ROOT, "guess") for i in range(1, 1001)))
        answers: Counter[type[XdfsError]] = Counter()
        for _ in range(1000):
            _call_id, error = await guesser.recv_error()
            answers[type(error)] += 1
        # The server is at its connection limit with strangers: a real client still gets
        # in (an idle stranger makes room) and its calls work.
        async with connect(address, ROOT, ROOT_PW) as real:
            assert (await real.mkdirs("/after")).owner == ROOT
            assert {e.path for e in await real.list_dir("/")} >= {"/before", "/after"}
            token = (await real.login(ROOT, ROOT_PW)).token
        async with connect(address, token=token) as by_token:
            assert (await by_token.stat("/after")).is_dir

    # At most a few guesses were checked at once from the guessing host; the rest were
    # refused at once (Overloaded) or, once failures mounted, throttled: none waited in line.
    checked = answers[AuthenticationFailed]
    assert 1 <= checked <= 50, answers
    assert answers[Overloaded] >= 900, answers
    assert sum(answers.values()) == 1000
    assert set(answers) <= {AuthenticationFailed, Overloaded, LoginThrottled}, answers
    # 320 strangers held no large buffers (before: 256 KiB each, 4 MiB per announced frame)
    assert growth < 16 * MiB, growth  # measured: 3 MiB


async def test_password_guessing_is_throttled_then_locked_out_and_logged(
    processes: ProcessGroup, tmp_path: Path
) -> None:
    nn, address = await start_namenode(
        processes, tmp_path, "namenode.login_failures_throttle=3",
        "namenode.login_throttle_delay_s=0.05", "namenode.login_failures_lockout=6",
        "namenode.login_lockout_s=600",
    )
    async with connect(address, ROOT, ROOT_PW) as root:
        await root.add_user("alice", "alice-pw")
        await root.add_user("bob", "bob-pw")
        alice_token = (await root.login("alice", "alice-pw")).token

    guesser = await hostile(address)
    answers: list[type[XdfsError]] = []
    try:
        call_id = 0
        while not answers or answers[-1] is not LockedOut:
            call_id += 1
            guesser.send_raw(login_frame(call_id, "alice", f"guess-{call_id}"))
            _id, error = await guesser.recv_error()
            answers.append(type(error))
            if type(error) is LoginThrottled:
                await asyncio.sleep(0.02)  # it says when; trying early costs nothing
            assert call_id < 10_000, answers
        # exactly the lockout's worth of passwords were checked; throttling came first
        assert answers.count(AuthenticationFailed) == 6, answers
        assert answers.index(LoginThrottled) == 3, answers
        # locked: even the right password, from the guessing host
        guesser.send_raw(login_frame(call_id + 1, "alice", "alice-pw"))
        _id, error = await guesser.recv_error()
        assert isinstance(error, LockedOut) and "try again in" in error.message
        guesser.send_raw(login_frame(call_id + 2, "bob", "bob-pw"))  # the host is locked too
        _id, error = await guesser.recv_error()
        assert isinstance(error, LockedOut)
    finally:
        await guesser.close()
    # from another host alice logs in: a guesser cannot lock a user out where it logs in
    # (the lockout is per user and host; issue 37 item 4)
    async with connect(address, "alice", "alice-pw") as alice:
        assert (await alice.stat("/")).is_dir
    async with connect(address, "bob", "bob-pw") as bob:  # another user, another host: fine
        assert (await bob.stat("/")).is_dir
    async with connect(address, token=alice_token) as alice:  # tokens are no password
        assert (await alice.stat("/")).is_dir
    log = nn.log_path.read_text()
    assert log.count("locked out for") == 1, log  # one line when it starts
    assert "login: login alice@127.0.0.2 and host 127.0.0.2 locked out for 600 s" in log
    assert log.count("login: throttling") == 1


async def test_unauthenticated_connections_hold_small_buffers_and_time_out(
    minicluster: MiniCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    base = minicluster.config
    config = replace(base, rpc=replace(
        base.rpc, handshake_timeout_s=1.0, unauthenticated_idle_timeout_s=1.0,
        partial_frame_timeout_s=1.0,
    ))
    nn = await minicluster.start_namenode(config=config)
    assert nn.server is not None
    server, address = nn.server, nn.address
    limit = config.rpc.unauthenticated_frame_bytes_max
    async with peers_closed_at_exit() as peers:
        for _ in range(50):
            peers.append(await hostile(address, hello=False))
        for _ in range(50):
            peer = await hostile(address)
            peer.send_raw(LENGTH_PREFIX.pack(limit) + bytes(10))
            peers.append(peer)
        authenticated = await RawPeer.connect(address)
        await authenticated.hello(user=ROOT, password=ROOT_PW)
        authenticated.send(Kind.REQUEST, 1, p.STAT.name, p.PathRequest("/"))
        assert (await authenticated.recv()).kind == Kind.RESPONSE

        def strangers_received() -> bool:
            held = [c.buffer_bytes_held for c in server.connections if c.unauthenticated]
            return len(held) == 100 and sum(held) >= 50 * (limit + UNAUTHENTICATED_BUFFER_BYTES)

        await eventually(strangers_received)
        for conn in server.connections:
            if conn.unauthenticated:  # a small buffer, plus at most its one partial frame
                assert conn.buffer_bytes_held <= UNAUTHENTICATED_BUFFER_BYTES + limit
            else:  # the user got the full receive buffer once logged in
                assert conn.buffer_bytes_held >= config.rpc.receive_buffer_bytes

        # an authenticated peer that starts a frame and stops is dropped too
        authenticated.send_raw(LENGTH_PREFIX.pack(1 * MiB) + bytes(100))
        error = await authenticated.expect_connection_error(ProtocolError)
        assert "frame incomplete" in error.message
        # every stranger is gone: no handshake, idle anonymous, or stuck in a frame
        for peer in peers:
            await peer.expect_closed()
        await eventually(lambda: not server.connections)
    messages = [r.getMessage() for r in caplog.records]
    assert sum("no handshake within the deadline" in m for m in messages) == 50
    anonymous = sum("idle for" in m or "frame incomplete" in m for m in messages)
    assert anonymous == 51
    assert not [r for r in caplog.records if r.exc_info]

