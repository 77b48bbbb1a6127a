"""Automatic failover with real processes: a 3-server ZooKeeper ensemble, two fake
NameNodes and their ``xdfs zkfc`` controllers."""

from __future__ import annotations

import asyncio
import logging
import math
import time

import pytest

from tests.zkfc.conftest import HaPair
from xdfs.common.secrets import read_secret_file
from xdfs.common.zookeeper import ZooKeeperEnsemble
from xdfs.config import load_config
from xdfs.errors import AuthenticationFailed, InvalidArgument
from xdfs.protocol.zkfc import CEDE_ACTIVE, ZKFC_STATUS, CedeRequest, ZkfcStatus
from xdfs.rpc.messages import Empty, Hello
from xdfs.zkfc.namenodes import BoundedClient
from xdfs.zkfc.server import controller_hello

log = logging.getLogger(__name__)


def _started(pair_factory, ensemble: ZooKeeperEnsemble,
             **settings: object) -> tuple[HaPair, str, str]:
    """Two NameNodes and their controllers, settled: (pair, active id, standby id)."""
    pair: HaPair = pair_factory(ensemble.hosts, **settings)
    pair.start_namenodes("nn1", "nn2")
    pair.start_controller("nn1")
    pair.start_controller("nn2")
    active = pair.wait_one_active()
    return pair, active, "nn2" if active == "nn1" else "nn1"


def test_one_active_then_controller_sigkill_fails_over_and_fences(
    pair_factory, ensemble: ZooKeeperEnsemble
) -> None:
    pair, active, other = _started(pair_factory, ensemble)
    killed_at = time.time()
    pair.controllers[active].kill()
    pair.wait(lambda: pair.state(other) == "active", f"{other} active after SIGKILL")
    promoted = pair.transitions(other)[-1]
    took = promoted.at - killed_at
    print(f"failover after SIGKILL of the active's controller: {took:.2f} s")
    log.warning("failover after SIGKILL of the active's controller: %.2f s", took)
    fence = [t for t in pair.transitions(active) if t.at > killed_at]
    assert fence and fence[0].method == "transition_to_standby" and fence[0].source == "zkfc"
    assert fence[0].at <= promoted.at, "the old active is fenced before the new one acts"
    assert pair.state(active) == "standby"


def _measure(pair: HaPair, what: str, since: float, nn_id: str) -> float:
    promoted = [t for t in pair.transitions(nn_id)
                if t.method == "transition_to_active" and t.at > since]
    assert promoted, f"{nn_id} was not made active after {what}"
    took = promoted[0].at - since
    print(f"failover after {what}: {took:.2f} s")
    log.warning("failover after %s: %.2f s", what, took)
    return took


def test_namenode_sigkill_fails_over(pair_factory, ensemble: ZooKeeperEnsemble) -> None:
    pair, active, other = _started(pair_factory, ensemble)
    killed_at = time.time()
    pair.namenodes[active].kill()
    pair.wait(lambda: pair.state(other) == "active", f"{other} active after SIGKILL")
    _measure(pair, "SIGKILL of the active NameNode", killed_at, other)


def test_paused_namenode_is_fenced_and_steps_down_when_resumed(
    pair_factory, ensemble: ZooKeeperEnsemble, tmp_path
) -> None:
    """SIGSTOP past the health timeout: the other takes over; the paused one does not
    answer the graceful fence, so the configured fencing method runs (with the target's
    address); resumed, it is told to go standby by its own controller."""
    fenced = tmp_path / "fenced"
    pair, active, other = _started(
        pair_factory, ensemble, fencing_methods=[f"shell(echo $target_address >> {fenced})"])
    paused_at = time.time()
    pair.pause(pair.namenodes[active])
    pair.wait(lambda: pair.state(other) == "active", f"{other} active after SIGSTOP")
    _measure(pair, "SIGSTOP of the active NameNode", paused_at, other)
    assert fenced.read_text().split() == [pair.addresses[active]]
    assert pair.state(active) == "active"  # paused: it never heard of it
    resumed_at = time.time()
    pair.resume(pair.namenodes[active])
    pair.wait(lambda: pair.state(active) == "standby", f"{active} standby once resumed")
    stepped = [t for t in pair.transitions(active) if t.at > resumed_at]
    assert stepped[0].method == "transition_to_standby" and stepped[0].source == "zkfc"
    assert pair.state(other) == "active"


def test_unhealthy_namenode_leaves_the_election(
    pair_factory, ensemble: ZooKeeperEnsemble
) -> None:
    pair, active, other = _started(pair_factory, ensemble)
    pair.unhealthy_file(active).touch()
    pair.wait(lambda: pair.state(other) == "active", f"{other} active when {active} is ill")
    pair.wait(lambda: pair.state(active) == "standby", f"{active} asked to step down")
    pair.unhealthy_file(active).unlink()
    # healthy again: it rejoins as the standby, the active stays
    pair.wait(lambda: "standby" in pair.admin("-getServiceState", active).stdout,
              f"{active} reported standby")
    assert pair.state(other) == "active"


