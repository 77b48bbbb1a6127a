"""Logins that receive a password (the login call; HTTP Basic auth alike): a password
checked once is trusted for ``namenode.password_cache_s`` without another scrypt check; a
wrong password, a changed password or a removed user always gets the full check (and
fails). Handshakes log in by SCRAM, where the client does the scrypt: they cost the
NameNode no password check at all."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from xdfs.errors import AuthenticationFailed
from xdfs.namenode.namespace.ops import UserRecord
from xdfs.namenode.security import passwords
from xdfs.protocol import namenode as p
from xdfs.testing.minicluster import MiniCluster

from .conftest import ROOT, ROOT_PW, connect, nn_config, start_cluster


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The users whose password the NameNode checked with scrypt, in order."""
    checked: list[str] = []
    real = passwords.verify_password

    def counting(user: UserRecord | None, password: str) -> bool:
        checked.append(user.name if user is not None else "")
        return real(user, password)

    monkeypatch.setattr(passwords, "verify_password", counting)
    yield checked


async def _connects(address: str, user: str, password: str) -> bool:
    """A login call with this password in the request (as older clients send it; HTTP
    Basic auth is checked alike)."""
    async with connect(address) as client:
        try:
            await client.rpc.call(p.LOGIN, p.LoginRequest(user, password))
        except AuthenticationFailed:
            return False
    return True


async def test_a_scram_handshake_costs_the_namenode_no_password_check(
    minicluster: MiniCluster, checks: list[str]
) -> None:
    c = await start_cluster(minicluster, users=False)
    try:
        await c.root.add_user("ann", "ann-pw")
        checks.clear()
        for _ in range(3):
            async with connect(c.nn.address, "ann", "ann-pw") as client:
                await client.stat("/")
                assert (await client.login("ann", "ann-pw")).token  # the login call too
        assert checks == []
    finally:
        await c.close()


async def test_a_checked_password_is_not_checked_again(
    minicluster: MiniCluster, checks: list[str]
) -> None:
    c = await start_cluster(minicluster, users=False)
    try:
        address = c.nn.address
        await c.root.add_user("ann", "ann-pw")
        checks.clear()
        assert await _connects(address, "ann", "ann-pw")
        assert await _connects(address, "ann", "ann-pw")
        assert (await c.root.login("ann", "ann-pw")).token  # by SCRAM: no check here
        assert checks == ["ann"]
        # a wrong password never matches what was remembered: checked, refused, each time
        assert not await _connects(address, "ann", "ann-pw2")
        assert not await _connects(address, "ann", "ann-pw2")
        assert checks == ["ann"] * 3
        # a new password: the old one is checked again (and fails), the new one once
        await c.root.set_password("ann", "ann-new")
        assert not await _connects(address, "ann", "ann-pw")
        assert await _connects(address, "ann", "ann-new")
        assert await _connects(address, "ann", "ann-new")
        assert checks == ["ann"] * 5
        # removed, then added again with the same password: a new user, checked anew
        await c.root.remove_user("ann")
        assert not await _connects(address, "ann", "ann-new")
        await c.root.add_user("ann", "ann-new")
        checks.clear()
        assert await _connects(address, "ann", "ann-new")
        assert checks == ["ann"]
    finally:
        await c.close()


async def test_no_cache_checks_every_time(minicluster: MiniCluster, checks: list[str]) -> None:
    c = await start_cluster(minicluster, nn_config(password_cache_s=0.0), users=False)
    try:
        checks.clear()
        for _ in range(3):
            assert await _connects(c.nn.address, ROOT, ROOT_PW)
        assert checks == [ROOT] * 3
    finally:
        await c.close()
