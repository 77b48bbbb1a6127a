"""Writer leases (pure): which client last renewed when, and whose it is.

The namespace records each file under construction with its holder; this table only
tracks when each holder last showed signs of life (create, add_block, renew_lease ...).
A holder silent past the soft limit may be overtaken by another writer; past the hard
limit the NameNode recovers its files itself (closes them with what their DataNodes agree
on: ``block_recovery.py``).
Keyed by holder, not path, so renames of open files need no bookkeeping here.

A holder (a client name) belongs to the user who first created a file with it: no other
user may write through it or renew it, even knowing the name. After a restart each holder
belongs to the owner of its open files (who created them). A holder that holds no file any
more is forgotten, with its user.
"""

from __future__ import annotations

from collections.abc import Iterable

from xdfs.errors import AccessDenied


class LeaseManager:
    def __init__(self) -> None:
        self._renewed_s: dict[str, float] = {}
        self._users: dict[str, str] = {}

    def take(self, holder: str, user: str, now_s: float) -> None:
        """``user`` writes through ``holder`` now (binding it on first use); AccessDenied
        when the holder belongs to another user."""
        self.check_user(holder, user)
        self._users.setdefault(holder, user)
        self._renewed_s[holder] = now_s

    def check_user(self, holder: str, user: str) -> None:
        owner = self._users.get(holder)
        if owner is not None and owner != user:
            raise AccessDenied(
                f"Permission denied: client name {holder} belongs to another user (user={user})"
            )

    def restore(self, holder: str, user: str, now_s: float) -> None:
        """At startup: a fresh lease for each holder of an open file, bound to the file's
        owner (the first file's, should a holder's files have different owners)."""
        self._users.setdefault(holder, user)
        self._renewed_s[holder] = now_s

    def user_of(self, holder: str) -> str | None:
        return self._users.get(holder)

    def renew(self, holder: str, user: str, now_s: float) -> None:
        """``renew_lease``: a holder unknown here holds nothing, so there is nothing to do
        (and nothing is remembered for names a client makes up)."""
        if holder in self._users:
            self.take(holder, user, now_s)

    def is_expired(self, holder: str, now_s: float, limit_s: float) -> bool:
        """True when ``holder`` has not renewed within ``limit_s`` (unknown holders are)."""
        renewed = self._renewed_s.get(holder)
        return renewed is None or now_s - renewed > limit_s

    def expired(
        self, open_files: Iterable[tuple[str, str]], now_s: float, limit_s: float
    ) -> list[tuple[str, str]]:
        """The ``(path, holder)`` pairs among ``open_files`` whose holder is past ``limit_s``."""
        return [
            (path, holder) for path, holder in open_files if self.is_expired(holder, now_s, limit_s)
        ]

    def drop_idle(self, active_holders: set[str]) -> None:
        """Forget holders that no longer hold any file."""
        for holder in [h for h in self._renewed_s if h not in active_holders]:
            del self._renewed_s[holder]
        for holder in [h for h in self._users if h not in active_holders]:
            del self._users[holder]
