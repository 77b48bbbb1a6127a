"""The failed-login throttle and lockout (pure core of issue 17 item 8)."""

from __future__ import annotations

import pytest

from xdfs.errors import LockedOut, LoginThrottled
from xdfs.namenode.security.login_guard import GuardSettings, Key, LoginGuard

ALICE, HOST, OTHER_HOST = Key("user", "alice"), Key("host", "10.0.0.9"), Key("host", "10.0.0.7")


def guard() -> LoginGuard:
    return LoginGuard(GuardSettings(
        throttle_after=3, delay_s=1.0, lockout_after=6, lockout_s=100.0, window_s=50.0
    ))


def test_throttle_doubles_then_locks_out_both_keys() -> None:
    g = guard()
    now = 0.0
    for _ in range(3):
        g.check([ALICE, HOST], now)
        assert g.failed([ALICE, HOST], now) == []
    assert g.throttling_starts(ALICE) and g.throttling_starts(HOST)
    with pytest.raises(LoginThrottled, match=r"user alice; try again in 0\.5 s"):
        g.check([ALICE, HOST], now + 0.5)
    g.check([ALICE, HOST], now + 1.0)  # the wait is over
    now = 1.0
    g.failed([ALICE, HOST], now)  # 4 failures: 2 s
    with pytest.raises(LoginThrottled, match=r"2\.0 s"):
        g.check([ALICE], now)
    now += 2.0
    g.failed([ALICE, HOST], now)  # 5: 4 s
    now += 4.0
    assert g.failed([ALICE, HOST], now) == [ALICE, HOST]  # 6: locked out, both
    with pytest.raises(LockedOut, match="user alice is locked out after 6 failed logins"):
        g.check([ALICE, OTHER_HOST], now + 99.0)
    with pytest.raises(LockedOut, match=r"host 10\.0\.0\.9"):
        g.check([Key("user", "bob"), HOST], now + 99.0)
    g.check([ALICE, HOST], now + 100.0)  # the lockout is over, the count starts again
    assert g.failed([ALICE, HOST], now + 100.0) == []
    g.check([ALICE, HOST], now + 100.0)


def test_a_success_forgets_the_users_failures_not_the_hosts() -> None:
    g = guard()
    for _ in range(3):
        g.failed([ALICE, HOST], 0.0)
    g.succeeded(ALICE)
    g.check([ALICE], 0.0)
    with pytest.raises(LoginThrottled, match="host"):
        g.check([ALICE, HOST], 0.0)


def test_failures_are_forgotten_after_the_window_and_pruned() -> None:
    g = guard()
    for _ in range(3):
        g.failed([ALICE, HOST], 0.0)
    g.check([ALICE, HOST], 51.0)  # 50 s window passed: no wait
    assert g.failed([ALICE, HOST], 51.0) == []
    g.check([ALICE, HOST], 51.0)  # one failure: no throttle yet
    # keys of many hosts: the ones forgotten go once the table has grown (memory stays
    # within twice what the window holds)
    for index in range(5000):
        g.failed([Key("host", f"old{index}")], 100.0)
    for index in range(5000):
        g.failed([Key("host", f"new{index}")], 1000.0)
    assert Key("host", "old0") not in g._entries
    assert len(g._entries) <= 2 * 5000
