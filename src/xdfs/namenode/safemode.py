"""Safe mode (pure): while on, the namespace is read-only.

Entered by an operator (``admin -safemode enter``) or at startup until enough blocks are
reported (the block threshold arrives with the DataNodes). Writes fail with
:class:`~xdfs.errors.SafeModeError` naming the reason.
"""

from __future__ import annotations

from xdfs.errors import SafeModeError


class SafeMode:
    def __init__(self) -> None:
        self.manual = False
        self.startup_reason = ""

    @property
    def on(self) -> bool:
        return self.manual or bool(self.startup_reason)

    @property
    def reason(self) -> str:
        if self.manual:
            return "safe mode was turned on by an administrator; `admin -safemode leave` ends it"
        return self.startup_reason

    def enter(self) -> None:
        self.manual = True

    def leave(self) -> None:
        self.manual = False
        self.startup_reason = ""

    def check_writable(self, operation: str) -> None:
        if self.on:
            raise SafeModeError(f"cannot {operation}: NameNode is in safe mode ({self.reason})")
