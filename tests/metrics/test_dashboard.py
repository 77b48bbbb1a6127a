"""docs/grafana-xdfs.json uses only series a running cluster exports: every metric name in
its queries is scraped from the servers' /metrics (NameNode, DataNodes, BackupNode,
JournalNode) after some traffic."""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

from tests.metrics.conftest import MetricsCluster, scrape
from xdfs.errors import NotFound
from xdfs.testing.poll import eventually

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-xdfs.json"
METRIC = re.compile(r"\bxdfs_[a-z0-9_]+")
#: Exported only by a standby NameNode: test_standby_metrics checks these.
STANDBY_ONLY = {"xdfs_namenode_standby_applied_txid"}


def dashboard_metrics() -> set[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    templated = [v.get("query", "") for v in dashboard["templating"]["list"]]
    return {name for text in [*exprs, *templated] for name in METRIC.findall(text)}


async def test_every_series_the_dashboard_uses_is_exported(
    metrics_cluster: MetricsCluster,
) -> None:
    cluster = metrics_cluster
    used = dashboard_metrics() - STANDBY_ONLY
    assert len(used) >= 20  # the dashboard reads many series (a broken regex finds none)
    await cluster.client.write_file("/dash/file", b"d" * 100_000)
    assert await cluster.client.read_file("/dash/file") == b"d" * 100_000
    with contextlib.suppress(NotFound):
        await cluster.client.stat("/dash/absent")  # one error, by code
    cluster.journalnode.worker("jdash", create=True)

    async def exported() -> set[str]:
        names: set[str] = set()
        for address in cluster.http_addresses().values():
            names |= set(await scrape(address))
        return names

    async def nothing_missing() -> bool:
        return not used - await exported()

    # the backup's lag and the follower list fill in once it has fetched
    with contextlib.suppress(AssertionError):
        await eventually(nothing_missing, what="every dashboard series exported")
    assert used - await exported() == set()  # names what is missing
