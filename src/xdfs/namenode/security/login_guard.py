"""Failed-login throttling and lockout (pure: the caller passes the time in).

Password guessing is slowed per *key*. A login of an existing user from a client host
counts against three (:meth:`LoginGuard.login_keys`):

* the user on that host (``login alice@10.0.0.9``) and the host itself (every user it
  tries): after ``throttle_after`` failures in a row the key must wait before its next
  attempt, the wait doubling with each further failure (``delay_s``, ``2 * delay_s`` ...);
  after ``lockout_after`` failures it is locked out for ``lockout_s``, even with the right
  password (tokens keep working: they are not password checks);
* the user on every host (``user alice``), the backstop against a guess spread over many
  hosts: never throttled, locked out after ``user_lockout_after`` failures, and that lock
  does not apply on the user's *known hosts*, the ones it logged in from with its password
  within ``known_host_s`` (at most :data:`KNOWN_HOSTS_MAX` per user). So failures from
  elsewhere, however many, never lock a user out where it usually logs in.

A key's failures are forgotten ``window_s`` after its last one; a success forgets those of
the user on that host (not the host's: one good account must not reset the count of a host
guessing at others; not the user's: the real user logging in must not reset a distributed
guess). Attempts refused here cost no password check and count as no failure.

Only existing users get keys, so guessing at random names grows nothing but the host's
count; keys are pruned once their failures are forgotten.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdfs.config import NameNodeConfig
from xdfs.errors import LockedOut, LoginThrottled

#: Entries kept before a failure prunes the forgotten ones (doubles as they stay needed).
_PRUNE_AT = 1024
#: A failure count never reached (the user-wide key is never throttled).
_NEVER = 2**62
#: Known hosts remembered per user (the most recent ones).
KNOWN_HOSTS_MAX = 16


@dataclass(frozen=True)
class GuardSettings:
    throttle_after: int
    delay_s: float
    lockout_after: int
    lockout_s: float
    window_s: float
    #: The user-wide backstop (see the module doc).
    user_lockout_after: int = 300
    known_host_s: float = 604800.0

    @classmethod
    def from_config(cls, config: NameNodeConfig) -> GuardSettings:
        return cls(
            config.login_failures_throttle, config.login_throttle_delay_s,
            config.login_failures_lockout, config.login_lockout_s,
            config.login_failure_window_s, config.login_failures_user_lockout,
            config.login_known_host_s,
        )


@dataclass
class _Failures:
    count: int = 0
    last_s: float = 0.0
    locked_until_s: float = 0.0


@dataclass(frozen=True)
class Key:
    """One thing failures are counted for; ``name`` is how messages call it."""

    kind: str  # "login" (user@host), "host" or "user" (the backstop)
    value: str

    @property
    def name(self) -> str:
        return f"{self.kind} {self.value}"


class LoginGuard:
    def __init__(self, settings: GuardSettings) -> None:
        self.settings = settings
        self._entries: dict[Key, _Failures] = {}
        self._prune_at = _PRUNE_AT
        #: user -> {host: when it last logged in there with its password}
        self._known: dict[str, dict[str, float]] = {}

    # -- logins (the policy of the module doc) --------------------------------------------

    def login_keys(self, user: str | None, host: str) -> list[Key]:
        """The keys a login of ``user`` (None: no such user) from ``host`` counts against."""
        if user is None:
            return [Key("host", host)]
        return [Key("login", f"{user}@{host}"), Key("host", host), Key("user", user)]

    def check_login(self, user: str | None, host: str, now_s: float) -> None:
        """Raise LockedOut or LoginThrottled when this login may not be tried now."""
        keys = self.login_keys(user, host)
        if user is not None and self.known_host(user, host, now_s):
            keys.pop()  # the backstop does not lock a user out where it logs in
        self.check(keys, now_s)

    def login_failed(self, user: str | None, host: str, now_s: float) -> list[Key]:
        return self.failed(self.login_keys(user, host), now_s)

    def login_succeeded(self, user: str, host: str, now_s: float) -> None:
        self.succeeded(Key("login", f"{user}@{host}"))
        known = self._known.setdefault(user, {})
        known.pop(host, None)  # (re)inserted last: the dict keeps the most recent at its end
        known[host] = now_s
        while len(known) > KNOWN_HOSTS_MAX:
            del known[next(iter(known))]

    def known_host(self, user: str, host: str, now_s: float) -> bool:
        seen = self._known.get(user, {}).get(host)
        return seen is not None and now_s - seen <= self.settings.known_host_s

    def forget_user(self, user: str) -> None:
        """A new password: the user's lockout ends (its known hosts stay)."""
        self.succeeded(Key("user", user))
        for key in [k for k in self._entries if k.kind == "login"
                    and k.value.rpartition("@")[0] == user]:
            del self._entries[key]

    # -- keys -----------------------------------------------------------------------------

    def _limits(self, key: Key) -> tuple[int, int]:
        """(failures before throttling, failures before the lockout) of ``key``."""
        if key.kind == "user":
            return _NEVER, self.settings.user_lockout_after
        return self.settings.throttle_after, self.settings.lockout_after

    def check(self, keys: Sequence[Key], now_s: float) -> None:
        """Raise LockedOut or LoginThrottled when any key may not try now."""
        for key in keys:
            entry = self._current(key, now_s)
            if entry is None:
                continue
            if entry.locked_until_s > now_s:
                raise LockedOut(
                    f"{key.name} is locked out after {self._limits(key)[1]} failed "
                    f"logins; try again in {entry.locked_until_s - now_s:.0f} s"
                )
            wait_s = entry.last_s + self._delay_s(key, entry.count) - now_s
            if wait_s > 0:
                raise LoginThrottled(
                    f"too many failed logins for {key.name}; try again in {wait_s:.1f} s"
                )

    def failed(self, keys: Sequence[Key], now_s: float) -> list[Key]:
        """Count a failure for each key; returns the keys it locks out now."""
        locked: list[Key] = []
        for key in keys:
            entry = self._current(key, now_s) or self._entries.setdefault(key, _Failures())
            entry.count += 1
            entry.last_s = now_s
            if entry.count >= self._limits(key)[1]:
                entry.count = 0
                entry.locked_until_s = now_s + self.settings.lockout_s
                locked.append(key)
        if len(self._entries) >= self._prune_at:
            self._prune(now_s)
        return locked

    def throttling_starts(self, key: Key) -> bool:
        """Whether ``key``'s last failure is the first that makes it wait (to log once)."""
        entry = self._entries.get(key)
        return entry is not None and entry.count == self._limits(key)[0]

    def succeeded(self, key: Key) -> None:
        self._entries.pop(key, None)

    def _delay_s(self, key: Key, count: int) -> float:
        over = count - self._limits(key)[0]
        if over < 0:
            return 0.0
        return min(self.settings.lockout_s, self.settings.delay_s * 2.0 ** min(over, 64))

    def _current(self, key: Key, now_s: float) -> _Failures | None:
        """The key's entry, None (and dropped) once it is forgotten."""
        entry = self._entries.get(key)
        if entry is not None and self._forgotten(entry, now_s):
            del self._entries[key]
            return None
        return entry

    def _forgotten(self, entry: _Failures, now_s: float) -> bool:
        return entry.locked_until_s <= now_s and now_s - entry.last_s > self.settings.window_s

    def _prune(self, now_s: float) -> None:
        for key in [k for k, e in self._entries.items() if self._forgotten(e, now_s)]:
            del self._entries[key]
        for user in [u for u, hosts in self._known.items()
                     if all(now_s - seen > self.settings.known_host_s for seen in hosts.values())]:
            del self._known[user]
        self._prune_at = max(_PRUNE_AT, 2 * len(self._entries))
