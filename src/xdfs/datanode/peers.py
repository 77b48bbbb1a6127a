"""Calls from this DataNode to other DataNodes (replication copies, block recovery steps).

One try per address: a dead peer costs one connect timeout, and the NameNode schedules the
work again (elsewhere, or later), as clients treat DataNodes. The peer authorises each call
by the block token the NameNode put in the command.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import TYPE_CHECKING

from xdfs.errors import XdfsError
from xdfs.rpc.client import RpcClient
from xdfs.rpc.messages import PROTOCOL_VERSION, Hello
from xdfs.rpc.tls import client_context

if TYPE_CHECKING:
    from xdfs.config.rpc import RpcConfig
    from xdfs.datanode.storage import DataStorage

log = logging.getLogger(__name__)


class Peers:
    """Connections to other DataNodes, as this node (its id and cluster are read at each
    call: registration may set the cluster after this is made)."""

    def __init__(self, rpc: RpcConfig, storage: DataStorage) -> None:
        self._storage = storage
        self._rpc_config = replace(rpc, tries_per_address=1)
        self._ssl = client_context(rpc)

    @property
    def client_name(self) -> str:
        return f"datanode:{self._storage.node_id}"

    @contextlib.asynccontextmanager
    async def connect(self, address: str) -> AsyncIterator[RpcClient]:
        hello = Hello(PROTOCOL_VERSION, cluster_id=self._storage.cluster_id,
                      client_name=self.client_name)
        rpc = RpcClient(address, self._rpc_config, hello=hello, ssl_context=self._ssl)
        try:
            yield rpc
        finally:
            await rpc.close()


def log_failure(what: str, address: str, error: BaseException) -> None:
    """An expected failure of one peer in one line; anything else with its traceback."""
    if isinstance(error, XdfsError | OSError):
        log.warning("%s: %s failed: %s", what, address, error)
    else:
        log.error("%s: %s failed", what, address, exc_info=error)
