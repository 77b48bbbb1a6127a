"""``xdfs analyze --fs`` on a running cluster that never checkpointed (issue 17, item 18): the
report describes the current namespace (a checkpoint is written first), says which txid it
describes (CLI, JSON, HTML) and leads with headline findings."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.datapath.conftest import payload
from tests.integration.conftest import ROOT, ROOT_PW
from xdfs.analytics.headlines import headlines
from xdfs.cli.main import cli
from xdfs.client.client import Client
from xdfs.config import XdfsConfig

pytestmark = pytest.mark.slow
FILES = {f"/live/d{i % 2}/f{i}": payload(1000 + 100 * i, seed=i) for i in range(6)}


def test_analyze_fs_describes_the_current_namespace(
    fs_uri: str, spark: Any, tmp_path: Path
) -> None:
    with Client(fs_uri, user=ROOT, password=ROOT_PW, token="", config=XdfsConfig()) as client:
        for path, data in FILES.items():
            client.write_file(path, data, replication=2)
        before = client.status()
        assert before.image_txid < before.last_txid  # only the image of the format
    out = tmp_path / "out"
    result = CliRunner().invoke(
        cli, ["analyze", "--fs", fs_uri, "--out", str(out)],
        env={"XDFS_USER": ROOT, "XDFS_PASSWORD": ROOT_PW, "XDFS_CONF": None, "XDFS_FS": None},
    )
    assert result.exit_code == 0, result.output
    found = re.search(r"Checkpoint written at txid (\d+)", result.output)
    assert found, result.output
    txid = int(found.group(1))
    assert txid >= before.last_txid
    assert f"namespace as of txid {txid} (the image)" in result.output
    assert "\n  - " in result.output  # the headlines

    summary = json.loads((out / "summary.json").read_text())
    assert summary["namespace_txid"] == txid
    assert summary["namespace"]["files"] == len(FILES)
    assert summary["namespace"]["bytes"] == sum(len(d) for d in FILES.values())
    replication = summary["replication"]
    assert (replication["orphan_blocks"], replication["missing"]) == (0, 0)
    assert replication["healthy"] == replication["blocks"] == len(FILES)
    assert summary["headlines"] and len(summary["headlines"]) <= 5
    assert any("expected live replicas" in line for line in summary["headlines"])

    page = (out / "report.html").read_text()
    first_section = page.index("<section")
    assert page.index('<section id="headlines">') == first_section
    items = re.findall(r"<li>(.*?)</li>", page[first_section:page.index("</section>")])
    assert len(items) == len(summary["headlines"])
    assert f"txid {txid} (the image)" in page


def _summary(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "namespace": {"files": 1000, "bytes": 10 * 2**30},
        "replication": {"blocks": 500, "healthy": 500, "missing": 0, "under_replicated": 0,
                        "blocks_with_corrupt": 0, "orphan_blocks": 0},
        "small_files": {"small_files": 900, "files": 1000, "small_share": 0.9,
                        "threshold_bytes": 2 * 2**20,
                        "top_dirs": [{"path": "/logs", "direct_small_files": 800}]},
        "usage": {"by_user": [{"owner": "alice", "bytes": 6 * 2**30, "files": 10}]},
        "capacity": {
            "forecast": {"namenodes_needed": 1, "datanodes_needed": 3,
                         "projected_namenode_memory_with_growth_bytes": 2**20,
                         "months_until_full": None},
            "planning": {"horizon_months": 6, "growth_factor": 3.0},
        },
    }
    return {**base, **overrides}


def test_headlines_lead_with_what_is_most_urgent() -> None:
    healthy = headlines(_summary())
    assert healthy[0].startswith("900 of 1,000 files (90%)")  # a small-file problem first
    assert "/logs" in healthy[0]
    assert any(line.startswith("Top user: alice with 6.0 GiB in 10 files (60%") for line in
               healthy)
    assert healthy[-1] == "All 500 blocks have their expected live replicas."

    broken = headlines(_summary(replication={
        "blocks": 500, "healthy": 490, "missing": 2, "under_replicated": 8,
        "blocks_with_corrupt": 1, "orphan_blocks": 3}))
    assert broken[0].startswith("2 of 500 blocks are missing")
    assert broken[1] == "8 blocks are under-replicated and 1 have corrupt replicas, of 500."
    assert len(broken) == 5 and not any("All 500" in line for line in broken)

    no_map = headlines(_summary(replication=None, small_files=None, usage=None))
    assert no_map[-1].startswith("Replication was not checked")
