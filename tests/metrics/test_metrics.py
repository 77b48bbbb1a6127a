"""/metrics on every server: RPC calls, latency and errors per method (the one RPC server
instrumentation), the NameNode's namespace, blocks and group commit, the DataNodes' bytes,
the BackupNode's and JournalNode's lag, event-loop lag; one registry per server object."""

from __future__ import annotations

import contextlib

import aiohttp

from tests.metrics.conftest import MetricsCluster, Samples, scrape, value
from xdfs.errors import NotFound
from xdfs.testing.poll import eventually

DATA = b"x" * 300_000


async def test_the_namenode_exports_calls_errors_namespace_and_group_commit(
    metrics_cluster: MetricsCluster,
) -> None:
    cluster = metrics_cluster
    before = await scrape(cluster.namenode_http)
    await cluster.client.write_file("/m/file", DATA)
    with contextlib.suppress(NotFound):
        await cluster.client.stat("/m/absent")
    after = await scrape(cluster.namenode_http)

    def calls(samples: Samples, method: str) -> float:
        return sum(v for labels, v in samples.get("xdfs_rpc_calls_total", [])
                   if labels["method"] == method)

    # a small file is created with its first block in one call (create_with_block)
    assert calls(after, "create_with_block") == calls(before, "create_with_block") + 1
    assert calls(after, "complete") == calls(before, "complete") + 1
    assert value(after, "xdfs_rpc_latency_seconds_count", method="create_with_block") >= 1
    assert value(after, "xdfs_rpc_errors_total", method="stat",
                 code=str(NotFound.code)) >= 1
    fs = cluster.mc.namenodes[0].fs
    assert fs is not None
    assert value(after, "xdfs_namenode_inodes") == fs.ns.inode_count()
    assert value(after, "xdfs_namenode_blocks") >= 1
    assert value(after, "xdfs_namenode_datanodes", state="live") == 2
    assert value(after, "xdfs_namenode_blocks_by_state", state="missing") == 0
    # each durable flush observed once: batches carry every transaction synced since
    synced_txns = value(after, "xdfs_namenode_edits_sync_batch_txns_sum")
    assert synced_txns > value(before, "xdfs_namenode_edits_sync_batch_txns_sum")
    assert value(after, "xdfs_namenode_edits_sync_seconds_count") == value(
        after, "xdfs_namenode_edits_sync_batch_txns_count")
    ages = after["xdfs_namenode_datanode_heartbeat_age_seconds"]
    assert {labels["datanode"] for labels, _ in ages} == {
        dn.address for dn in cluster.mc.datanodes}
    assert value(after, "xdfs_server_info", role="namenode") == 1
    assert value(after, "xdfs_event_loop_lag_seconds") >= 0


async def test_datanodes_count_their_bytes_and_servers_do_not_share_registries(
    metrics_cluster: MetricsCluster,
) -> None:
    cluster = metrics_cluster
    await cluster.client.write_file("/m/data", DATA)  # replication 3 > 2 nodes: each holds one
    assert await cluster.client.read_file("/m/data") == DATA
    written, read = 0.0, 0.0
    for dn in cluster.mc.datanodes:
        samples = await scrape(dn.http_address)
        written += value(samples, "xdfs_datanode_written_bytes_total")
        read += value(samples, "xdfs_datanode_read_bytes_total")
        assert value(samples, "xdfs_server_info", role="datanode") == 1
        # a DataNode's registry holds its own calls only: no NameNode method
        assert not any(labels["method"] == "create"
                       for labels, _ in samples.get("xdfs_rpc_calls_total", []))
        assert "xdfs_namenode_inodes" not in samples
        assert value(samples, "xdfs_datanode_scanner_passes_total") >= 0
    assert written == 2 * len(DATA)
    assert read >= len(DATA)


async def test_the_backup_and_journal_nodes_export_their_lag(
    metrics_cluster: MetricsCluster,
) -> None:
    cluster = metrics_cluster
    await cluster.client.mkdirs("/m/followed")
    edits = cluster.mc.namenodes[0].edits
    assert edits is not None
    nn_synced = edits.synced_txid
    backup = cluster.mc.backupnodes[0].http_address

    async def caught_up() -> Samples | None:
        samples = await scrape(backup)
        done = value(samples, "xdfs_backupnode_synced_txid") >= nn_synced
        return samples if done else None

    samples = await eventually(caught_up, what="the backup's synced txid in /metrics")
    assert value(samples, "xdfs_backupnode_journal_lag_txns") >= 0
    assert value(samples, "xdfs_server_info", role="backupnode") == 1
    nn = await scrape(cluster.namenode_http)
    followers = nn["xdfs_namenode_journal_lag_txns"]
    assert [labels["follower"] for labels, _ in followers] == [
        cluster.mc.backupnodes[0].address]
    cluster.journalnode.worker("jmetrics", create=True)
    journal = await scrape(cluster.journalnode.http_address)
    assert value(journal, "xdfs_server_info", role="journalnode") == 1
    assert value(journal, "xdfs_journalnode_last_txid", journal="jmetrics") == 0
    assert value(journal, "xdfs_journalnode_journal_lag_txns", journal="jmetrics") == 0


async def test_slow_calls_are_kept_and_status_pages_escape(
    metrics_cluster: MetricsCluster,
) -> None:
    cluster = metrics_cluster
    nn = cluster.mc.namenodes[0]
    await cluster.client.write_file("/m/slow", DATA)  # rpc.slow_call_s is 0.5 ms here
    assert nn.server is not None
    slow = list(nn.server.metrics.rpc.slow_calls)
    assert slow and all(call.seconds >= 0.0005 for call in slow)
    assert {call.user for call in slow} >= {"root"}

    async def long_polled() -> bool:  # the backup's fetch_edits waited (wait_s) a while
        samples = await scrape(cluster.namenode_http)
        within = value(samples, "xdfs_rpc_latency_seconds_bucket", method="fetch_edits",
                        le="0.5")
        return value(samples, "xdfs_rpc_latency_seconds_count", method="fetch_edits") > within

    await eventually(long_polled, what="a fetch_edits long poll of more than 0.5 s")
    # a long poll waits because it asked to: never a slow call
    assert "fetch_edits" not in {call.method for call in nn.server.metrics.rpc.slow_calls}
    for role, address in cluster.http_addresses().items():
        if role == "namenode":
            continue
        async with aiohttp.ClientSession() as session, session.get(
                f"http://{address}/ui/status") as response:
            assert response.status == 200, role
            text = await response.text()
        assert "<script" not in text
        assert f"xdfs {role.rstrip('0123456789')}" in text


def test_group_commit_counts_export_as_a_prometheus_histogram() -> None:
    """The flush histograms are plain counts until scraped: a value on a bound counts in
    that bound's bucket (Prometheus' ``le``), buckets are cumulative, +Inf holds all."""
    from prometheus_client import CollectorRegistry, generate_latest

    from xdfs.namenode.metrics import Counts

    counts = Counts("xdfs_test_txns", "test", (1, 4))
    for txns in (1, 1, 3, 4, 9):
        counts.observe(txns)
    registry = CollectorRegistry()

    class Collector:
        def collect(self) -> list[object]:
            return [counts.family()]

    registry.register(Collector())  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    assert 'xdfs_test_txns_bucket{le="1.0"} 2.0' in text
    assert 'xdfs_test_txns_bucket{le="4.0"} 4.0' in text
    assert 'xdfs_test_txns_bucket{le="+Inf"} 5.0' in text
    assert "xdfs_test_txns_count 5.0" in text and "xdfs_test_txns_sum 18.0" in text
