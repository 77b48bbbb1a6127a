"""Prometheus metrics of one server object (xdfs.http.metrics serves them on ``/metrics``).

Each server (NameNode, DataNode, JournalNode, BackupNode ...) owns one
:class:`ServerMetrics`, with a registry of its own: tests run several servers in one
process, and prometheus_client's global default registry would mix their series.

Cheap on purpose: the RPC series of a method are created once, on its first call, and
kept in a dict (one lookup, a counter increment and a histogram bucket per call); every
figure a server already keeps (namespace and block counts, heartbeat ages, journal lag) is
read only when scraped, by a collector, never maintained per operation."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import NamedTuple

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

#: RPC latency buckets (seconds): in-memory metadata calls take tens of microseconds,
#: synced mutations milliseconds, block streams up to seconds.
RPC_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

Family = GaugeMetricFamily | CounterMetricFamily


class SlowCall(NamedTuple):
    """One call slower than rpc.slow_call_s, as the Slow operations page lists it."""

    at_s: float  # wall clock when it finished
    method: str
    seconds: float
    user: str
    peer: str


class _MethodSeries(NamedTuple):
    calls: Counter
    latency: Histogram


class RpcMetrics:
    """Calls, latency and errors of one RPC server, by method (and by error code)."""

    def __init__(self, registry: CollectorRegistry, slow_call_s: float = 1.0,
                 slow_calls_kept: int = 100) -> None:
        self.slow_call_s = slow_call_s
        #: The most recent slow calls, oldest first.
        self.slow_calls: deque[SlowCall] = deque(maxlen=slow_calls_kept)
        self._calls = Counter("xdfs_rpc_calls", "RPC calls finished, by method",
                              ["method"], registry=registry)
        self._latency = Histogram("xdfs_rpc_latency_seconds",
                                  "Time from a call's arrival to its reply, by method",
                                  ["method"], buckets=RPC_BUCKETS_S, registry=registry)
        self._errors = Counter("xdfs_rpc_errors", "RPC calls answered with an error, by "
                               "method and xdfs error code", ["method", "code"],
                               registry=registry)
        self._series: dict[str, _MethodSeries] = {}

    def call_done(self, method: str, seconds: float) -> None:
        series = self._series.get(method)
        if series is None:
            series = self._series[method] = _MethodSeries(
                self._calls.labels(method), self._latency.labels(method))
        series.calls.inc()
        series.latency.observe(seconds)

    def call_failed(self, method: str, code: int) -> None:
        self._errors.labels(method, str(code)).inc()

    def slow(self, call: SlowCall) -> None:
        self.slow_calls.append(call)


class LoopLag:
    """Event-loop lag: how late a ``sleep(interval_s)`` wakes up (a blocked loop -- a long
    synchronous step, a GC pause -- shows as overshoot). Python's GC pauses the loop, so
    this is the GC figure too."""

    def __init__(self, registry: CollectorRegistry, interval_s: float) -> None:
        self.interval_s = interval_s
        self._last = Gauge("xdfs_event_loop_lag_seconds",
                           "Overshoot of the last periodic sleep of the server's event loop",
                           registry=registry)
        self._max = Gauge("xdfs_event_loop_lag_max_seconds",
                          "Largest event-loop overshoot seen since the server started",
                          registry=registry)
        self._task: asyncio.Task[None] | None = None
        self._worst = 0.0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(),
                                                                name="event loop lag")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(self.interval_s)
            self.observe(time.monotonic() - before - self.interval_s)

    def observe(self, lag_s: float) -> None:
        lag_s = max(0.0, lag_s)
        self._worst = max(self._worst, lag_s)
        self._last.set(lag_s)
        self._max.set(self._worst)


class _Scrape(Collector):
    """A collector whose families a function computes at scrape time."""

    def __init__(self, families: Callable[[], Iterable[Family]]) -> None:
        self._families = families

    def collect(self) -> Iterable[Family]:
        return self._families()


class ServerMetrics:
    """The registry of one server object and the series every server has."""

    def __init__(self, role: str, loop_lag_interval_s: float = 1.0, slow_call_s: float = 1.0,
                 slow_calls_kept: int = 100) -> None:
        self.role = role
        self.registry = CollectorRegistry(auto_describe=False)
        self.rpc = RpcMetrics(self.registry, slow_call_s, slow_calls_kept)
        self.loop_lag = LoopLag(self.registry, loop_lag_interval_s)
        info = Gauge("xdfs_server_info", "1, labelled with the server's role and version",
                     ["role", "version"], registry=self.registry)
        from xdfs import __version__

        info.labels(role, __version__).set(1)
        self._collectors: dict[str, Collector] = {}

    def add_collector(self, name: str, families: Callable[[], Iterable[Family]]) -> None:
        """Series computed at scrape time; ``name`` replaces an earlier one of that name
        (a NameNode made active again registers its figures again)."""
        self.remove_collector(name)
        collector = _Scrape(families)
        self.registry.register(collector)
        self._collectors[name] = collector

    def remove_collector(self, name: str) -> None:
        old = self._collectors.pop(name, None)
        if old is not None:
            self.registry.unregister(old)


def gauge(name: str, doc: str, value: float, labels: dict[str, str] | None = None
          ) -> GaugeMetricFamily:
    """One gauge family with one sample (``labels``: its label values)."""
    if not labels:
        return GaugeMetricFamily(name, doc, value=value)
    family = GaugeMetricFamily(name, doc, labels=list(labels))
    family.add_metric(list(labels.values()), value)
    return family


def gauges(name: str, doc: str, label: str, values: Iterable[tuple[str, float]]
           ) -> GaugeMetricFamily:
    """One gauge family with a sample per label value."""
    family = GaugeMetricFamily(name, doc, labels=[label])
    for key, value in values:
        family.add_metric([key], value)
    return family


def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)
