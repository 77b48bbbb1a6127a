"""The RPC figures of one server: calls, latency and errors by method, and the most recent
slow calls.

Kept as plain counts on the event loop (every call and every scrape run there) and turned
into Prometheus families only when scraped (:class:`xdfs.metrics.RpcMetrics`): a call
costs a dict lookup, a short scan of the bounds and two additions (prometheus_client's own
Counter and Histogram take a lock and walk the buckets in Python: about six times the cost
per call, measured). Compiled with mypyc (xdfs.common.native): every call of every server
ends here.
"""

from __future__ import annotations

from collections import deque
from typing import Final, NamedTuple

#: RPC latency buckets (seconds): in-memory metadata calls take tens of microseconds,
#: synced mutations milliseconds, block streams up to seconds.
RPC_BUCKETS_S: Final = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                        0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class SlowCall(NamedTuple):
    """One call slower than rpc.slow_call_s, as the Slow operations page lists it."""

    at_s: float  # wall clock when it finished
    method: str
    seconds: float
    user: str
    peer: str


class MethodStats:
    """Latency buckets (not cumulative: one increment per call) and total seconds."""

    def __init__(self) -> None:
        self.buckets = [0] * (len(RPC_BUCKETS_S) + 1)  # the last: above every bound
        self.seconds = 0.0


class RpcCalls:
    """Calls, latency and errors of one RPC server, by method (and by error code)."""

    def __init__(self, slow_call_s: float = 1.0, slow_calls_kept: int = 100) -> None:
        self.slow_call_s = slow_call_s
        #: The most recent slow calls, oldest first.
        self.slow_calls: deque[SlowCall] = deque(maxlen=slow_calls_kept)
        self.by_method: dict[str, MethodStats] = {}
        self.errors: dict[tuple[str, int], int] = {}

    def call_done(self, method: str, seconds: float) -> None:
        stats = self.by_method.get(method)
        if stats is None:
            stats = self.by_method[method] = MethodStats()
        # The first bound at or above seconds (bisect_left), compared as native floats:
        # most calls end in the first few buckets.
        index = 0
        for bound in RPC_BUCKETS_S:
            if seconds <= bound:
                break
            index += 1
        stats.buckets[index] += 1
        stats.seconds += seconds

    def call_failed(self, method: str, code: int) -> None:
        key = (method, code)
        self.errors[key] = self.errors.get(key, 0) + 1

    def slow(self, at_s: float, method: str, seconds: float, user: str, peer: str) -> None:
        self.slow_calls.append(SlowCall(at_s, method, seconds, user, peer))
