"""Connections from a client to DataNodes: one RpcClient per address, made on first use.

Block reads and writes fail over between *replicas*, not between tries of one address, so
each DataNode connection makes a single try per call (``tries_per_address=1``): a dead
DataNode costs one connect timeout, then the reader or writer moves on.
"""

from __future__ import annotations

import ssl
import threading
import time
from dataclasses import replace

import crc32c

from xdfs.config import RpcConfig
from xdfs.errors import XdfsError
from xdfs.rpc.client import BlockingUpload, RpcClient
from xdfs.rpc.messages import PROTOCOL_VERSION, Hello
from xdfs.rpc.service import Method, Req, Resp


class DataNodePool:
    def __init__(
        self, config: RpcConfig, client_name: str, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self.config = replace(config, tries_per_address=1)
        self.hello = Hello(PROTOCOL_VERSION, client_name=client_name)
        self.ssl_context = ssl_context
        self._clients: dict[str, RpcClient] = {}
        self._lock = threading.Lock()  # callers' threads (store_inline) and the loop's

    def get(self, address: str) -> RpcClient:
        client = self._clients.get(address)
        if client is None:
            with self._lock:
                client = self._clients.get(address)
                if client is None:
                    client = RpcClient(address, self.config, hello=self.hello,
                                       ssl_context=self.ssl_context)
                    self._clients[address] = client
        return client

    def store_inline(
        self, method: Method[Req, Resp], requests: dict[str, Req], data: bytes
    ) -> dict[str, Resp | XdfsError | OSError]:
        """Upload ``data`` (one chunk) to every address of ``requests`` from the calling
        thread: all are sent first, then the answers collected, so the DataNodes work at
        once. Each address's outcome: its answer or its error."""
        outcomes: dict[str, Resp | XdfsError | OSError] = {}
        started: dict[str, BlockingUpload[Resp]] = {}
        crc = crc32c.crc32c(data) if data else None  # once for every target
        try:
            for address, request in requests.items():
                try:
                    started[address] = self.get(address).start_upload_inline(
                        method, request, data, crc)
                except (XdfsError, OSError) as exc:
                    outcomes[address] = exc
            deadline = time.monotonic() + self.config.call_timeout_s
            for address, upload in started.items():
                try:
                    outcomes[address] = upload.result(max(0.0, deadline - time.monotonic()))
                except (XdfsError, OSError) as exc:
                    outcomes[address] = exc
        finally:
            for upload in started.values():
                upload.abandon()  # interrupted before its answer: no-op otherwise
        return {address: outcomes[address] for address in requests}

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
