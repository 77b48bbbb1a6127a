"""``LogClient`` (synchronous) and ``AsyncLogClient``: the log service's Python API.

Both take the instances' addresses and the log service secret, by default from the
configuration (``client.logservice``, ``client.logservice_password``, which ``xdfs dev
--logservice`` writes into client.toml). A call about a log goes to the instance holding
its writer: another instance answers NotLogWriter naming it and the client follows, and
remembers. If the holder stops answering, the client goes back to any instance, which
takes the writer over once the holder's ZooKeeper session has expired (the client keeps
trying for ``rpc.call_timeout_s``).
"""

from __future__ import annotations

import asyncio
import builtins
import time
from collections.abc import Sequence
from typing import Any, TypeVar

import msgspec

from xdfs.config import XdfsConfig, load_config
from xdfs.errors import ConfigError, NotLogWriter, Unavailable
from xdfs.log.meta import NO_WRITER
from xdfs.protocol import log as lg
from xdfs.protocol.log import LSN_ZERO, LogSettings, Lsn, ReadRecord, Record
from xdfs.rpc.client import RpcClient
from xdfs.rpc.messages import PROTOCOL_VERSION, Empty, Hello
from xdfs.rpc.service import Method
from xdfs.rpc.sync import LoopThread
from xdfs.rpc.tls import client_context

Req = TypeVar("Req", bound=msgspec.Struct)
Resp = TypeVar("Resp", bound=msgspec.Struct)

#: Redirects (NotLogWriter) followed for one call before giving up.
_REDIRECTS_MAX = 4
#: Pause before asking again when the writer's instance is gone (its lock not yet free).
_RETRY_PAUSE_S = 0.5


def as_record(value: Record | bytes | str) -> Record:
    if isinstance(value, Record):
        return value
    return Record(value.encode() if isinstance(value, str) else value)


