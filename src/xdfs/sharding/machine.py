"""The one dispatch rule of the sharding state machines: ``on(event)`` calls the handler
named ``_on_<EventClass>``; an event a machine does not take is a typed error (a driver
bug, never silently dropped)."""

from __future__ import annotations

from typing import Any

from xdfs.errors import ShardingError


def dispatch(machine: object, event: object) -> Any:
    handler = getattr(machine, f"_on_{type(event).__name__}", None)
    if handler is None:
        raise ShardingError(f"{type(machine).__name__} takes no {type(event).__name__}")
    return handler(event)
