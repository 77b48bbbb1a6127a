"""``xdfs zkfc``: the failover controller next to one NameNode (HDFS's ZKFC), the asyncio
and kazoo driver around the pure rules of :mod:`xdfs.zkfc.health` and
:mod:`xdfs.zkfc.elector`.

Three strands feed the elector, on the event loop:

* the health loop asks the NameNode ``monitor_health`` (then ``get_service_state``)
  every ``ha.health_check_interval_s``, each bounded by ``ha.health_check_timeout_s``;
* kazoo's session states and the lock's watch (kazoo's thread, handed over with
  ``call_soon_threadsafe``);
* the outcomes of the elector's own actions.

Actions run one at a time, in order, on one task (the *actuator*): NameNode calls are
awaited; ZooKeeper operations go to a single thread of their own, so they never
interleave and a ZooKeeper that does not answer (kazoo queues requests until it
reconnects) never holds up a NameNode call. ``zkfc`` RPC (:mod:`xdfs.protocol.zkfc`)
serves status, ``cede_active`` and ``graceful_failover``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import math
from collections.abc import Callable
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState, WatchedEvent
from kazoo.retry import KazooRetry

from xdfs.common.coordination import new_client, secure_tree
from xdfs.common.fencing import parse_methods
from xdfs.common.secrets import read_secret_file
from xdfs.config import XdfsConfig
from xdfs.errors import ConfigError, InvalidArgument, TakeoverRefused, Unavailable
from xdfs.http.server import HttpServer
from xdfs.http.ui.status import start_status_http
from xdfs.protocol.ha import (
    GET_SERVICE_STATE,
    MONITOR_HEALTH,
    SOURCE_ZKFC,
    TRANSITION_TO_ACTIVE,
    TRANSITION_TO_STANDBY,
    TransitionRequest,
)
from xdfs.protocol.system_handlers import add_system_services
from xdfs.protocol.zkfc import (
    CEDE_ACTIVE,
    ZKFC_SERVICE,
    ZKFC_USER,
    CedeRequest,
    ControllerIdentity,
    FailoverResponse,
    ZkfcStatus,
)
from xdfs.rpc.handling import CallContext
from xdfs.rpc.messages import PROTOCOL_VERSION, Empty, Hello
from xdfs.rpc.secret_auth import SecretAuthenticator
from xdfs.rpc.server import RpcServer
from xdfs.rpc.tls import server_context
from xdfs.zkfc import znodes
from xdfs.zkfc.elector import (
    Action,
    Activate,
    ActivationDone,
    Cede,
    CedeRequested,
    Elector,
    Event,
    Fence,
    FenceDone,
    HealthChanged,
    Join,
    JoinFailed,
    LockChanged,
    LockHeld,
    LockWon,
    Quit,
    Register,
    Role,
    Schedule,
    ServiceStateSeen,
    Standby,
    ZkConnected,
    ZkSessionLost,
    ZkSuspended,
)
from xdfs.zkfc.health import Health, HealthMonitor
from xdfs.zkfc.namenodes import CALL_ERRORS, BoundedClient, describe, fence_old_active

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Longest a controller may be asked to stay out of the election.
CEDE_MAX_S = 3600.0


def controller_hello(secret: str) -> Hello:
    """How a controller, or xdfs admin, logs in to a controller."""
    return Hello(PROTOCOL_VERSION, client_name="zkfc-peer", user=ZKFC_USER, password=secret)


class FailoverController:
    def __init__(self, config: XdfsConfig, nn_id: str, namenode: str) -> None:
        ha = config.ha
        self.config = config
        self.nn_id = nn_id
        self.namenode = namenode
        self.paths = znodes.Paths.of(ha.zookeeper_parent, ha.nameservice)
        self.stopped = asyncio.Event()
        self.fatal: BaseException | None = None
        self.monitor = HealthMonitor(ha.health_failures_max)
        self.fencing = parse_methods(ha.fencing_methods, "ha.fencing_methods")
        self.server: RpcServer | None = None
        self.identity = ControllerIdentity(ha.nameservice, nn_id, namenode, "")
        self.elector = Elector(self.identity, session_timeout_s=ha.zookeeper_session_timeout_s,
                               retry_after_failure_s=ha.retry_after_failure_s)
        self.zk: KazooClient | None = None
        self.secret = ""
        self.zk_secret = ""
        self._zk_thread = concurrent.futures.ThreadPoolExecutor(1, "zkfc-zookeeper")
        self._actions: asyncio.Queue[tuple[Action, asyncio.Future[None] | None]] = (
            asyncio.Queue())
        self._tasks: list[asyncio.Task[None]] = []
        self._changed = asyncio.Event()  # set (and replaced) after every event
        self._session = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._nn: BoundedClient | None = None
        self.http: HttpServer | None = None  # status page and /metrics (zkfc_http_address)

    @property
    def http_address(self) -> str:
        return self.http.address if self.http is not None else ""

    # --- start and stop ------------------------------------------------------------------

    async def start(self, host: str, port: int) -> str:
        ha = self.config.ha
        if not ha.automatic_failover:
            raise ConfigError("ha.automatic_failover is off: a controller would fight the "
                              "manual transitions (set it on every controller and NameNode)")
        if not ha.zookeeper_quorum:
            raise ConfigError("ha.zookeeper_quorum is not set: give the ZooKeeper servers")
        self.secret = read_secret_file(ha.zkfc_secret_file, "ha.zkfc_secret_file")
        self.zk_secret = read_secret_file(ha.zookeeper_secret_file, "ha.zookeeper_secret_file")
        self._loop = asyncio.get_running_loop()
        rpc = self.config.rpc
        self.server = RpcServer("zkfc", rpc, authenticator=SecretAuthenticator(
            ZKFC_USER, self.secret), ssl_context=server_context(rpc))
        add_system_services(self.server, "zkfc")
        self.server.add_service(ZKFC_SERVICE, ZkfcHandlers(self))
        address = await self.server.start(host, port)
        self._warn_unconfigured(address)
        self.identity = ControllerIdentity(ha.nameservice, self.nn_id, self.namenode, address)
        self.elector.identity = self.identity
        self._nn = BoundedClient(self.config, self.namenode, f"zkfc-{self.nn_id}")
        self._tasks.append(asyncio.create_task(self._act(), name="zkfc actuator"))
        try:
            await self._connect()
            self.http = await start_status_http(
                "zkfc", ha.zkfc_http_address, self.config.http.body_bytes_max,
                self.server.metrics, self._status)
        except BaseException:
            await self.stop()
            raise
        self._tasks.append(asyncio.create_task(self._watch_health(), name="zkfc health"))
        log.info("controller of NameNode %s (%s) in nameservice %s, ZooKeeper %s, znodes %s",
                 self.nn_id, self.namenode, ha.nameservice, ha.zookeeper_quorum,
                 self.paths.base)
        return address

    def _warn_unconfigured(self, address: str) -> None:
        """Peers reach this controller and fence its NameNode only at the addresses [ha]
        gives them: say so at once when this one serves elsewhere."""
        ha = self.config.ha
        for key, table, actual in (("ha.namenodes", ha.namenodes, self.namenode),
                                   ("ha.controllers", ha.controllers, address)):
            if table.get(self.nn_id) != actual:
                log.warning("%s[%s] is %s, not %s: the other controllers will refuse this "
                            "one's znodes", key, self.nn_id, table.get(self.nn_id, "not set"),
                            actual)

    def _status(self) -> list[tuple[str, object]]:
        return [("NameNode", f"{self.nn_id} at {self.namenode}"),
                ("nameservice", self.config.ha.nameservice),
                ("election", self.elector.role.name.lower()),
                ("ZooKeeper", self.config.ha.zookeeper_quorum)]

    async def _connect(self) -> None:
        ha = self.config.ha
        zk = self.zk = new_client(
            ha.zookeeper_quorum, self.zk_secret, ha.zookeeper_session_timeout_s,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0),
        )
        zk.add_listener(self._on_zk_state)

        def start_secured() -> None:
            # on ZooKeeper's thread before any Join: no znode is touched before the tree
            # carries the ACL
            zk.start(ha.zookeeper_connect_timeout_s)
            secure_tree(zk, ha.zookeeper_parent, "ha.zookeeper_secret_file")

        try:
            await self._zk(start_secured, timeout_s=ha.zookeeper_connect_timeout_s + 5)
        except (KazooTimeoutError, TimeoutError):
            raise Unavailable(f"no ZooKeeper session with {ha.zookeeper_quorum} within "
                              f"{ha.zookeeper_connect_timeout_s} s") from None

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self.zk is not None:
            # closing the session deletes our ephemeral znodes at once: a graceful handover
            zk = self.zk
            try:
                await self._zk(lambda: (zk.stop(), zk.close()), timeout_s=5.0)
            except (TimeoutError, Exception):  # stopping anyway
                log.warning("ZooKeeper session did not close cleanly")
        self._zk_thread.shutdown(wait=False, cancel_futures=True)
        if self._nn is not None:
            await self._nn.close()
        if self.http is not None:
            await self.http.stop()
        if self.server is not None:
            await self.server.close()
        self.stopped.set()

    # --- events --------------------------------------------------------------------------

    def post(self, event: Event, done: asyncio.Future[None] | None = None) -> None:
        """Feed the elector; queue its actions (``done`` resolves after the last)."""
        before = self.elector.role
        actions = self.elector.on(event)
        role = self.elector.role
        if role is not before:
            error = self.elector.last_error if role is Role.IDLE else ""
            why = f": {error}" if error else ""
            log.info("election: %s -> %s (%s)%s", before.value, role.value,
                     type(event).__name__, why)
        queued = [action for action in actions if not isinstance(action, Schedule)]
        for action in actions:
            if isinstance(action, Schedule):
                assert self._loop is not None
                self._loop.call_later(action.delay_s, self.post, action.event)
        for index, action in enumerate(queued):
            self._actions.put_nowait((action, done if index == len(queued) - 1 else None))
        if done is not None and not queued:
            done.set_result(None)
        self._changed.set()
        self._changed = asyncio.Event()

    def _post_threadsafe(self, event: Event) -> None:
        """From kazoo's threads (a closed loop means we are stopping: dropped)."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self.post, event)

    def _on_zk_state(self, state: str) -> None:
        """kazoo's session listener (its thread; must not block)."""
        if state == KazooState.CONNECTED:
            session = znodes.session_id(self.zk) if self.zk is not None else 0
            new_session, self._session = session != self._session, session
            self._post_threadsafe(ZkConnected(new_session))
        elif state == KazooState.SUSPENDED:
            self._post_threadsafe(ZkSuspended())
        else:
            self._post_threadsafe(ZkSessionLost())

    def _on_lock_watch(self, event: WatchedEvent) -> None:
        self._post_threadsafe(LockChanged())

    # --- the actuator --------------------------------------------------------------------

    async def _act(self) -> None:
        while True:
            action, done = await self._actions.get()
            try:
                await self._execute(action)
            except Exception:
                log.exception("%s failed", action)
            finally:
                if done is not None and not done.done():
                    done.set_result(None)

    async def _execute(self, action: Action) -> None:
        if isinstance(action, Join):
            self._zk_then_post(self._join_blocking, action.attempt)
        elif isinstance(action, Quit):
            self._zk_submit(znodes.release, self.zk, self.paths, self.identity,
                            action.delete_breadcrumb)
        elif isinstance(action, Register):
            self._zk_submit(znodes.register, self.zk, self.paths, self.identity)
        elif isinstance(action, Fence):
            await self._fence(action)
        elif isinstance(action, Activate):
            await self._activate(action)
        elif isinstance(action, Standby):
            await self._standby()
        elif isinstance(action, Cede):
            stepped_down = await self._standby()
            await self._zk(znodes.release, self.zk, self.paths, self.identity, stepped_down)
            log.info("ceded the election (NameNode %s)", "stepped down" if stepped_down
                     else "did not step down: the next active fences it")

    def _join_blocking(self, attempt: int) -> Event:
        assert self.zk is not None
        try:
            result = znodes.try_acquire(self.zk, self.paths, self.identity, self._on_lock_watch)
        except Exception as exc:  # kazoo's errors have no common base
            return JoinFailed(attempt, describe(exc))
        if result.won:
            return LockWon(attempt, result.other)
        return LockHeld(attempt, result.other)

    async def _fence(self, action: Fence) -> None:
        old = action.target
        log.warning("won the election; the last active was NameNode %s at %s: fencing it",
                    old.id, old.namenode)
        try:
            address = znodes.configured_namenode(self.config.ha, old, self.paths.breadcrumb)
        except TakeoverRefused as exc:
            log.error("not fencing: %s", exc.message)
            self.post(FenceDone(action.attempt, False, describe(exc)))
            return
        try:
            how = await fence_old_active(self.config, address, SOURCE_ZKFC, self.fencing)
        except CALL_ERRORS as exc:
            self.post(FenceDone(action.attempt, False, describe(exc)))
            return
        log.warning("fenced NameNode %s at %s: %s", old.id, old.namenode, how)
        self.post(FenceDone(action.attempt, True, how))

    async def _activate(self, action: Activate) -> None:
        assert self._nn is not None
        try:
            await self._zk(znodes.write_breadcrumb, self.zk, self.paths, self.identity)
            status = await self._nn.call(TRANSITION_TO_ACTIVE, TransitionRequest(SOURCE_ZKFC),
                                         self.config.ha.transition_timeout_s)
        except (*CALL_ERRORS, znodes.LostLock) as exc:
            log.error("could not make NameNode %s active: %s", self.nn_id, describe(exc))
            self.post(ActivationDone(action.attempt, False, describe(exc)))
            return
        log.warning("NameNode %s at %s is active (epoch %d, txid %d)", self.nn_id,
                    self.namenode, status.epoch, status.last_txid)
        self.post(ActivationDone(action.attempt, True))

    async def _standby(self) -> bool:
        """Ask the local NameNode to go standby; whether it did."""
        assert self._nn is not None
        try:
            status = await self._nn.call(TRANSITION_TO_STANDBY, TransitionRequest(SOURCE_ZKFC),
                                         self.config.ha.graceful_fence_timeout_s)
        except CALL_ERRORS as exc:
            log.warning("NameNode %s did not go standby: %s", self.nn_id, describe(exc))
            return False
        log.info("NameNode %s is %s", self.nn_id, status.state)
        return True

    # --- ZooKeeper's thread --------------------------------------------------------------

    def _zk_submit(self, fn: Callable[..., T], *args: Any) -> concurrent.futures.Future[T]:
        future = self._zk_thread.submit(fn, *args)
        future.add_done_callback(_log_failure)
        return future

    def _zk_then_post(self, fn: Callable[..., Event], *args: Any) -> None:
        future = self._zk_thread.submit(fn, *args)
        future.add_done_callback(lambda done: None if done.cancelled() or done.exception()
                                 else self._post_threadsafe(done.result()))

    async def _zk(self, fn: Callable[..., T], *args: Any, timeout_s: float = 0.0) -> T:
        """Run ``fn`` on ZooKeeper's thread; TimeoutError after ``timeout_s`` (default: the
        session timeout: later, the session is as good as gone)."""
        limit = timeout_s or self.config.ha.zookeeper_session_timeout_s
        return await asyncio.wait_for(asyncio.wrap_future(self._zk_thread.submit(fn, *args)),
                                      limit)

    # --- health --------------------------------------------------------------------------

    async def _watch_health(self) -> None:
        ha = self.config.ha
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            await self._check_health()
            await asyncio.sleep(max(0.0, ha.health_check_interval_s - (loop.time() - started)))

    async def _check_health(self) -> None:
        assert self._nn is not None
        timeout_s = self.config.ha.health_check_timeout_s
        tag = self.elector.tag
        state = ""
        try:
            async with asyncio.timeout(timeout_s):
                report = await self._nn.call(MONITOR_HEALTH, Empty(), timeout_s)
                if report.healthy:
                    state = (await self._nn.call(GET_SERVICE_STATE, Empty(), timeout_s)).state
        except CALL_ERRORS as exc:
            changed = self.monitor.failed(describe(exc))
        else:
            changed = self.monitor.answered(report)
        if changed is not None:
            log.warning("NameNode %s is %s%s", self.nn_id, changed.value,
                        f" ({self.monitor.reason})" if self.monitor.reason else "")
            self.post(HealthChanged(changed))
        if state:
            self.post(ServiceStateSeen(state, tag))

    # --- graceful failover ---------------------------------------------------------------

    def status(self) -> ZkfcStatus:
        elector = self.elector
        return ZkfcStatus(
            self.identity, elector.health.value, elector.role.value, elector.zk.value,
            elector.active, elector.ceding, elector.last_error or self.monitor.reason,
        )

    async def cede(self, duration_s: float) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.post(CedeRequested(duration_s), done)
        await done

    async def graceful_failover(self) -> FailoverResponse:
        """Make our NameNode the active one (HDFS's gracefulFailoverToYou): the current
        active's controller cedes the election for ``ha.failover_timeout_s``, we win it;
        then it may rejoin (as standby)."""
        ha = self.config.ha
        loop = asyncio.get_running_loop()
        started = loop.time()
        await self._check_can_take_over()
        holder = await self._zk(znodes.read_holder, self.zk, self.paths)
        if holder is not None and holder.id == self.nn_id:
            await self._wait_active(ha.failover_timeout_s)
            return FailoverResponse(self.nn_id, self.nn_id, loop.time() - started)
        if holder is None:
            raise TakeoverRefused("no NameNode is active now: the controllers elect one by "
                                  "themselves (try again once one is)")
        try:
            peer = znodes.configured_controller(ha, holder.id, holder.zkfc, self.paths.lock)
        except TakeoverRefused as exc:
            log.error("graceful failover refused: %s", exc.message)
            raise
        log.warning("graceful failover from NameNode %s to %s", holder.id, self.nn_id)
        other = BoundedClient(self.config, peer, "zkfc-peer",
                               hello=controller_hello(self.secret))
        try:
            try:
                await other.call(CEDE_ACTIVE, CedeRequest(ha.failover_timeout_s),
                                 ha.failover_timeout_s)
            except CALL_ERRORS as exc:
                raise TakeoverRefused(f"the controller of {holder.id} at {peer} did "
                                      f"not cede: {describe(exc)}") from None
            await self._wait_active(ha.failover_timeout_s)
        finally:
            try:  # the old active may take part again (as a standby: we hold the lock)
                await other.call(CEDE_ACTIVE, CedeRequest(0.0), ha.graceful_fence_timeout_s)
            except CALL_ERRORS as exc:
                log.warning("could not tell %s to rejoin the election: %s", holder.id,
                            describe(exc))
            await other.close()
        return FailoverResponse(holder.id, self.nn_id, loop.time() - started)

    async def _check_can_take_over(self) -> None:
        elector = self.elector
        if elector.health is not Health.HEALTHY:
            raise TakeoverRefused(f"NameNode {self.nn_id} is {elector.health.value} "
                                  f"({self.monitor.reason}): it cannot become active")
        if elector.role is Role.IDLE:
            why = ("ceded" if elector.ceding else "backing off after a failure"
                   if elector.backing_off else f"ZooKeeper {elector.zk.value}")
            raise TakeoverRefused(f"the controller of {self.nn_id} is not in the election "
                                  f"({why}; {elector.last_error or 'no error'})")
        assert self._nn is not None
        try:
            status = await self._nn.call(GET_SERVICE_STATE, Empty(),
                                         self.config.ha.health_check_timeout_s)
        except CALL_ERRORS as exc:
            raise TakeoverRefused(f"NameNode {self.nn_id} did not answer: {describe(exc)}"
                                  ) from None
        if not status.ready_to_become_active:
            raise TakeoverRefused(f"NameNode {self.nn_id} is not ready to become active: "
                                  f"{status.not_ready_reason}")

    async def _wait_active(self, timeout_s: float) -> None:
        try:
            async with asyncio.timeout(timeout_s):
                while self.elector.role is not Role.ACTIVE:
                    await self._changed.wait()
        except TimeoutError:
            raise TakeoverRefused(
                f"NameNode {self.nn_id} did not become active within {timeout_s} s "
                f"(role {self.elector.role.value}; {self.elector.last_error or 'no error'})"
            ) from None


def _log_failure(future: concurrent.futures.Future[Any]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("ZooKeeper operation failed: %s", describe(future.exception()))  # type: ignore[arg-type]


class ZkfcHandlers:
    """The ``zkfc`` service (callers present the controllers' shared secret)."""

    def __init__(self, controller: FailoverController) -> None:
        self._controller = controller

    def zkfc_status(self, ctx: CallContext, request: Empty) -> ZkfcStatus:
        return self._controller.status()

    async def cede_active(self, ctx: CallContext, request: CedeRequest) -> Empty:
        if not math.isfinite(request.duration_s) or request.duration_s > CEDE_MAX_S:
            raise InvalidArgument(f"cede duration {request.duration_s} s is not a number of "
                                  f"seconds up to {CEDE_MAX_S:.0f}")
        log.warning("%s asks this controller to cede the election for %.1f s", ctx.peer,
                    request.duration_s)
        await self._controller.cede(request.duration_s)
        return Empty()

    async def graceful_failover(self, ctx: CallContext, request: Empty) -> FailoverResponse:
        return await self._controller.graceful_failover()
