"""What every config section is built from: byte units, :func:`setting` (a field with its
documentation) and :func:`require` (a validation failure is a ConfigError)."""

from __future__ import annotations

from dataclasses import field
from typing import Any

from xdfs.errors import ConfigError

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


def setting(default: Any, doc: str) -> Any:
    """A config field with its documentation attached (read by ``xdfs conf --markdown``)."""
    return field(default=default, metadata={"doc": doc})


def require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)
