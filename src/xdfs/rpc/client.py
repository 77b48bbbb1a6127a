"""The RPC client: one multiplexed connection per server, and failover across servers.

:class:`~xdfs.rpc.client_connection.ClientConnection` carries many calls at once over one
socket, matched by id. :class:`RpcClient` owns connections to a list of addresses and
applies the retry rules:

* a try that never reached the server (connect or handshake failed, ``Overloaded``) is
  always safe to repeat;
* a try that may have run (connection lost mid-call, timeout) is repeated only for
  methods declared ``idempotent`` or ``at_most_once``; every try of one logical call
  carries the same call number (and every connection the client's id, in the handshake),
  so the server's retry cache answers a repeated ``at_most_once`` call with its first
  outcome instead of running it again;
* ``NotActive`` (a standby or backup answered) moves on to the next address at once;
* a timeout is a server that may be paused (TCP open, nothing answered): like a broken
  connection, it moves on to the next address at once, and the next call starts there too,
  also when the method could not be repeated (HDFS fails over on socket timeouts the same
  way); with a single address an idempotent call is simply tried again;
* each address gets ``tries_per_address`` tries with doubling backoff, then the next
  address; the address that last worked is tried first;
* with a :class:`~xdfs.rpc.failover_probe.FailoverProbe` (NameNode clients of an HA list),
  a call unanswered for ``probe.after_s`` makes the client ask the servers who is active;
  when another one has become active under a newer epoch, the waiting call is abandoned
  (its address avoided, as after a timeout) and repeated there if it may be repeated
  (else it fails with ``Superseded``), without waiting for the call timeout.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import os
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, NamedTuple, TypeVar

import msgspec
import msgspec.structs

from xdfs.config import RpcConfig
from xdfs.errors import (
    ConnectionLost,
    NotActive,
    Overloaded,
    RpcTimeout,
    Superseded,
    Unavailable,
    XdfsError,
)
from xdfs.rpc.blocking import BlockingConnection
from xdfs.rpc.client_connection import ClientConnection, DownloadStream
from xdfs.rpc.failover_probe import FailoverProbe, ServiceState, choose_new_active
from xdfs.rpc.messages import (
    CLIENT_ID_BYTES,
    PROTOCOL_VERSION,
    Hello,
    Welcome,
)
from xdfs.rpc.service import Method, Req, Resp
from xdfs.rpc.streams import ChunkSource
from xdfs.rpc.sync import INLINE, LoopThread

T = TypeVar("T")


def backoff_s(try_number: int, initial_s: float, max_s: float) -> float:
    """Delay before try ``try_number`` (0-based) against one address: 0, i, 2i, 4i ... max."""
    if try_number <= 0:
        return 0.0
    # The exponent is capped so huge try numbers cannot overflow the float conversion.
    return float(min(max_s, initial_s * (2 ** min(try_number - 1, 1000))))


class RpcClient:
    """Calls a service served at one or more addresses, with retries and failover."""

    def __init__(
        self,
        addresses: str | Sequence[str],
        config: RpcConfig,
        *,
        hello: Hello | None = None,
        ssl_context: ssl.SSLContext | None = None,
        probe: FailoverProbe | None = None,
    ) -> None:
        """``probe``: leave a server that stopped answering as soon as another one is
        active (:mod:`xdfs.rpc.failover_probe`); used only with several addresses."""
        self.addresses = [addresses] if isinstance(addresses, str) else list(addresses)
        self.probe = probe if len(self.addresses) > 1 else None
        assert self.addresses, "RpcClient needs at least one address"
        self.config = config
        hello = hello or Hello(PROTOCOL_VERSION)
        if not hello.client_id:  # one id per client: all its connections, all addresses
            hello = msgspec.structs.replace(hello, client_id=os.urandom(CLIENT_ID_BYTES))
        self.hello = hello
        #: Numbers logical calls; every try of one call (any connection, any address)
        #: carries the same number.
        self._call_numbers = itertools.count(1)
        self.ssl_context = ssl_context
        self._preferred = 0
        self._connections: dict[str, ClientConnection] = {}
        self._connecting: dict[str, asyncio.Lock] = {}
        #: Blocking connections of synchronous callers not in use now, by address (see
        #: call): a calling thread takes one (or opens one) for a call and puts it back, so
        #: there are as many as calls were ever made at once, whatever threads come and go.
        self._idle: dict[str, collections.deque[BlockingConnection]] = {}
        self._blocking: set[BlockingConnection] = set()  # every open one, for close()
        self._blocking_lock = threading.Lock()
        #: The user the servers authenticated this client as (the last handshake's).
        self.authenticated_user = ""

    @property
    def current_address(self) -> str:
        return self.addresses[self._preferred]

    def avoid(self, address: str) -> None:
        """Start the next call at the address after ``address`` (it timed out, or its
        answers are not to be followed); a success elsewhere then sticks as usual."""
        if address in self.addresses and self.current_address == address:
            self._skip(self.addresses.index(address))

    def _skip(self, index: int) -> None:
        if len(self.addresses) > 1:
            self._preferred = (index + 1) % len(self.addresses)

    async def connection(self, address: str) -> ClientConnection:
        conn = self._connections.get(address)
        if conn is not None and not conn.is_closing:
            return conn
        lock = self._connecting.setdefault(address, asyncio.Lock())
        async with lock:
            conn = self._connections.get(address)
            if conn is None or conn.is_closing:
                conn = await ClientConnection.open(
                    address, self.config, self.hello, self.ssl_context
                )
                self._connections[address] = conn
                self._welcomed(conn.welcome)
            return conn

    def _welcomed(self, welcome: Welcome | None) -> None:
        if welcome is not None:
            self.authenticated_user = welcome.user

    async def close(self) -> None:
        with self._blocking_lock:
            blocking, self._blocking = self._blocking, set()
            self._idle.clear()
        for one in blocking:
            one.close()
        conns = list(self._connections.values())
        self._connections.clear()
        for conn in conns:
            conn.close()
        for conn in conns:
            await conn.wait_closed()

    async def call(
        self, method: Method[Req, Resp], request: Req, *, timeout_s: float | None = None
    ) -> Resp:
        """One unary call, with the retries and failover above.

        From a thread that runs this coroutine itself on behalf of a synchronous client
        (:meth:`~xdfs.rpc.sync.LoopThread.run_inline`), the first try goes over a blocking
        connection that thread takes for the call and nothing awaits the event loop: no hop
        (see :mod:`xdfs.rpc.blocking`). Anything but an answer there (no connection, a
        standby, overloaded, lost, timed out where the call may be repeated) hands the
        call, with the same call number, to the failover above on the loop."""
        deadline = timeout_s or self.config.call_timeout_s
        number = next(self._call_numbers)
        loop = INLINE.loop  # inline_loop(), uncalled
        if loop is not None:
            return self._call_inline(loop, method, request, deadline, number)
        index = self._preferred
        conn = self._connections.get(self.addresses[index])
        if conn is None or conn.is_closing or self.probe is not None:
            return await self._failover_call(method, request, deadline, number)
        # The common case (e.g. a DataNode's reports): the preferred server is connected.
        # The first try goes straight to it, without the failover's try object, watcher
        # and address order; a failed one is counted and the failover goes on from it.
        call_id = 0
        try:
            call_id, future = conn.start_call(method, request, deadline, number)
            return await future
        except asyncio.CancelledError:
            conn.abandon(call_id)
            raise
        except _RETRIED as exc:
            move_on = self._after_failed_try(exc, index, method.retry_safe)
            first = _FirstTry(index, self.config.tries_per_address if move_on else 1,
                              f"{self.addresses[index]}: {exc.message}")
        return await self._failover_call(method, request, deadline, number, first=first)

    async def _failover_call(
        self, method: Method[Req, Resp], request: Req, deadline: float, number: int,
        start: int | None = None, first: _FirstTry | None = None,
    ) -> Resp:
        return await self._with_failover(
            method, lambda conn: conn.call(method, request, deadline, number), restartable=True,
            start=start, first=first,
        )

    # -- synchronous callers: blocking connections, one per call at a time ---------------

    def _call_inline(
        self, loop: LoopThread, method: Method[Req, Resp], request: Req, deadline: float,
        number: int,
    ) -> Resp:
        """The first try of a call over a blocking connection to the preferred address;
        the rules of :meth:`_with_failover` for what follows a failed try."""
        index = self._preferred
        address = self.addresses[index]
        start: int | None = None
        try:
            conn = self._take_blocking(address, method.retry_safe)
        except (Unavailable, Overloaded):  # not sent: the failover path starts over
            return loop.run(self._failover_call(method, request, deadline, number))
        try:
            call_id = conn.request(method, request, number)
            return self._inline_answer(loop, conn, call_id, method, deadline, index)
        except _MovedOn as moved:
            self._moved_on(method.name, method.retry_safe, address, moved.index)
        except _RETRIED as exc:
            if self._after_failed_try(exc, index, method.retry_safe):
                start = (index + 1) % len(self.addresses)
        except XdfsError:  # the call's own error: the connection is fine
            raise
        except BaseException:  # Ctrl-C mid-call: the connection is in an unknown state
            conn.close()
            raise
        finally:
            self._give_back(conn)
        return loop.run(self._failover_call(method, request, deadline, number, start))

    def _inline_answer(
        self, loop: LoopThread, conn: BlockingConnection, call_id: int,
        method: Method[Any, Resp], deadline: float, index: int,
    ) -> Resp:
        """Wait for the answer of ``call_id`` up to ``deadline`` seconds (then RpcTimeout,
        the call cancelled); with a probe, ask who is active every ``probe.after_s`` while
        waiting, as :meth:`_watched` does (the asking runs on the loop)."""
        probe = self.probe
        now = time.monotonic()
        end = now + deadline
        round_end = end if probe is None else now + probe.after_s
        while True:
            try:
                return conn.answer(call_id, method, min(round_end, end) - now)
            except TimeoutError:
                pass
            now = time.monotonic()
            if now >= end:
                conn.cancel(call_id)
                raise RpcTimeout(f"{method.name} got no answer within {deadline} s")
            assert probe is not None
            round_end = now + probe.after_s
            moved_to = loop.run(self._find_active(probe, index))
            if moved_to is not None:
                conn.close()  # abandoned: whatever it answers is not wanted
                raise _MovedOn(moved_to)
            now = time.monotonic()

    def _take_blocking(self, address: str, fresh_ok: bool = False) -> BlockingConnection:
        """An idle open connection to ``address`` (the most recently used), or a new one
        made with the client's hello; the caller owns it until :meth:`_give_back`.
        ``fresh_ok``: see :meth:`BlockingConnection.usable`."""
        idle = self._idle.get(address)
        while idle:
            try:
                conn = idle.pop()  # deque: atomic, any thread
            except IndexError:
                break
            if conn.usable(fresh_ok):
                return conn
            self._forget(conn)
        conn = BlockingConnection.open(address, self.config, self.hello, self.ssl_context)
        with self._blocking_lock:
            self._blocking.add(conn)
        self._welcomed(conn.welcome)
        return conn

    def _give_back(self, conn: BlockingConnection) -> None:
        if conn.closed:
            self._forget(conn)
            return
        idle = self._idle.get(conn.address)
        if idle is None:
            idle = self._idle.setdefault(conn.address, collections.deque())
        idle.append(conn)

    def _forget(self, conn: BlockingConnection) -> None:
        conn.close()
        with self._blocking_lock:
            self._blocking.discard(conn)

    def start_upload_inline(
        self, method: Method[Req, Resp], request: Req, data: bytes, crc: int | None = None
    ) -> BlockingUpload[Resp]:
        """Send an upload of ``data`` (one chunk) from the calling thread over a blocking
        connection to the preferred address, head, chunk and tail in one write
        (:meth:`BlockingConnection.upload`); its answer comes from
        :meth:`BlockingUpload.result`. A single try, no failover: for a caller that has its
        own (the block writer moves on to other DataNodes). ``crc``: the CRC32C of
        ``data``, if known. Errors: Unavailable, Overloaded (not sent), ConnectionLost
        (maybe sent)."""
        conn = self._take_blocking(self.current_address, fresh_ok=True)
        try:
            call_id = conn.upload(method, request, data, next(self._call_numbers), crc)
        except BaseException:
            self._give_back(conn)  # closed by the failed write
            raise
        return BlockingUpload(self, conn, call_id, method)

    async def upload(
        self,
        method: Method[Req, Resp],
        request: Req,
        chunks: ChunkSource,
        *,
        timeout_s: float | None = None,
    ) -> Resp:
        """Stream ``chunks`` to the server. Retried only when ``chunks`` can be replayed
        (a list or tuple) and the method is idempotent or at most once."""
        deadline = timeout_s or self.config.call_timeout_s
        number = next(self._call_numbers)
        return await self._with_failover(
            method,
            lambda conn: conn.upload(method, request, chunks, deadline, number),
            restartable=isinstance(chunks, list | tuple),
        )

    async def download(
        self, method: Method[Req, Resp], request: Req, *, timeout_s: float | None = None
    ) -> DownloadStream:
        """Start a download; failover applies until the head has arrived."""
        deadline = timeout_s or self.config.call_timeout_s
        number = next(self._call_numbers)
        return await self._with_failover(
            method, lambda conn: conn.download(method, request, deadline, number),
            restartable=True,
        )

    async def _with_failover(
        self,
        method: Method[Any, Any],
        attempt: Callable[[ClientConnection], Awaitable[T]],
        *,
        restartable: bool,
        start: int | None = None,
        first: _FirstTry | None = None,
    ) -> T:
        """``start``: the address to try first (default: the preferred one); ``first``:
        tries already made there (it is then the address tried first)."""
        failures: list[str] = []
        count = len(self.addresses)
        begin = self._preferred if start is None else start
        tried = 0
        if first is not None:
            begin, tried = first.at, first.tries
            failures.append(first.failure)
        order = [(begin + i) % count for i in range(count)]
        while order:
            index = order.pop(0)
            address = self.addresses[index]
            for try_number in range(tried, self.config.tries_per_address):
                await self._backoff(try_number)
                sent = _Try(self, address, attempt)
                try:
                    result = await self._watched(index, sent.run())
                except _MovedOn as moved:
                    repeatable = not sent.sent or (method.retry_safe and restartable)
                    self._moved_on(method.name, repeatable, address, moved.index)
                    failures.append(f"{address}: no answer, another server became active")
                    order = [moved.index, *(i for i in order if i != moved.index)]
                    break
                except _NotSent as exc:  # nothing ran: always safe to repeat
                    failures.append(f"{address}: {exc.error.message}")
                    continue
                except _RETRIED as exc:
                    move_on = self._after_failed_try(exc, index, method.retry_safe and restartable)
                    failures.append(f"{address}: {exc.message}")
                    if move_on:
                        break
                    continue
                self._preferred = index
                return result
            tried = 0
        raise Unavailable(f"{method.name}: no server answered ({'; '.join(failures[-6:])})")

    def _after_failed_try(self, error: XdfsError, index: int, repeatable: bool) -> bool:
        """What follows a try at address ``index`` that failed with one of ``_RETRIED``
        (the rules of the module docstring; both the loop's failover and a synchronous
        caller's first try decide here): True to move on to the next address, False to
        try this one again; ``error`` raised when the call may have run and may not be
        repeated (``repeatable``)."""
        if isinstance(error, NotActive):
            return True  # nothing ran; a standby: the others next
        if isinstance(error, Overloaded):
            return False  # nothing ran
        if isinstance(error, RpcTimeout):
            self._skip(index)  # paused or overloaded: the next call starts elsewhere
            if not repeatable:
                raise error
            return len(self.addresses) > 1
        if not repeatable:  # ConnectionLost: maybe sent
            raise error
        return False

    async def _backoff(self, try_number: int) -> None:
        delay = backoff_s(
            try_number, self.config.retry_backoff_initial_s, self.config.retry_backoff_max_s
        )
        if delay:
            await asyncio.sleep(delay)

    def _moved_on(self, name: str, repeatable: bool, address: str, index: int) -> None:
        """A try at ``address`` was abandoned for the new active at ``index``: the next
        calls start there; this one goes there too, unless it was sent and may not be
        repeated (Superseded)."""
        self._preferred = index
        if not repeatable:
            raise Superseded(
                f"{name}: {address} stopped answering and {self.addresses[index]} became "
                "active; the call may or may not have run, and is not one that may be "
                "repeated"
            )

    async def _watched(self, index: int, attempt: Awaitable[T]) -> T:
        """Await ``attempt`` (a try at address ``index``); with a probe, once it has
        waited ``probe.after_s``, ask the servers who is active, a round every
        ``probe.after_s``, and abandon it (:class:`_MovedOn`) as soon as one answer shows
        another server active."""
        probe = self.probe
        if probe is None:
            return await attempt
        loop = asyncio.get_running_loop()
        call = asyncio.ensure_future(attempt)
        asking: asyncio.Future[int | None] | None = None
        try:
            await asyncio.wait((call,), timeout=probe.after_s)
            while not call.done():
                round_end = loop.time() + probe.after_s
                asking = asyncio.ensure_future(self._find_active(probe, index))
                await asyncio.wait((call, asking), return_when=asyncio.FIRST_COMPLETED)
                if call.done():
                    break
                moved_to = asking.result()
                if moved_to is not None:
                    raise _MovedOn(moved_to)
                await asyncio.wait((call,), timeout=max(0.0, round_end - loop.time()))
            return call.result()
        finally:
            _drop(call)
            if asking is not None:
                _drop(asking)

    async def _find_active(self, probe: FailoverProbe, stalled: int) -> int | None:
        """One round: every address asked at once (``probe.after_s`` each); the index of
        a new active, or None. Once the client knows an epoch (an earlier round), the
        first answer showing a newer active decides: a paused server's silence costs
        nothing; before that, the round waits for every answer (or its timeout)."""

        async def ask(index: int) -> tuple[int, ServiceState | None]:
            try:
                async with asyncio.timeout(probe.after_s):
                    conn = await self.connection(self.addresses[index])
                    return index, await probe.ask(conn, probe.after_s)
            except (XdfsError, TimeoutError):
                return index, None

        answers: dict[int, ServiceState] = {}
        asks = [asyncio.ensure_future(ask(i)) for i in range(len(self.addresses))]
        try:
            for next_answer in asyncio.as_completed(asks):
                index, state = await next_answer
                if state is None:
                    continue
                answers[index] = state
                # Known epochs: no need to hear the (probably paused) stalled server.
                found = choose_new_active(stalled, answers, probe.seen_epoch)
                if probe.seen_epoch and found is not None:
                    probe.note(answers)
                    return found
            found = choose_new_active(stalled, answers, probe.seen_epoch)
            probe.note(answers)
            return found
        finally:
            for task in asks:
                _drop(task)


class BlockingUpload(Generic[Resp]):
    """An upload sent by :meth:`RpcClient.start_upload_inline`, its answer still to come;
    the connection is the caller's until :meth:`result` or :meth:`abandon`."""

    def __init__(self, client: RpcClient, conn: BlockingConnection, call_id: int,
                 method: Method[Any, Resp]) -> None:
        self._client, self._conn, self._id, self._method = client, conn, call_id, method
        self._done = False

    def result(self, timeout_s: float) -> Resp:
        """The answer within ``timeout_s`` (RpcTimeout otherwise, the call cancelled)."""
        assert not self._done, "BlockingUpload.result after its end"
        try:
            return self._conn.answer(self._id, self._method, timeout_s)
        except TimeoutError:
            self._conn.cancel(self._id)
            raise RpcTimeout(f"{self._method.name} got no answer within {timeout_s} s") from None
        except XdfsError:
            raise  # the call's own error, or the connection's (then closed)
        except BaseException:  # Ctrl-C mid-call: the connection is in an unknown state
            self._conn.close()
            raise
        finally:
            self._end()

    def fileno(self) -> int:
        """The connection's socket, to wait for whichever of several answers comes first
        (``poll``); see :meth:`in_hand`."""
        return self._conn.fileno()

    def in_hand(self) -> bool:
        """Whether the answer may be read already (the socket would not say so)."""
        return self._conn.has_frames()

    def abandon(self) -> None:
        """Give up without the answer (the connection is closed: it may still come)."""
        if not self._done:
            self._conn.close()
            self._end()

    def _end(self) -> None:
        self._done = True
        self._client._give_back(self._conn)


#: Failures of a try that another try may follow (see RpcClient._after_failed_try).
_RETRIED = (NotActive, Overloaded, RpcTimeout, ConnectionLost)


def _drop(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` if it still runs; its outcome, whatever it is, is not wanted."""
    if not task.done():
        task.cancel()
    task.add_done_callback(lambda done: done.cancelled() or done.exception())


class _Try(Generic[T]):
    """One try at ``address``: connect (a failure there is :class:`_NotSent`), then
    ``attempt``. ``sent``: the call went out (the server may have run it)."""

    def __init__(self, client: RpcClient, address: str,
                 attempt: Callable[[ClientConnection], Awaitable[T]]) -> None:
        self.client, self.address, self.attempt = client, address, attempt
        self.sent = False

    async def run(self) -> T:
        try:
            conn = await self.client.connection(self.address)
        except (Unavailable, Overloaded) as exc:
            raise _NotSent(exc) from None
        self.sent = True
        return await self.attempt(conn)


class _FirstTry(NamedTuple):
    """A failed try made before the failover (:meth:`RpcClient.call`'s direct one): at
    address index ``at``, counting as ``tries`` there (all of them when it moves on)."""

    at: int
    tries: int
    failure: str


class _NotSent(Exception):
    """A try failed before the call was sent (connect, handshake, Overloaded there)."""

    def __init__(self, error: XdfsError) -> None:
        super().__init__(error)
        self.error = error


class _MovedOn(Exception):
    """A waiting call was abandoned: the server at address ``index`` became active."""

    def __init__(self, index: int) -> None:
        super().__init__(index)
        self.index = index
