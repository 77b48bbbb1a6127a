"""Failed-login throttling and lockout (pure: the caller passes the time in).

Password guessing is slowed per *key*: each existing user name and each client host is one.
After ``throttle_after`` failures in a row a key must wait before its next attempt, the
wait doubling with each further failure (``delay_s``, ``2 * delay_s`` ...); after
``lockout_after`` failures it is locked out for ``lockout_s``, even with the right password
(tokens keep working: they are not password checks). A key's failures are forgotten
``window_s`` after its last one, and a success forgets a user's (not a host's: one good
account must not reset the count of a host guessing at others). Attempts refused here cost
no password check and count as no failure.

Only existing users get a key, so guessing at random names grows nothing but the host's
count; hosts are pruned once their failures are forgotten.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdfs.config import NameNodeConfig
from xdfs.errors import LockedOut, LoginThrottled

#: Entries kept before a failure prunes the forgotten ones (doubles as they stay needed).
_PRUNE_AT = 1024


@dataclass(frozen=True)
class GuardSettings:
    throttle_after: int
    delay_s: float
    lockout_after: int
    lockout_s: float
    window_s: float

    @classmethod
    def from_config(cls, config: NameNodeConfig) -> GuardSettings:
        return cls(
            config.login_failures_throttle, config.login_throttle_delay_s,
            config.login_failures_lockout, config.login_lockout_s,
            config.login_failure_window_s,
        )


@dataclass
class _Failures:
    count: int = 0
    last_s: float = 0.0
    locked_until_s: float = 0.0


@dataclass(frozen=True)
class Key:
    """One thing failures are counted for; ``name`` is how messages call it."""

    kind: str  # "user" or "host"
    value: str

    @property
    def name(self) -> str:
        return f"{self.kind} {self.value}"


class LoginGuard:
    def __init__(self, settings: GuardSettings) -> None:
        self.settings = settings
        self._entries: dict[Key, _Failures] = {}
        self._prune_at = _PRUNE_AT

    def check(self, keys: Sequence[Key], now_s: float) -> None:
        """Raise LockedOut or LoginThrottled when any key may not try now."""
        for key in keys:
            entry = self._current(key, now_s)
            if entry is None:
                continue
            if entry.locked_until_s > now_s:
                raise LockedOut(
                    f"{key.name} is locked out after {self.settings.lockout_after} failed "
                    f"logins; try again in {entry.locked_until_s - now_s:.0f} s"
                )
            wait_s = entry.last_s + self._delay_s(entry.count) - now_s
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
            if entry.count >= self.settings.lockout_after:
                entry.count = 0
                entry.locked_until_s = now_s + self.settings.lockout_s
                locked.append(key)
        if len(self._entries) >= self._prune_at:
            self._prune(now_s)
        return locked

    def throttling_starts(self, key: Key) -> bool:
        """Whether ``key``'s last failure is the first that makes it wait (to log once)."""
        entry = self._entries.get(key)
        return entry is not None and entry.count == self.settings.throttle_after

    def succeeded(self, key: Key) -> None:
        self._entries.pop(key, None)

    def _delay_s(self, count: int) -> float:
        over = count - self.settings.throttle_after
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
        self._prune_at = max(_PRUNE_AT, 2 * len(self._entries))
