"""Prometheus metrics of one server object (xdfs.http.metrics serves them on ``/metrics``).

Each server (NameNode, DataNode, JournalNode, BackupNode ...) owns one
:class:`ServerMetrics`, with a registry of its own: tests run several servers in one
process, and prometheus_client's global default registry would mix their series.

Cheap on purpose: the RPC figures of a method are plain counts made on its first call
(per call: a dict lookup, a bisect and two additions), turned into series when scraped; every
figure a server already keeps (namespace and block counts, heartbeat ages, journal lag) is
read only when scraped, by a collector, never maintained per operation."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.registry import Collector

from xdfs.metrics.rpc_calls import RPC_BUCKETS_S, RpcCalls
from xdfs.metrics.rpc_calls import SlowCall as SlowCall  # (the slow-call pages use it)

Family = GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily


class RpcMetrics(Collector):
    """The Prometheus families of a server's :class:`RpcCalls`, made when scraped."""

    def __init__(self, calls: RpcCalls) -> None:
        self.calls = calls

    def collect(self) -> Iterator[Family]:
        totals = CounterMetricFamily("xdfs_rpc_calls", "RPC calls finished, by method",
                                     labels=["method"])
        latency = HistogramMetricFamily(
            "xdfs_rpc_latency_seconds", "Time from a call's arrival to its reply (to the "
            "end of its stream), by method", labels=["method"])
        bounds = [repr(float(bound)) for bound in RPC_BUCKETS_S] + ["+Inf"]
        for method, stats in sorted(self.calls.by_method.items()):
            cumulative = list(itertools.accumulate(stats.buckets))
            totals.add_metric([method], cumulative[-1])
            latency.add_metric([method], list(zip(bounds, cumulative, strict=True)),
                               stats.seconds)
        errors = CounterMetricFamily(
            "xdfs_rpc_errors", "RPC calls answered with an error, by method and xdfs error "
            "code", labels=["method", "code"])
        for (method, code), count in sorted(self.calls.errors.items()):
            errors.add_metric([method, str(code)], count)
        yield from (totals, latency, errors)


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
        self.rpc = RpcCalls(slow_call_s, slow_calls_kept)
        self.registry.register(RpcMetrics(self.rpc))
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
