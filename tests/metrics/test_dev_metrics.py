"""Under ``xdfs dev`` every server process serves /metrics and a status page on a port of
its own, recorded as ``http`` in cluster.json (real processes: NameNode, DataNode,
BackupNode, the log service and its storage JournalNodes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.datapath.test_dev_cluster import ENV, READY, stop_dev
from xdfs.common.process import ProcessGroup

pytestmark = pytest.mark.slow

SERVERS = {"namenode", "datanode", "backupnode", "journalnode", "logservice"}


def test_every_dev_server_serves_metrics(processes: ProcessGroup, tmp_path: Path) -> None:
    base = tmp_path / "dev"
    dev = processes.start_xdfs(
        "dev", "dev", "--base-dir", str(base), "--port", "0", "--datanodes", "1",
        "--backup", "--logservice", ready_pattern=READY, deadline_s=240, env=ENV)
    listing = json.loads((base / "cluster.json").read_text())["processes"]
    try:
        servers = [p for p in listing if p["role"] in SERVERS]
        assert {p["role"] for p in servers} == SERVERS
        for process in servers:
            assert "http" in process, process
            text = requests.get(f"http://{process['http']}/metrics", timeout=30).text
            roles = [s.labels["role"] for family in text_string_to_metric_families(text)
                     for s in family.samples if s.name == "xdfs_server_info"]
            assert roles == [process["role"]], process
            if process["role"] != "namenode":
                page = requests.get(f"http://{process['http']}/ui/status", timeout=30)
                assert page.status_code == 200 and f"{process['role']} status" in page.text
    finally:
        stop_dev(dev, listing)
