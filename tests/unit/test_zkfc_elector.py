"""The failover controller's pure rules: health monitor and elector, event by event."""

from __future__ import annotations

import pytest

from xdfs.protocol.ha import UNHEALTHY_RESOURCES, HealthReport
from xdfs.protocol.zkfc import ControllerIdentity
from xdfs.zkfc.elector import (
    Action,
    Activate,
    ActivationDone,
    Cede,
    CedeEnded,
    CedeRequested,
    Elector,
    Event,
    Fence,
    FenceDone,
    HealthChanged,
    Join,
    JoinFailed,
    LockChanged,
    LockHeld,
    LockWon,
    Quit,
    Register,
    RetryDue,
    Role,
    Schedule,
    ServiceStateSeen,
    Standby,
    SuspendTimedOut,
    ZkConnected,
    ZkSessionLost,
    ZkSuspended,
)
from xdfs.zkfc.health import Health, HealthMonitor

ME = ControllerIdentity("ns", "nn1", "h1:8020", "h1:8019")
OTHER = ControllerIdentity("ns", "nn2", "h2:8020", "h2:8019")
SESSION_S = 5.0
RETRY_S = 1.0

# --- health monitor ----------------------------------------------------------------------


def test_health_needs_consecutive_failures_but_believes_an_unhealthy_answer() -> None:
    monitor = HealthMonitor(failures_max=3)
    assert monitor.answered(HealthReport(True)) is Health.HEALTHY
    assert monitor.answered(HealthReport(True)) is None  # no change, no event
    assert monitor.failed("refused") is None
    assert monitor.failed("refused") is None
    assert monitor.answered(HealthReport(True)) is None  # an answer resets the count
    assert monitor.failed("timeout") is None
    assert monitor.failed("timeout") is None
    assert monitor.failed("timeout") is Health.NOT_RESPONDING
    assert "3 health checks in a row failed, the last: timeout" in monitor.reason
    assert monitor.failed("timeout") is None
    assert monitor.answered(HealthReport(True)) is Health.HEALTHY and monitor.reason == ""
    report = HealthReport(False, UNHEALTHY_RESOURCES, "/data below 100 MiB")
    assert monitor.answered(report) is Health.UNHEALTHY
    assert monitor.reason == "resources_low: /data below 100 MiB"


# --- elector -----------------------------------------------------------------------------


def role(e: Elector) -> Role:
    """The role now (a call, so mypy does not keep an earlier narrowing)."""
    return e.role


def elector() -> Elector:
    return Elector(ME, session_timeout_s=SESSION_S, retry_after_failure_s=RETRY_S)


def feed(e: Elector, *events: Event) -> list[Action]:
    actions: list[Action] = []
    for event in events:
        actions += e.on(event)
    return actions


def joining() -> Elector:
    """Connected and healthy: asked to join (attempt 1)."""
    e = elector()
    assert feed(e, ZkConnected(new_session=True)) == [Register()]
    assert feed(e, HealthChanged(Health.HEALTHY)) == [Join(1)]
    assert role(e) is Role.JOINING
    return e


def active() -> Elector:
    e = joining()
    assert feed(e, LockWon(1, None)) == [Activate(1)]
    assert feed(e, ActivationDone(1, True)) == []
    assert role(e) is Role.ACTIVE
    return e


def standby() -> Elector:
    e = joining()
    assert feed(e, LockHeld(1, OTHER)) == [Standby()]
    assert role(e) is Role.STANDBY and e.active == OTHER
    return e


def test_joins_only_when_healthy_and_connected() -> None:
    e = elector()
    assert feed(e, HealthChanged(Health.HEALTHY)) == []  # no session yet
    assert feed(e, ZkConnected(new_session=True)) == [Register(), Join(1)]
    e = elector()
    assert feed(e, ZkConnected(new_session=True), HealthChanged(Health.UNHEALTHY)) == [
        Register()]
    assert role(e) is Role.IDLE


@pytest.mark.parametrize(
    ("breadcrumb", "expected"),
    [
        (None, [Activate(1)]),  # first active ever
        (ME, [Activate(1)]),  # we were the last active: nothing to fence
        (OTHER, [Fence(1, OTHER)]),  # another may still act as active
    ],
)
def test_winning_fences_the_last_active_unless_it_was_us(
    breadcrumb: ControllerIdentity | None, expected: list[Action]
) -> None:
    e = joining()
    assert feed(e, LockWon(1, breadcrumb)) == expected
    assert role(e) is Role.BECOMING_ACTIVE


def test_fence_then_activate_then_active() -> None:
    e = joining()
    feed(e, LockWon(1, OTHER))
    assert feed(e, FenceDone(1, True, "stepped down")) == [Activate(1)]
    assert feed(e, ActivationDone(1, True)) == []
    assert role(e) is Role.ACTIVE and e.active == ME


def test_failed_fence_gives_the_lock_up_and_backs_off() -> None:
    e = joining()
    feed(e, LockWon(1, OTHER))
    assert feed(e, FenceDone(1, False, "no method worked")) == [
        Quit(delete_breadcrumb=False), Schedule(RetryDue(1), RETRY_S)]
    assert role(e) is Role.IDLE and "no method worked" in e.last_error
    assert feed(e, RetryDue(1)) == [Join(3)]