class AsyncLogClient:
    def __init__(self, addresses: str | Sequence[str] | None = None, *,
                 password: str | None = None, config: XdfsConfig | None = None) -> None:
        self.config = config or load_config()
        settings = self.config.client
        if addresses is None:
            addresses = settings.logservice
        if isinstance(addresses, str):
            addresses = [a.strip() for a in addresses.split(",") if a.strip()]
        if not addresses:
            raise ConfigError("no log service address: set client.logservice (xdfs dev "
                              "--logservice writes it into client.toml)")
        self.hello = Hello(PROTOCOL_VERSION, user=lg.LOG_USER,
                           password=settings.logservice_password if password is None
                           else password)
        self._any = self._client(list(addresses))
        self._direct: dict[str, RpcClient] = {}
        self._writer_at: dict[str, str] = {}
        #: The writer epoch this client opened, by log: its appends carry it.
        self._epochs: dict[str, int] = {}

    def _client(self, addresses: list[str]) -> RpcClient:
        rpc = self.config.rpc
        return RpcClient(addresses, rpc, hello=self.hello, ssl_context=client_context(rpc))

    async def _call(self, method: Method[Req, Resp], request: Req, log: str | None = None,
                    timeout_s: float | None = None) -> Resp:
        deadline = time.monotonic() + self.config.rpc.call_timeout_s
        redirects = 0
        while True:
            holder = self._writer_at.get(log or "")
            client = self._any if holder is None else self._direct.setdefault(
                holder, self._client([holder]))
            try:
                return await client.call(method, request, timeout_s=timeout_s)
            except NotLogWriter as exc:
                redirects += 1
                if redirects > _REDIRECTS_MAX or log is None:
                    raise
                self._writer_at[log] = exc.holder
            except Unavailable as exc:
                if time.monotonic() > deadline or (holder is None and not (
                        method.idempotent and exc.retriable)):
                    raise
                self._writer_at.pop(log or "", None)  # the holder is gone: ask any instance
                # (which names it until its lock expires: those redirects are bounded by
                # the deadline, not counted)
                redirects = 0
                await asyncio.sleep(_RETRY_PAUSE_S)

    async def create(self, name: str, settings: LogSettings | None = None) -> lg.LogStat:
        return await self._call(lg.CREATE, lg.CreateLogRequest(name, settings))

    async def stat(self, name: str) -> lg.LogStat:
        return await self._call(lg.STAT, lg.NameRequest(name), name)

    async def list(self) -> builtins.list[str]:
        return (await self._call(lg.LIST, Empty())).names

    async def delete(self, name: str) -> None:
        await self._call(lg.DELETE, lg.NameRequest(name), name)
        self._epochs.pop(name, None)  # a log made again under the name has its own writers

    async def open_writer(self, name: str) -> int:
        """Become the one writer of ``name``: a new writer epoch that fences the previous
        writer -- appends under an older epoch (another client's, or this client's
        before) fail with LogFenced and never show. This client's later appends to the
        log carry the epoch; returned."""
        epoch = (await self._call(lg.OPEN_WRITER, lg.NameRequest(name), name)).epoch
        self._epochs[name] = epoch
        return epoch

    async def append(self, name: str, record: Record | bytes | str, *,
                     epoch: int | None = None) -> Lsn:
        return (await self.append_batch(name, [record], epoch=epoch))[0]

    async def append_batch(self, name: str, records: Sequence[Record | bytes | str], *,
                           epoch: int | None = None) -> builtins.list[Lsn]:
        """Append ``records`` as one entry; their LSNs. ``epoch``: the writer epoch to
        append under -- by default the one this client's :meth:`open_writer` got for the
        log, else :data:`NO_WRITER` (0): one of many producers, appending to whichever
        writer is current and never fenced."""
        if epoch is None:
            epoch = self._epochs.get(name, NO_WRITER)
        request = lg.AppendRequest(name, [as_record(r) for r in records], epoch)
        return (await self._call(lg.APPEND, request, name)).lsns

    async def read(self, name: str, from_lsn: Lsn = LSN_ZERO, max_bytes: int = 1 << 20,
                   wait_s: float = 0.0, reader: str = ""
                   ) -> tuple[builtins.list[ReadRecord], Lsn]:
        """Records from ``from_lsn`` (at or above the truncation point, or, for a
        registered ``reader``, at or above its position) and the LSN to read next."""
        timeout = self.config.rpc.call_timeout_s + wait_s
        request = lg.ReadRequest(name, from_lsn, max_bytes, wait_s, reader)
        answer = await self._call(lg.READ, request, name, timeout_s=timeout)
        return answer.records, answer.next_lsn

    async def truncate(self, name: str, lsn: Lsn) -> Lsn:
        return (await self._call(lg.TRUNCATE, lg.TruncateRequest(name, lsn), name)).lsn

    async def truncated_lsn(self, name: str) -> Lsn:
        return (await self._call(lg.TRUNCATED_LSN, lg.NameRequest(name), name)).lsn

    async def register_reader(self, name: str, reader: str, position: Lsn | None) -> None:
        await self._call(lg.SET_READER, lg.ReaderRequest(name, reader, position), name)

    async def tso(self, count: int = 1) -> int:
        """The first of ``count`` reserved timestamps (strictly above every earlier one)."""
        return (await self._call(lg.TSO, lg.TsoRequest(count))).first

    async def close(self) -> None:
        await self._any.close()
        for client in self._direct.values():
            await client.close()

    async def __aenter__(self) -> AsyncLogClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class LogClient:
    """The synchronous face of :class:`AsyncLogClient` (same methods, blocking)."""

    def __init__(self, addresses: str | Sequence[str] | None = None, *,
                 password: str | None = None, config: XdfsConfig | None = None) -> None:
        self._loop = LoopThread("xdfs-log")
        self._client = AsyncLogClient(addresses, password=password, config=config)

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._client, name)
        if not asyncio.iscoroutinefunction(method):
            raise AttributeError(name)
        return lambda *args, **kwargs: self._loop.run(method(*args, **kwargs))

    def close(self) -> None:
        self._loop.run(self._client.close())
        self._loop.close()

    def __enter__(self) -> LogClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
