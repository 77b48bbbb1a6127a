"""The failed-login throttle and lockout (pure core of issue 17 item 8; per user and host,
with a user-wide backstop that spares the user's known hosts: issue 37 item 4)."""

from __future__ import annotations

import pytest

from xdfs.errors import LockedOut, LoginThrottled
from xdfs.namenode.security.login_guard import GuardSettings, Key, LoginGuard

ALICE = Key("login", "alice@10.0.0.9")
HOST, OTHER_HOST = Key("host", "10.0.0.9"), Key("host", "10.0.0.7")


def guard(user_lockout_after: int = 20) -> LoginGuard:
    return LoginGuard(GuardSettings(
        throttle_after=3, delay_s=1.0, lockout_after=6, lockout_s=100.0, window_s=50.0,
        user_lockout_after=user_lockout_after, known_host_s=1000.0,
    ))


def test_throttle_doubles_then_locks_out_both_keys() -> None:
    g = guard()
    now = 0.0
    for _ in range(3):
        g.check([ALICE, HOST], now)
        assert g.failed([ALICE, HOST], now) == []
    assert g.throttling_starts(ALICE) and g.throttling_starts(HOST)
    with pytest.raises(LoginThrottled, match=r"login alice@10\.0\.0\.9; try again in 0\.5 s"):
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
    with pytest.raises(LockedOut, match=r"alice@10\.0\.0\.9 is locked out after 6 failed logins"):
        g.check([ALICE, OTHER_HOST], now + 99.0)
    with pytest.raises(LockedOut, match=r"host 10\.0\.0\.9"):
        g.check([Key("login", "bob@10.0.0.9"), HOST], now + 99.0)
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


ATTACKER, HOME, NEW = "10.6.6.6", "10.0.0.1", "10.0.0.2"


def test_failures_from_one_host_lock_that_host_out_not_the_users_known_host() -> None:
    g = guard(user_lockout_after=1000)
    g.login_succeeded("alice", HOME, 0.0)
    now = 0.0
    locked: list[Key] = []
    while not locked:  # the attacker waits out every throttle
        g.check_login("alice", ATTACKER, now)
        locked = g.login_failed("alice", ATTACKER, now)
        now += 100.0 if g.throttling_starts(HOST) else 40.0
    assert Key("login", f"alice@{ATTACKER}") in locked
    with pytest.raises(LockedOut, match=ATTACKER):
        g.check_login("alice", ATTACKER, now)
    g.check_login("alice", HOME, now)  # the real user logs in where it always does
    g.check_login("alice", NEW, now)  # and from a new host too: only the pair is locked


def test_the_backstop_locks_a_distributed_guess_out_but_not_on_known_hosts() -> None:
    g = guard(user_lockout_after=20)
    g.login_succeeded("alice", HOME, 0.0)
    locked: list[Key] = []
    for index in range(20):  # 20 hosts, one failure each: no host, no pair throttled
        host = f"10.9.0.{index}"
        g.check_login("alice", host, 1.0)
        locked = g.login_failed("alice", host, 1.0)
    assert locked == [Key("user", "alice")]
    with pytest.raises(LockedOut, match="user alice is locked out after 20 failed logins"):
        g.check_login("alice", NEW, 2.0)
    g.check_login("alice", HOME, 2.0)  # a known host is not locked out by the backstop
    assert not g.known_host("alice", HOME, 1001.0)  # known too long ago: no longer


def test_known_hosts_are_bounded_and_a_new_password_lifts_the_users_locks() -> None:
    g = guard(user_lockout_after=6)
    for index in range(40):
        g.login_succeeded("alice", f"10.1.0.{index}", float(index))
    assert not g.known_host("alice", "10.1.0.0", 40.0)  # the oldest went
    assert g.known_host("alice", "10.1.0.39", 40.0)
    for index in range(6):
        g.login_failed("alice", f"10.9.0.{index}", 50.0)
    g.login_failed("alice", NEW, 50.0)
    with pytest.raises(LockedOut):
        g.check_login("alice", NEW, 50.0)
    g.forget_user("alice")
    assert g._entries.keys() == {Key("host", f"10.9.0.{i}") for i in range(6)} | {
        Key("host", NEW)}
    g.check_login("alice", NEW, 50.0)
