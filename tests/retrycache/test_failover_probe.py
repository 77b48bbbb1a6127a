"""The client's failover probe: a call to a server that stopped answering is abandoned as
soon as another server says it is active, and repeated there with the same call key.

The decision is a pure function (tested first); then two in-process servers: one that
takes a call and never answers it (nor its state: a paused process), one that is standby
and then becomes active."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import msgspec
import pytest

from xdfs.client.failover import ask_service_state
from xdfs.errors import Superseded
from xdfs.protocol.ha import GET_SERVICE_STATE, ServiceStatus
from xdfs.rpc.client import RpcClient
from xdfs.rpc.failover_probe import FailoverProbe, ServiceState, choose_new_active
from xdfs.rpc.handling import CallContext, CallKey, current_call
from xdfs.rpc.messages import Empty
from xdfs.rpc.service import Method, Service
from xdfs.testing.minicluster import MiniCluster

ACTIVE, STANDBY = "active", "standby"


def _s(state: str, epoch: int) -> ServiceState:
    return ServiceState(state, epoch)


# -- the decision ----------------------------------------------------------------------------


def test_another_active_with_a_newer_epoch_is_chosen() -> None:
    assert choose_new_active(0, {1: _s(ACTIVE, 3)}, seen_epoch=2) == 1


def test_no_other_active_keeps_waiting() -> None:
    assert choose_new_active(0, {1: _s(STANDBY, 3)}, seen_epoch=0) is None
    assert choose_new_active(0, {}, seen_epoch=0) is None


def test_an_active_no_newer_than_what_was_seen_is_not_followed() -> None:
    """An old active that has not learned it was replaced."""
    assert choose_new_active(0, {1: _s(ACTIVE, 2)}, seen_epoch=2) is None


def test_a_stalled_server_still_active_with_the_newest_epoch_is_only_slow() -> None:
    assert choose_new_active(0, {0: _s(ACTIVE, 4), 1: _s(ACTIVE, 4)}, seen_epoch=0) is None
    assert choose_new_active(0, {0: _s(ACTIVE, 4), 1: _s(ACTIVE, 5)}, seen_epoch=0) == 1
    assert choose_new_active(0, {0: _s(STANDBY, 4), 1: _s(ACTIVE, 4)}, seen_epoch=0) == 1


def test_the_newest_of_several_actives_wins() -> None:
    answers = {1: _s(ACTIVE, 5), 2: _s(ACTIVE, 7), 3: _s(STANDBY, 9)}
    assert choose_new_active(0, answers, seen_epoch=1) == 2


def test_the_probe_remembers_the_highest_epoch_it_was_told() -> None:
    """A standby's epoch counts: it is that of the active it follows."""
    probe = FailoverProbe(1.0, ask_service_state)
    probe.note({0: _s(STANDBY, 9), 1: _s(ACTIVE, 4)})
    probe.note({1: _s(ACTIVE, 3)})
    assert probe.seen_epoch == 9


# -- with servers ----------------------------------------------------------------------------


class Count(msgspec.Struct):
    n: int


ONCE = Method("t_once", Empty, Count, idempotent=False, at_most_once=True)
PLAIN = Method("t_plain", Empty, Count, idempotent=False)
PROBE_SERVICE = Service("t.probe", (ONCE, PLAIN))
STATE_SERVICE = Service("ha.service", (GET_SERVICE_STATE,))


@dataclass
class FakeNameNode:
    """``paused``: takes calls, answers nothing (a SIGSTOPped process, TCP still open)."""

    name: str
    state: str
    epoch: int
    paused: bool = False
    delay_s: float = 0.0
    keys: list[CallKey | None] = field(default_factory=list)
    called: asyncio.Event = field(default_factory=asyncio.Event)

    async def _answer(self) -> Count:
        self.keys.append(current_call())
        self.called.set()
        if self.paused:
            await asyncio.Event().wait()
        await asyncio.sleep(self.delay_s)
        return Count(len(self.keys))

    async def t_once(self, ctx: CallContext, req: Empty) -> Count:
        return await self._answer()

    async def t_plain(self, ctx: CallContext, req: Empty) -> Count:
        return await self._answer()

    async def get_service_state(self, ctx: CallContext, req: Empty) -> ServiceStatus:
        if self.paused:
            await asyncio.Event().wait()
        return ServiceStatus(self.state, self.epoch)