def test_failed_activation_steps_down_keeps_the_breadcrumb_and_backs_off() -> None:
    e = joining()
    feed(e, LockWon(1, None))
    actions = feed(e, ActivationDone(1, False, "Fenced: epoch 7 exists"))
    assert actions == [Quit(delete_breadcrumb=False), Standby(), Schedule(RetryDue(1), RETRY_S)]
    assert role(e) is Role.IDLE
    assert feed(e, RetryDue(0)) == []  # an older retry does not end this back-off
    assert feed(e, RetryDue(1)) == [Join(3)]


def test_losing_the_lock_race_makes_the_local_namenode_standby() -> None:
    e = standby()
    assert feed(e, LockChanged()) == [Join(2)]  # the holder's lock went: try again
    assert feed(e, LockWon(2, OTHER)) == [Fence(2, OTHER)]


def test_unhealthy_active_leaves_keeping_the_breadcrumb() -> None:
    e = active()
    actions = feed(e, HealthChanged(Health.NOT_RESPONDING))
    assert actions == [Quit(delete_breadcrumb=False), Standby()]
    assert role(e) is Role.IDLE
    assert feed(e, HealthChanged(Health.HEALTHY)) == [Join(3)]


def test_unhealthy_standby_leaves_and_rejoins() -> None:
    e = standby()
    assert feed(e, HealthChanged(Health.UNHEALTHY)) == [Quit(delete_breadcrumb=False)]
    assert role(e) is Role.IDLE
    assert feed(e, HealthChanged(Health.HEALTHY)) == [Join(3)]


def test_session_lost_while_active_steps_down_and_rejoins_on_a_new_session() -> None:
    e = active()
    assert feed(e, ZkSessionLost()) == [Standby()]
    assert role(e) is Role.IDLE
    assert feed(e, ZkConnected(new_session=True)) == [Register(), Join(3)]


def test_suspension_is_neutral_until_a_whole_session_timeout() -> None:
    e = active()
    assert feed(e, ZkSuspended()) == [Schedule(SuspendTimedOut(1), SESSION_S)]
    assert feed(e, ZkConnected(new_session=False)) == []  # the session survived
    assert role(e) is Role.ACTIVE
    assert feed(e, SuspendTimedOut(1)) == []  # reconnected meanwhile
    assert feed(e, ZkSuspended()) == [Schedule(SuspendTimedOut(2), SESSION_S)]
    assert feed(e, SuspendTimedOut(2)) == [Standby(), Quit(delete_breadcrumb=False)]
    assert role(e) is Role.IDLE
    # the same session comes back after all: join again (the lock may still be ours)
    assert feed(e, ZkConnected(new_session=False)) == [Join(3)]


def test_stale_results_are_ignored_and_a_stale_win_released() -> None:
    e = joining()
    feed(e, HealthChanged(Health.UNHEALTHY))  # leaves while the join is under way
    assert role(e) is Role.IDLE
    assert feed(e, LockWon(1, None)) == [Quit(delete_breadcrumb=False)]  # nobody uses it
    assert feed(e, LockHeld(1, OTHER), JoinFailed(1, "x")) == []
    feed(e, HealthChanged(Health.HEALTHY))  # attempt 3
    assert feed(e, LockWon(1, None)) == []  # a newer join is under way: it will win
    assert feed(e, LockWon(3, None)) == [Activate(3)]
    assert feed(e, FenceDone(1, True), ActivationDone(2, True)) == []
    assert role(e) is Role.BECOMING_ACTIVE


def test_join_failure_backs_off() -> None:
    e = joining()
    assert feed(e, JoinFailed(1, "ConnectionLoss")) == [Schedule(RetryDue(1), RETRY_S)]
    assert role(e) is Role.IDLE and e.backing_off
    assert feed(e, RetryDue(1)) == [Join(3)]


def test_cede_while_active_then_rejoin() -> None:
    e = active()
    actions = feed(e, CedeRequested(10.0))
    assert actions == [Cede(), Schedule(CedeEnded(1), 10.0)]
    assert role(e) is Role.IDLE and e.ceding
    assert feed(e, HealthChanged(Health.HEALTHY)) == []  # still ceding
    assert feed(e, CedeEnded(1)) == [Join(3)]


def test_cede_while_standby_leaves_and_a_zero_cede_ends_it_early() -> None:
    e = standby()
    assert feed(e, CedeRequested(30.0)) == [Quit(delete_breadcrumb=False),
                                           Schedule(CedeEnded(1), 30.0)]
    assert feed(e, CedeRequested(0.0)) == [Join(3)]
    assert feed(e, CedeEnded(1)) == []  # the first cede's end changes nothing now


def test_namenode_state_drift_is_corrected() -> None:
    e = standby()
    # reported active while another holds the lock: make it standby (once per tag)
    assert feed(e, ServiceStateSeen("active", e.tag)) == [Standby()]
    assert feed(e, ServiceStateSeen("active", e.tag - 1)) == []  # probe older than that
    e = active()
    # our active NameNode went standby by itself (restarted, fenced by the journal)
    actions = feed(e, ServiceStateSeen("standby", e.tag))
    assert actions == [Quit(delete_breadcrumb=False), Schedule(RetryDue(1), RETRY_S)]
    assert role(e) is Role.IDLE and "left the active state" in e.last_error
    e = active()
    assert feed(e, ServiceStateSeen("standby", e.tag - 1)) == []  # sent before activation


def test_reconnect_with_the_same_session_rechecks_the_lock_when_standby() -> None:
    e = standby()
    feed(e, ZkSuspended())
    assert feed(e, ZkConnected(new_session=False)) == [Join(2)]
