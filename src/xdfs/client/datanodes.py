"""Connections from a client to DataNodes: one RpcClient per address, made on first use.

Block reads and writes fail over between *replicas*, not between tries of one address, so
each DataNode connection makes a single try per call (``tries_per_address=1``): a dead
DataNode costs one connect timeout, then the reader or writer moves on.
"""

from __future__ import annotations

import math
import select
import ssl
import threading
import time
from dataclasses import replace
from typing import Generic

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
    ) -> InlineUploads[Resp]:
        """Upload ``data`` (one chunk) to every address of ``requests`` from the calling
        thread: all are sent at once, so the DataNodes work together; their answers are
        read by the returned :class:`InlineUploads` (an address that could not be sent to
        has its error there already)."""
        uploads: InlineUploads[Resp] = InlineUploads(
            list(requests), time.monotonic() + self.config.call_timeout_s)
        crc = crc32c.crc32c(data) if data else None  # once for every target
        try:
            for address, request in requests.items():
                try:
                    uploads.started[address] = self.get(address).start_upload_inline(
                        method, request, data, crc)
                except (XdfsError, OSError) as exc:
                    uploads.outcomes[address] = exc
        except BaseException:  # Ctrl-C: the ones sent are dropped with their connections
            uploads.abandon()
            raise
        return uploads

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


class InlineUploads(Generic[Resp]):
    """Uploads sent from a caller's thread (:meth:`DataNodePool.store_inline`), their
    answers read from that thread as they come, each address's outcome in ``outcomes``
    (its answer or its error). :meth:`abandon` the rest when giving up (a no-op once all
    were read)."""

    def __init__(self, addresses: list[str], deadline: float) -> None:
        self.addresses = addresses
        self.deadline = deadline  # (monotonic) for every answer
        self.started: dict[str, BlockingUpload[Resp]] = {}
        self.outcomes: dict[str, Resp | XdfsError | OSError] = {}

    @property
    def pending(self) -> int:
        """Answers still to read."""
        return len(self.started)

    def next(self) -> str:
        """Read whichever answer comes first (an upload already answered first); returns
        its address (its outcome is in ``outcomes``)."""
        assert self.started, "InlineUploads.next with no answer to wait for"
        address = self._first_ready()
        upload = self.started.pop(address)
        try:
            self.outcomes[address] = upload.result(max(0.0, self.deadline - time.monotonic()))
        except (XdfsError, OSError) as exc:
            self.outcomes[address] = exc
        return address

    def _first_ready(self) -> str:
        """The address whose answer can be read first: one in hand, else the first whose
        socket turns readable by the deadline (else any: its read then times out)."""
        for address, upload in self.started.items():
            if upload.in_hand():
                return address
        by_fd = {upload.fileno(): address for address, upload in self.started.items()}
        if len(by_fd) > 1:
            poll = select.poll()  # (no descriptor limit, unlike select.select)
            for fd in by_fd:
                poll.register(fd, select.POLLIN)
            wait_ms = max(0, math.ceil((self.deadline - time.monotonic()) * 1000))
            ready = poll.poll(wait_ms)
            if ready:
                return by_fd[ready[0][0]]
        return next(iter(self.started))

    def all(self) -> dict[str, Resp | XdfsError | OSError]:
        """Every address's outcome (in the order of the requests), reading the answers
        still to come."""
        try:
            while self.started:
                self.next()
        finally:
            self.abandon()  # interrupted before an answer: no-op otherwise
        return {address: self.outcomes[address] for address in self.addresses}

    def none_failed(self) -> bool:
        """Whether every outcome so far is an answer (no target failed yet)."""
        return not any(isinstance(outcome, XdfsError | OSError)
                       for outcome in self.outcomes.values())

    def abandon(self) -> None:
        """Give up the answers not read (their connections are closed)."""
        started, self.started = self.started, {}
        for upload in started.values():
            upload.abandon()