@dataclass
class Pair:
    old: FakeNameNode
    new: FakeNameNode
    client: RpcClient


@pytest.fixture
async def pair(minicluster: MiniCluster) -> AsyncIterator[Pair]:
    old, new = FakeNameNode("old", ACTIVE, 1), FakeNameNode("new", STANDBY, 1)
    addresses = []
    for node in (old, new):
        server = await minicluster.start_server(
            node.name, [(PROBE_SERVICE, node), (STATE_SERVICE, node)])
        addresses.append(server.address)
    # A call timeout no test waits for: only the probe can end a stalled call in time.
    config = dataclasses.replace(minicluster.config.rpc, call_timeout_s=600.0)
    client = RpcClient(addresses, config, probe=FailoverProbe(0.05, ask_service_state))
    try:
        yield Pair(old, new, client)
    finally:
        await client.close()


async def _promote_when_called(pair: Pair) -> None:
    """Once the old one holds a call: pause it, and make the other active (epoch 2)."""
    await pair.old.called.wait()
    pair.new.state, pair.new.epoch = ACTIVE, 2


async def test_a_stalled_call_is_repeated_on_the_new_active_with_the_same_key(
    pair: Pair,
) -> None:
    pair.old.paused = True
    promote = asyncio.create_task(_promote_when_called(pair))
    async with asyncio.timeout(60):
        answer = await pair.client.call(ONCE, Empty())
    await promote
    assert answer == Count(1)
    assert pair.old.keys == pair.new.keys, "the repeat must carry the first try's key"
    assert pair.new.keys[0] is not None
    assert pair.client.current_address == pair.client.addresses[1]
    assert pair.client.probe is not None and pair.client.probe.seen_epoch == 2


async def test_a_call_that_may_not_be_repeated_fails_with_superseded(pair: Pair) -> None:
    pair.old.paused = True
    promote = asyncio.create_task(_promote_when_called(pair))
    with pytest.raises(Superseded):
        async with asyncio.timeout(60):
            await pair.client.call(PLAIN, Empty())
    await promote
    assert pair.new.keys == [], "a call that is neither idempotent nor cached is not repeated"
    assert pair.client.current_address == pair.client.addresses[1]  # the next call goes there


async def test_a_slow_call_is_not_abandoned_while_no_other_server_is_active(
    pair: Pair,
) -> None:
    """The others are asked ten times or so (standby each time): the call waits for the
    first server's answer."""
    pair.old.delay_s = 0.5
    async with asyncio.timeout(60):
        answer = await pair.client.call(ONCE, Empty())
    assert answer == Count(1)
    assert pair.new.keys == []
    assert pair.client.current_address == pair.client.addresses[0]


async def test_a_slow_active_is_not_left_for_an_active_with_its_own_epoch(pair: Pair) -> None:
    """Both say active under epoch 1 (the other has not stepped down yet, or lies): the
    slow one that still answers keeps the call."""
    pair.old.delay_s = 0.5
    pair.new.state = ACTIVE
    async with asyncio.timeout(60):
        assert await pair.client.call(ONCE, Empty()) == Count(1)
    assert pair.new.keys == []


async def test_a_handshake_that_never_completes_is_left_for_the_new_active(
    minicluster: MiniCluster,
) -> None:
    """A new client whose first address is a paused process (the kernel accepts the
    connection, nothing answers the handshake) reaches the new active without waiting
    for rpc.connect_timeout_s; a call that was never sent may go there whatever it is."""
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    paused = await asyncio.start_server(hold, "127.0.0.1", 0)
    new = FakeNameNode("new", ACTIVE, 3)
    server = await minicluster.start_server("new", [(PROBE_SERVICE, new), (STATE_SERVICE, new)])
    config = dataclasses.replace(minicluster.config.rpc, connect_timeout_s=600.0)
    addresses = [f"127.0.0.1:{paused.sockets[0].getsockname()[1]}", server.address]
    client = RpcClient(addresses, config, probe=FailoverProbe(0.05, ask_service_state))
    try:
        async with asyncio.timeout(60):
            assert await client.call(PLAIN, Empty()) == Count(1)
        assert held, "the first try went to the paused address"
        assert client.current_address == server.address
    finally:
        await client.close()
        for writer in held:
            writer.close()
        paused.close()
        await paused.wait_closed()
