"""Connections from a client to DataNodes: one RpcClient per address, made on first use.

Block reads and writes fail over between *replicas*, not between tries of one address, so
each DataNode connection makes a single try per call (``tries_per_address=1``): a dead
DataNode costs one connect timeout, then the reader or writer moves on.
"""

from __future__ import annotations

import ssl
from dataclasses import replace

from xdfs.config import RpcConfig
from xdfs.rpc.client import RpcClient
from xdfs.rpc.messages import PROTOCOL_VERSION, Hello


class DataNodePool:
    def __init__(
        self, config: RpcConfig, client_name: str, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self.config = replace(config, tries_per_address=1)
        self.hello = Hello(PROTOCOL_VERSION, client_name=client_name)
        self.ssl_context = ssl_context
        self._clients: dict[str, RpcClient] = {}

    def get(self, address: str) -> RpcClient:
        client = self._clients.get(address)
        if client is None:
            client = RpcClient(address, self.config, hello=self.hello, ssl_context=self.ssl_context)
            self._clients[address] = client
        return client

    async def forget(self, address: str) -> None:
        """Drop the connection to a DataNode that failed (a later call reconnects)."""
        client = self._clients.pop(address, None)
        if client is not None:
            await client.close()

    async def close(self) -> None:
        clients = list(self._clients.values())
        self._clients.clear()
        for client in clients:
            await client.close()
