"""A cluster whose every server serves /metrics: a NameNode, two DataNodes, a BackupNode
and a JournalNode, in process (each server object with its own registry), each HTTP
server on a free port; and a scraper that parses the Prometheus text format."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.datapath.conftest import fast_config
from tests.integration.conftest import ROOT, ROOT_PW, connect
from xdfs.client.client import AsyncClient
from xdfs.common.secrets import new_secret_file
from xdfs.config import XdfsConfig
from xdfs.journal.server import JournalNode
from xdfs.testing.minicluster import MiniCluster
from xdfs.testing.poll import eventually

#: sample name (as exported, with _total/_bucket ...) -> [(labels, value)]
Samples = dict[str, list[tuple[dict[str, str], float]]]
ANY = "127.0.0.1:0"


def metrics_config(tmp: Path, slow_call_s: float) -> XdfsConfig:
    config = fast_config(scan_period_s=3600.0, http_address=ANY)
    secret = tmp / "journal.secret"
    if not secret.exists():
        new_secret_file(secret)
    return replace(
        config,
        rpc=replace(config.rpc, slow_call_s=slow_call_s),
        namenode=replace(config.namenode, http_address=ANY),
        backupnode=replace(config.backupnode, http_address=ANY),
        journalnode=replace(config.journalnode, http_address=ANY, secret_file=str(secret)),
    )


async def scrape(http_address: str) -> Samples:
    async with aiohttp.ClientSession() as session, session.get(
            f"http://{http_address}/metrics") as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = await response.text()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """The one sample of ``name`` with these labels (a KeyError names what is missing)."""
    found = [v for have, v in samples.get(name, []) if labels.items() <= have.items()]
    if len(found) != 1:
        raise KeyError(f"{name}{labels}: {len(found)} samples in {samples.get(name)}")
    return found[0]


@dataclass
class MetricsCluster:
    mc: MiniCluster
    client: AsyncClient
    config: XdfsConfig
    journalnode: JournalNode

    @property
    def namenode_http(self) -> str:
        return self.mc.namenodes[0].http_address

    def http_addresses(self) -> dict[str, str]:
        mc = self.mc
        return {"namenode": mc.namenodes[0].http_address,
                **{f"datanode{i}": dn.http_address for i, dn in enumerate(mc.datanodes)},
                "backupnode": mc.backupnodes[0].http_address,
                "journalnode": self.journalnode.http_address}


@pytest.fixture
async def metrics_cluster(minicluster: MiniCluster, tmp_path: Path
                          ) -> AsyncIterator[MetricsCluster]:
    config = metrics_config(tmp_path, slow_call_s=0.0005)
    nn = await minicluster.start_namenode(config=config)
    for index in range(2):
        await minicluster.start_datanode(f"dn{index}", nn.address, config=config)
    client = connect(nn, ROOT, ROOT_PW)
    journalnode = JournalNode(config, tmp_path / "jn")
    await journalnode.start("127.0.0.1", 0)
    try:
        await minicluster.start_backupnode(config=config)
        await eventually(lambda: _live(client, 2), what="2 live DataNodes")
        yield MetricsCluster(minicluster, client, config, journalnode)
    finally:
        await client.close()
        await journalnode.stop()


async def _live(client: AsyncClient, count: int) -> bool:
    report = await client.datanode_report()
    return sum(node.state == "live" for node in report.nodes) >= count
