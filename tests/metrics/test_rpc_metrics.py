"""The RPC series' own bookkeeping (plain counts turned into Prometheus families when
scraped): Prometheus's cumulative ``le`` buckets, counts, sums and error codes."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from xdfs.metrics import ServerMetrics


def samples(metrics: ServerMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(metrics.registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_buckets_are_cumulative_and_inclusive_of_their_bound() -> None:
    metrics = ServerMetrics("test")
    for seconds in (0.0001, 0.0002, 0.003, 30.0):  # 0.0001 is in le="0.0001" (<=)
        metrics.rpc.call_done("stat", seconds)
    metrics.rpc.call_done("mkdirs", 0.01)
    metrics.rpc.call_failed("stat", 201)
    metrics.rpc.call_failed("stat", 201)
    got = samples(metrics)

    def bucket(method: str, le: str) -> float:
        return got[("xdfs_rpc_latency_seconds_bucket", (("le", le), ("method", method)))]

    assert bucket("stat", "0.0001") == 1
    assert bucket("stat", "0.00025") == 2
    assert bucket("stat", "0.0025") == 2
    assert bucket("stat", "0.005") == 3
    assert bucket("stat", "10.0") == 3
    assert bucket("stat", "+Inf") == 4
    assert got[("xdfs_rpc_latency_seconds_count", (("method", "stat"),))] == 4
    assert abs(got[("xdfs_rpc_latency_seconds_sum", (("method", "stat"),))] - 30.0033) < 1e-9
    assert got[("xdfs_rpc_calls_total", (("method", "stat"),))] == 4
    assert got[("xdfs_rpc_calls_total", (("method", "mkdirs"),))] == 1
    assert got[("xdfs_rpc_errors_total", (("code", "201"), ("method", "stat")))] == 2
    assert got[("xdfs_server_info", (("role", "test"), ("version", _version())))] == 1


def test_two_servers_in_one_process_keep_separate_series() -> None:
    one, two = ServerMetrics("a"), ServerMetrics("b")
    one.rpc.call_done("stat", 0.001)
    assert ("xdfs_rpc_calls_total", (("method", "stat"),)) not in samples(two)


def test_the_slow_call_ring_keeps_the_most_recent() -> None:
    metrics = ServerMetrics("test", slow_calls_kept=2)
    for index in range(3):
        metrics.rpc.slow(float(index), f"m{index}", 2.0, "u", "p")
    assert [call.method for call in metrics.rpc.slow_calls] == ["m1", "m2"]


def _version() -> str:
    from xdfs import __version__

    return __version__
