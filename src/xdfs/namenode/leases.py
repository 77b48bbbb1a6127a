"""Writer leases (pure): which client last renewed when.

The namespace records each file under construction with its holder; this table only
tracks when each holder last showed signs of life (create, add_block, renew_lease ...).
A holder silent past the soft limit may be overtaken by another writer; past the hard
limit the NameNode recovers its files itself (closes them with what their DataNodes agree
on: ``block_recovery.py``).
Keyed by holder, not path, so renames of open files need no bookkeeping here.
"""

from __future__ import annotations

from collections.abc import Iterable


class LeaseManager:
    def __init__(self) -> None:
        self._renewed_s: dict[str, float] = {}

    def renew(self, holder: str, now_s: float) -> None:
        self._renewed_s[holder] = now_s

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
