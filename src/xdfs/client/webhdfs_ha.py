"""WebHDFS against an HA pair: find the gateway of the active NameNode.

Every NameNode of an HA pair serves WebHDFS; a standby answers every request with HDFS's
``StandbyException`` (HTTP 403). fsspec's ``webhdfs`` file system takes one host and does
not move on by itself, so :func:`active_webhdfs` asks each gateway in turn (a cheap
``GETFILESTATUS`` of ``/``, no credentials needed to be refused as standby) and returns the
first that is not standby, and :func:`webhdfs_filesystem` opens fsspec's client on it.
After a failover the caller asks again (the old active answers StandbyException).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from xdfs.common.addresses import parse_address
from xdfs.errors import Standby, Unavailable

STANDBY_EXCEPTION = "StandbyException"


def is_standby(address: str, timeout_s: float) -> bool:
    """Whether the gateway at ``address`` answers StandbyException; Unavailable when it
    does not answer at all."""
    url = f"http://{address}/webhdfs/v1/?op=GETFILESTATUS"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s):
            return False
    except urllib.error.HTTPError as exc:  # 401 (credentials needed) is an active answer
        try:
            body = json.loads(exc.read() or b"{}")
        except ValueError:
            return False
        remote = body.get("RemoteException", {}) if isinstance(body, dict) else {}
        return bool(remote.get("exception") == STANDBY_EXCEPTION)
    except (OSError, ValueError) as exc:
        raise Unavailable(f"WebHDFS at {address}: {exc}") from None


def active_webhdfs(addresses: Sequence[str], timeout_s: float = 5.0) -> str:
    """The first of ``addresses`` (host:port of WebHDFS gateways) that is not standby."""
    failures = []
    for address in addresses:
        try:
            if not is_standby(address, timeout_s):
                return address
            failures.append(f"{address}: standby")
        except Unavailable as exc:
            failures.append(exc.message)
    raise Standby(f"no active WebHDFS gateway ({'; '.join(failures)})")


def webhdfs_filesystem(addresses: Sequence[str], timeout_s: float = 5.0,
                       **fsspec_options: Any) -> Any:
    """fsspec's ``webhdfs`` file system on the active gateway among ``addresses``
    (``fsspec_options``: user=, password=, ... as fsspec's WebHDFS takes them)."""
    import fsspec

    host, port = parse_address(active_webhdfs(addresses, timeout_s))
    return fsspec.filesystem("webhdfs", host=host, port=port, skip_instance_cache=True,
                             **fsspec_options)