def test_graceful_failover_and_service_state_through_the_cli(
    pair_factory, ensemble: ZooKeeperEnsemble
) -> None:
    pair, active, other = _started(pair_factory, ensemble)
    states = {nn_id: pair.admin("-getServiceState", nn_id) for nn_id in ("nn1", "nn2")}
    assert states[active].returncode == 0 and states[active].stdout == "active\n"
    assert states[other].returncode == 0 and states[other].stdout == "standby\n"

    refused = pair.admin("-transitionToActive", other)
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and "automatic failover is enabled" in refused.stderr

    started = time.time()
    done = pair.admin("-failover", active, other)
    assert done.returncode == 0, done.stderr + pair.logs()
    assert f"Failover to NameNode {other} successful (the active was {active}" in done.stdout
    assert pair.state(other) == "active" and pair.state(active) == "standby"
    ceded = [t for t in pair.transitions(active) if t.at > started]
    promoted = [t for t in pair.transitions(other) if t.at > started]
    # the old active stepped down (asked by its own controller: ceding, then rejoining as
    # the standby) before the new one was promoted; it ceded cleanly (the breadcrumb went
    # with its lock), so the winner had nothing to fence
    assert {t.method for t in ceded} == {"transition_to_standby"}
    assert ceded[0].at <= promoted[0].at
    assert "fencing it" not in pair.controllers[other].log_text()
    assert pair.admin("-getServiceState", other).stdout == "active\n"

    back = pair.admin("-failover", other, active)
    assert back.returncode == 0, back.stderr + pair.logs()
    assert pair.state(active) == "active" and pair.state(other) == "standby"
    again = pair.admin("-failover", other, active)
    assert again.returncode == 0 and f"NameNode {active} is already active" in again.stdout


def test_zookeeper_server_killed_ensemble_survives(
    pair_factory, ensemble: ZooKeeperEnsemble
) -> None:
    pair, _, _ = _started(pair_factory, ensemble)
    leader = ensemble.leader()
    assert leader >= 0
    ensemble.servers[leader].kill()
    try:
        pair.wait(lambda: ensemble.leader() not in (-1, leader), "a new ZooKeeper leader")
        active = pair.wait_one_active()
        other = "nn2" if active == "nn1" else "nn1"
        killed_at = time.time()
        pair.controllers[active].kill()
        pair.wait(lambda: pair.state(other) == "active",
                  f"{other} active with 2 of 3 ZooKeeper servers")
        _measure(pair, "SIGKILL of the active's controller, 2 of 3 ZooKeeper servers",
                 killed_at, other)
    finally:
        ensemble.restart(leader)


def test_paused_controller_loses_its_session_and_rejoins_as_standby(
    pair_factory, ensemble: ZooKeeperEnsemble
) -> None:
    """A controller SIGSTOPped past its session timeout (a partitioned ex-leader): the
    other wins and fences its NameNode; resumed, it learns its session expired and
    rejoins as the standby without touching the new active."""
    pair, active, other = _started(pair_factory, ensemble)
    paused_at = time.time()
    pair.pause(pair.controllers[active])
    pair.wait(lambda: pair.state(other) == "active", f"{other} active, {active}'s zkfc paused")
    _measure(pair, "SIGSTOP of the active's controller", paused_at, other)
    assert pair.state(active) == "standby"  # fenced by the winner: it answered
    pair.resume(pair.controllers[active])

    def rejoined_as_standby() -> bool:
        text = pair.controllers[active].log_text()
        return "joining -> standby" in text[text.rfind("election: active -> "):]

    pair.wait(rejoined_as_standby, f"{active}'s controller back in the election, standby")
    assert pair.state(other) == "active" and pair.state(active) == "standby"


def test_controller_rpc_needs_the_secret_and_refuses_bad_input(
    pair_factory, ensemble: ZooKeeperEnsemble
) -> None:
    pair, active, other = _started(pair_factory, ensemble)
    config = load_config(pair.conf, env={})
    secret = read_secret_file(config.ha.zkfc_secret_file, "ha.zkfc_secret_file")
    match = pair.controllers[active].match
    assert match is not None

    async def status(hello: Hello) -> ZkfcStatus:
        async with BoundedClient(config, match.group(1), "test", hello=hello) as client:
            return await client.call(ZKFC_STATUS, Empty(), 10.0)

    async def cede(duration_s: float) -> None:
        hello = controller_hello(secret)
        async with BoundedClient(config, match.group(1), "test", hello=hello) as client:
            await client.call(CEDE_ACTIVE, CedeRequest(duration_s), 10.0)

    seen = asyncio.run(status(controller_hello(secret)))
    assert (seen.role, seen.health, seen.zookeeper, seen.ceded) == (
        "active", "healthy", "connected", False)
    assert seen.identity.id == active and seen.active == seen.identity
    with pytest.raises(AuthenticationFailed):
        asyncio.run(status(controller_hello("00" * 32)))
    for bad in (math.nan, math.inf, 1e9):
        with pytest.raises(InvalidArgument, match="cede duration"):
            asyncio.run(cede(bad))
    assert asyncio.run(status(controller_hello(secret))).role == "active"  # nothing changed
    assert pair.state(active) == "active" and pair.state(other) == "standby"
