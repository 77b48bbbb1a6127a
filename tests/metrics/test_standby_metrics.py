"""An HA pair (real processes, quorum journal): the standby serves its status page and
/metrics (with how far it has applied the journal) on namenode.http_address, the active
its gateway, web UI and /metrics on its own; after a graceful failover each keeps its
port and serves what its new state serves."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.ha.cluster import HaCluster, formatted_pair
from tests.journal.qjm_cluster import PASSWORD, USER
from tests.metrics.test_dashboard import STANDBY_ONLY, dashboard_metrics
from xdfs.testing.net import free_port

pytestmark = pytest.mark.slow


@pytest.fixture
def ha(tmp_path: Path) -> Iterator[HaCluster]:
    with formatted_pair(tmp_path) as cluster:
        yield cluster


def metrics(http: str) -> dict[str, float]:
    text = requests.get(f"http://{http}/metrics", timeout=30).text
    return {s.name + "".join(f",{k}={v}" for k, v in sorted(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


async def _mkdirs(ha: HaCluster, count: int) -> None:
    async with ha.client() as client:
        for index in range(count):
            await client.mkdirs(f"/standby-metrics/d{index}")


def test_standby_and_active_serve_what_their_state_serves(ha: HaCluster) -> None:
    http = {nn_id: f"127.0.0.1:{free_port()}" for nn_id in ("nn1", "nn2")}
    for nn_id in ("nn1", "nn2"):
        ha.start(nn_id, "-D", f"namenode.http_address={http[nn_id]}")
    assert ha.admin("-transitionToActive", "nn1").returncode == 0
    asyncio.run(_mkdirs(ha, 5))
    active = metrics(http["nn1"])
    assert active["xdfs_namenode_ha_state,state=active"] == 1
    synced = active["xdfs_namenode_edits_synced_txid"]

    def standby_caught_up() -> bool:
        figures = metrics(http["nn2"])
        return figures.get("xdfs_namenode_standby_applied_txid", -1) >= synced

    ha.wait(standby_caught_up, "the standby's applied txid in its /metrics")
    # what the dashboard reads of a standby, a standby exports
    standby_names = {name.split(",")[0] for name in metrics(http["nn2"])}
    assert dashboard_metrics() & standby_names >= STANDBY_ONLY
    assert metrics(http["nn2"])["xdfs_namenode_ha_state,state=standby"] == 1
    status = requests.get(f"http://{http['nn2']}/ui/status", timeout=30)
    assert status.status_code == 200 and "standby" in status.text
    # a standby's gateway answers StandbyException and its UI browses nothing; the
    # active has both
    refused = requests.get(f"http://{http['nn2']}/webhdfs/v1/?op=LISTSTATUS",
                           auth=(USER, PASSWORD), timeout=30)
    assert refused.status_code == 403
    assert refused.json()["RemoteException"]["exception"] == "StandbyException"
    assert requests.get(f"http://{http['nn2']}/ui/browse?path=/", auth=(USER, PASSWORD),
                        timeout=30).status_code == 403
    assert requests.get(f"http://{http['nn1']}/ui/", auth=(USER, PASSWORD),
                        timeout=30).status_code == 200

    assert ha.admin("-transitionToStandby", "nn1").returncode == 0
    assert ha.admin("-transitionToActive", "nn2").returncode == 0
    listing = requests.get(f"http://{http['nn2']}/webhdfs/v1/standby-metrics?op=LISTSTATUS",
                           auth=(USER, PASSWORD), timeout=30)
    assert listing.status_code == 200 and len(listing.json()["FileStatuses"]["FileStatus"]) == 5
    assert metrics(http["nn1"])["xdfs_namenode_ha_state,state=standby"] == 1
    assert metrics(http["nn2"])["xdfs_namenode_ha_state,state=active"] == 1
