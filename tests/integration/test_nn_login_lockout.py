"""Failed logins lock out per user and client address (issue 37 item 4): a guesser cannot
lock a user out where the user logs in, and a guess spread over many addresses meets the
user-wide backstop. Real NameNode, real SCRAM logins from distinct loopback addresses."""

from __future__ import annotations

from dataclasses import replace

import aiohttp
import msgspec
import pytest

from tests.rpc.wire import raw_peer
from xdfs.errors import AuthenticationFailed, LockedOut, error_from_code
from xdfs.namenode.server import NameNode
from xdfs.rpc.messages import PROTOCOL_VERSION, Challenge, ErrorInfo, Hello, Kind, Welcome
from xdfs.rpc.scram import ClientLogin
from xdfs.testing.minicluster import MiniCluster

from .conftest import ROOT, ROOT_PW, connect, nn_config


async def logs_in(nn: NameNode, host: str, password: str) -> None:
    """A SCRAM login of alice from loopback address ``host`` (the server's error raised)."""
    async with raw_peer(nn.address, local_addr=(host, 0)) as peer:
        login = ClientLogin(Hello(PROTOCOL_VERSION, user="alice", password=password))
        peer.send(Kind.HELLO, 0, "", login.hello)
        envelope = await peer.recv()
        if envelope.kind == Kind.CHALLENGE:
            challenge = msgspec.msgpack.decode(envelope.body, type=Challenge)
            peer.send(Kind.PROOF, 0, "", login.answer(challenge))
            envelope = await peer.recv()
        if envelope.kind == Kind.ERROR:
            info = msgspec.msgpack.decode(envelope.body, type=ErrorInfo)
            raise error_from_code(info.code, info.message)
        assert envelope.kind == Kind.WELCOME, envelope
        login.verify(msgspec.msgpack.decode(envelope.body, type=Welcome))


async def start(minicluster: MiniCluster, **namenode: float) -> NameNode:
    nn = await minicluster.start_namenode(
        superuser=ROOT, password=ROOT_PW, config=nn_config(**namenode))
    async with connect(nn, ROOT, ROOT_PW) as root:
        await root.add_user("alice", "alice-pw")
    return nn


async def test_failures_from_one_address_lock_it_not_the_users_usual_one(
    minicluster: MiniCluster,
) -> None:
    # no throttle before the lockout: the guesser may fail 30 times at once
    nn = await start(minicluster, login_failures_throttle=30)
    usual, guesser = "127.0.0.2", "127.0.0.3"
    await logs_in(nn, usual, "alice-pw")
    for _ in range(30):
        with pytest.raises(AuthenticationFailed):
            await logs_in(nn, guesser, "guess")
    with pytest.raises(LockedOut, match=r"127\.0\.0\.3"):
        await logs_in(nn, guesser, "alice-pw")  # locked: even the right password
    await logs_in(nn, usual, "alice-pw")  # the user is not locked out where it logs in
    await logs_in(nn, "127.0.0.4", "alice-pw")  # nor anywhere else the guesser is not


async def test_a_guess_from_many_addresses_locks_the_user_out_but_on_its_known_ones(
    minicluster: MiniCluster,
) -> None:
    nn = await start(minicluster, login_failures_throttle=5, login_failures_lockout=5,
                     login_failures_user_lockout=8)
    usual = "127.0.0.2"
    await logs_in(nn, usual, "alice-pw")
    for index in range(8):  # one failure from each of 8 addresses: none of them throttled
        with pytest.raises(AuthenticationFailed):
            await logs_in(nn, f"127.0.1.{index}", "guess")
    with pytest.raises(LockedOut, match="user alice"):
        await logs_in(nn, "127.0.0.9", "alice-pw")
    await logs_in(nn, usual, "alice-pw")


async def webhdfs_status(nn: NameNode, host: str, password: str) -> tuple[int, str]:
    """GETFILESTATUS of / with alice's Basic credentials, from loopback address ``host``:
    (status, the RemoteException's message, "" on success)."""
    connector = aiohttp.TCPConnector(local_addr=(host, 0))
    headers = {"Authorization": aiohttp.encode_basic_auth("alice", password)}
    async with aiohttp.ClientSession(connector=connector) as session, session.get(
            f"http://{nn.http_address}/webhdfs/v1/", params={"op": "GETFILESTATUS"},
            headers=headers) as response:
        body = await response.json()
        return response.status, body.get("RemoteException", {}).get("message", "")


async def test_webhdfs_password_logins_lock_out_per_address_too(
    minicluster: MiniCluster,
) -> None:
    base = nn_config(login_failures_throttle=30, login_failures_lockout=30)
    config = replace(base, namenode=replace(base.namenode, http_address="127.0.0.1:0"))
    nn = await minicluster.start_namenode(superuser=ROOT, password=ROOT_PW, config=config)
    async with connect(nn, ROOT, ROOT_PW) as root:
        await root.add_user("alice", "alice-pw")
    usual, guesser = "127.0.0.2", "127.0.0.3"
    assert (await webhdfs_status(nn, usual, "alice-pw"))[0] == 200
    for _ in range(30):
        assert (await webhdfs_status(nn, guesser, "guess"))[0] in (401, 403)
    status, message = await webhdfs_status(nn, guesser, "alice-pw")
    assert status != 200 and "login alice@127.0.0.3 is locked out" in message
    assert (await webhdfs_status(nn, usual, "alice-pw"))[0] == 200
    await logs_in(nn, usual, "alice-pw")  # and by RPC: one guard for both
    with pytest.raises(LockedOut):
        await logs_in(nn, guesser, "alice-pw")
