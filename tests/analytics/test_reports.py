"""xdfs analyze end to end: a namespace of known content built through a real NameNode,
exported (oiv/oev Parquet, admin -dumpBlockMap), analysed on local Spark; every report table
is compared with a pure-Python model of the namespace, and the HTML report is parsed."""

from __future__ import annotations

import collections
import datetime as dt
import json
import math
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest

from tests.analytics.namespace import (
    DAY_MS,
    LATE_FILES,
    WAREHOUSE,
    WAREHOUSE_QUOTAS,
    Built,
    FileSpec,
    MiB,
)
from xdfs.analytics import export, forecast
from xdfs.analytics.reports import AGE_BUCKETS, SIZE_BUCKETS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def result(built: Built, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from xdfs.analytics.job import JobConfig, run

    out = tmp_path_factory.mktemp("analyze")
    run(JobConfig(image=str(built.image), out=str(out), edits=str(built.edits_dir),
                  blocks=str(built.blockmap_dir), as_of_ms=built.as_of_ms), spark)
    return out


def table(out: Path, name: str) -> pd.DataFrame:
    return pd.read_parquet(out / "tables" / name)


def _bucket(value: int, buckets: tuple[tuple[str, int, int | None], ...]) -> int:
    return next(i for i, (_, lo, hi) in enumerate(buckets) if value >= lo and (
        hi is None or value < hi))


def _dirs(specs: list[FileSpec]) -> set[str]:
    out = {"/", "/tmp", "/user"}  # made by xdfs namenode -format
    for spec in specs:
        parts = spec.path.split("/")[1:-1]
        out.update("/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1))
    return out


def test_exports_stream_to_parquet(built: Built, tmp_path: Path) -> None:
    counts = export.export_image(built.image, tmp_path / "img", batch_rows=100)
    inodes = pq.read_table(tmp_path / "img" / export.INODES_FILE)
    assert counts.rows[export.INODES_FILE] == inodes.num_rows == len(
        _dirs(built.specs)) + len(built.specs)
    assert pq.ParquetFile(tmp_path / "img" / export.INODES_FILE).num_row_groups > 10
    rows = inodes.to_pandas().set_index("path")
    big = rows.loc["/data/big/b1"]
    assert (big["size_bytes"], big["block_count"], big["owner"], big["group"], big["depth"],
            big["parent_path"], big["permission"]) == (
        20 * MiB + 1, 3, "carol", "dev", 3, "/data/big", "-rw-r--r--")
    # HDFS's NSQUOTA and DSQUOTA: -1 for none
    assert tuple(rows.loc[WAREHOUSE, ["ns_quota", "ds_quota"]]) == WAREHOUSE_QUOTAS
    assert tuple(rows.loc["/data/big", ["ns_quota", "ds_quota"]]) == (-1, -1)
    assert tuple(big[["ns_quota", "ds_quota"]]) == (-1, -1)
    blocks = pq.read_table(tmp_path / "img" / export.BLOCKS_FILE).to_pandas()
    assert len(blocks) == sum(len(s.sizes) for s in built.specs)
    assert blocks["size_bytes"].sum() == sum(s.size for s in built.specs)
    edits = export.export_edits(built.edits_dir, tmp_path / "ed")
    frame = pq.read_table(tmp_path / "ed" / export.EDITS_FILE).to_pandas()
    assert edits.rows[export.EDITS_FILE] == len(frame)
    assert (frame["op"] == "add_file").sum() == len(built.specs) + len(LATE_FILES)
    # lengths arrive with update_blocks (earlier blocks) and close_file (the last one)
    assert frame["size_delta_bytes"].sum() == sum(s.size for s in built.specs + LATE_FILES)
    assert frame[frame["op"] == "add_block"]["blocks_delta"].sum() == sum(
        len(s.sizes) for s in built.specs + LATE_FILES)
    assert set(frame[frame["op"] == "set_owner"]["user"]) == {"alice", "bob", "carol"}


def test_namespace_summary_and_histogram(built: Built, result: Path) -> None:
    specs = built.specs
    row = table(result, "namespace_summary").iloc[0]
    assert row["files"] == len(specs) == 2117
    assert row["dirs"] == len(_dirs(specs)) == 30
    assert row["bytes"] == sum(s.size for s in specs)
    assert row["blocks"] == sum(len(s.sizes) for s in specs) == 1625
    assert row["replicated_bytes"] == sum(s.size * s.replication for s in specs)
    assert row["empty_files"] == 500
    assert row["under_construction_files"] == 0
    assert math.isclose(row["avg_file_bytes"], row["bytes"] / row["files"])
    hist = table(result, "size_histogram")
    expected = collections.Counter(_bucket(s.size, SIZE_BUCKETS) for s in specs)
    expected_bytes: collections.Counter[int] = collections.Counter()
    for s in specs:
        expected_bytes[_bucket(s.size, SIZE_BUCKETS)] += s.size
    assert list(hist["bucket"]) == [b[0] for b in SIZE_BUCKETS]
    assert list(hist["files"]) == [expected[i] for i in range(len(SIZE_BUCKETS))]
    assert list(hist["bytes"]) == [expected_bytes[i] for i in range(len(SIZE_BUCKETS))]


def test_small_files(built: Built, result: Path) -> None:
    small = [s for s in built.specs if s.size < 2 * MiB]
    row = table(result, "small_files_summary").iloc[0]
    assert (row["small_files"], row["small_bytes"], row["threshold_bytes"]) == (
        len(small), sum(s.size for s in small), 2 * MiB)
    assert row["small_files"] == 1000 + 500 + 500 + 6 + 1
    rollup: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0, 0])
    for s in built.specs:
        parts = s.path.split("/")[1:-1]
        for d in ["/"] + ["/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1)]:
            rollup[d][0] += 1
            if s.size < 2 * MiB:
                rollup[d][1] += 1
                rollup[d][2] += s.size
    by_dir = table(result, "small_files_by_dir")
    got = {r.path: [r.files, r.small_files, r.small_bytes] for r in by_dir.itertuples()}
    assert got == {d: v for d, v in rollup.items() if v[1]}
    assert got["/"] == [2117, 2007, sum(s.size for s in small)]
    top = table(result, "small_files_top_dirs")
    assert list(top["path"][:2]) == ["/user/bob", "/user/alice/tmp"]
    assert list(top["path"][2:12]) == [f"/data/logs/day{d}" for d in range(9, -1, -1)]
    assert list(top["path"][12:]) == ["/health/under", "/health/corrupt"]
    assert list(top["direct_small_files"]) == [500, 500] + [100] * 10 + [6, 1]


def test_usage_by_user_and_group(built: Built, result: Path) -> None:
    for key, column in (("owner", "usage_by_user"), ("group", "usage_by_group")):
        expected: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0, 0, 0])
        for s in built.specs:
            name = getattr(s, key) or built.root_group
            expected[name][0] += 1
            expected[name][1] += s.size
            expected[name][2] += s.size * s.replication
            expected[name][3] += len(s.sizes)
        frame = table(result, column)
        got = {getattr(r, key): [r.files, r.bytes, r.replicated_bytes, r.blocks]
               for r in frame.itertuples()}
        assert got == dict(expected)
        assert list(frame["bytes"]) == sorted(frame["bytes"], reverse=True)
    users = table(result, "usage_by_user")
    assert list(users["owner"]) == ["bob", "carol", "root", "alice"]
    assert users.set_index("owner").loc["root", "dirs"] == 30


def test_cold_data(built: Built, result: Path) -> None:
    frame = table(result, "cold_data")
    for basis, attribute in (("access", "access_age_days"), ("modification", "age_days")):
        files: collections.Counter[int] = collections.Counter()
        size: collections.Counter[int] = collections.Counter()
        for s in built.specs:
            age = getattr(s, attribute)
            index = 0 if age is None else _bucket(age, tuple(
                (label, lo, hi) for label, lo, hi in AGE_BUCKETS))
            files[index] += 1
            size[index] += s.size
        part = frame[frame["basis"] == basis]
        assert list(part["files"]) == [files[i] for i in range(len(AGE_BUCKETS))]
        assert list(part["bytes"]) == [size[i] for i in range(len(AGE_BUCKETS))]
    access = frame[frame["basis"] == "access"].set_index("bucket")
    assert access.loc[">= 365 days", "files"] == 100  # logs day9: 5 + 9 * 40 days
    modified = frame[frame["basis"] == "modification"].set_index("bucket")
    assert modified.loc[">= 365 days", "files"] == 4 + 100  # /data/big and logs day9


def test_replication_health(built: Built, result: Path) -> None:
    row = table(result, "replication_summary").iloc[0]
    assert (row["blocks"], row["missing"], row["under_replicated"], row["over_replicated"],
            row["corrupt_replicas"], row["orphan_replicas"], row["orphan_blocks"]) == (
        1625, 3, 6, 4, 3, 9, 3)
    assert row["healthy"] == 1625 - 3 - 6 - 4
    problems = table(result, "replication_problems")
    by_status = problems.groupby("status")["path"].apply(lambda p: sorted(set(p))).to_dict()
    assert by_status == {
        # c0: every replica corrupt, no good one left
        "missing": ["/health/corrupt/c0", "/health/missing/m0", "/health/missing/m1"],
        "over_replicated": [f"/health/over/o{i}" for i in range(4)],
        "under_replicated": [f"/health/under/u{i}" for i in range(6)],
    }
    nodes = table(result, "datanode_usage")
    held = sum(s.size for s in built.specs + LATE_FILES if "/missing/" not in s.path)
    assert len(nodes) == 3 and set(nodes["state"]) == {"live"}
    assert list(nodes["replica_bytes"]) == [held] * 3
    assert list(nodes["replica_bytes_skew_pct"]) == [0.0] * 3


def test_growth_and_forecast(built: Built, result: Path) -> None:
    daily = table(result, "growth_daily")
    first = dt.datetime.fromtimestamp(built.started_ms / 1000, dt.UTC).date()
    last = dt.datetime.fromtimestamp(built.finished_ms / 1000, dt.UTC).date()
    assert set(daily["day"]) <= {first, last}
    every = built.specs + LATE_FILES
    assert daily["files_created"].sum() == len(every)
    assert daily["dirs_created"].sum() == len(_dirs(every)) - 3  # not /, /tmp, /user
    assert daily["bytes_added"].sum() == sum(s.size for s in every)
    assert daily["bytes_removed"].sum() == 0
    metrics = table(result, "capacity_forecast").set_index("metric")
    value = metrics["value"]
    span = (max(daily["day"]) - min(daily["day"])).days + 1
    assert value["files_per_day"] == len(every) / span
    assert value["bytes_per_inode"] > 50  # measured: a Python inode is never this cheap
    assert "tracemalloc" in metrics.loc["bytes_per_inode_method", "text"]
    assert value["datanodes"] == 3
    now = forecast.CurrentState(**{  # type: ignore[arg-type]
        k: (metrics.loc[k, "text"] if k == "growth_basis" else
            int(value[k]) if k in ("inodes", "files", "bytes", "replicated_bytes",
                                   "history_days", "raw_used_bytes", "raw_capacity_bytes",
                                   "datanodes") else value[k])
        for k in forecast.CurrentState.__dataclass_fields__})
    expected = forecast.forecast(now, forecast.PlanningOptions())
    for name, number in expected.as_dict().items():
        assert value[name] == pytest.approx(number), name
    monthly = table(result, "capacity_monthly")
    assert list(monthly["month"]) == list(range(7))
    assert list(monthly["inodes"]) == sorted(monthly["inodes"])


class _Html(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.sections: dict[str, dict[str, Any]] = {}
        self._section: str | None = None
        self._table: str | None = None
        self._chart: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "section":
            self._section = a["id"] or ""
            self.sections[self._section] = {"tables": {}, "charts": {}, "h2": ""}
        elif self._section is None:
            return
        current = self.sections[self._section]
        if tag == "table" and a.get("data-table"):
            self._table = a["data-table"]
            current["tables"][self._table] = 0
        elif tag == "tr" and self._table is not None:
            current["tables"][self._table] += 1
        elif tag == "figure":
            self._chart = a["data-chart"]
            current["charts"][self._chart] = 0
        elif tag == "rect" and self._chart is not None:
            current["charts"][self._chart] += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._table = None
        elif tag == "figure":
            self._chart = None
        elif tag == "section":
            self._section = None


def test_html_report_and_json_summary(built: Built, result: Path) -> None:
    page = (result / "report.html").read_text()
    assert "<script" not in page and "http://" not in page.replace(
        'xmlns="http://www.w3.org/2000/svg"', "")  # self-contained
    parser = _Html()
    parser.feed(page)
    expected = {
        "headlines": (set(), set()),
        "summary": ({"namespace_summary", "size_histogram"},
                    {"size_histogram_files", "size_histogram_bytes"}),
        "small-files": ({"small_files_summary", "small_files_top_dirs", "small_files_by_dir"},
                        {"small_files_top_dirs"}),
        "usage": ({"usage_by_user", "usage_by_group"}, {"usage_by_user", "usage_by_group"}),
        "cold-data": ({"cold_data"}, {"cold_data_access", "cold_data_modification"}),
        "replication": ({"replication_summary", "replication_problems", "datanode_usage"},
                        {"replication_status", "datanode_replica_bytes"}),
        "growth": ({"growth_daily", "capacity_forecast", "capacity_monthly"},
                   {"growth_files_per_day", "forecast_namenode_memory",
                    "forecast_raw_bytes"}),
    }
    assert set(parser.sections) == set(expected)
    for section, (tables, chart_names) in expected.items():
        got = parser.sections[section]
        assert set(got["tables"]) == tables, section
        assert set(got["charts"]) == chart_names, section
        assert all(rows > 1 for rows in got["tables"].values()), section  # header + data
        assert all(bars > 0 for bars in got["charts"].values()), section
    assert next(iter(parser.sections)) == "headlines"  # the page leads with them
    summary = json.loads((result / "summary.json").read_text())
    txid = int(built.image.name.split("_")[1])
    assert summary["namespace_txid"] == txid and f"txid {txid} (the image)" in page
    first, last = summary["edits_txids"]
    assert first == 1 and last > txid  # the edits go on after the image
    assert summary["headlines"][0].startswith("3 of ") and "missing" in summary["headlines"][0]
    assert all(f"<li>{line}</li>" in page for line in summary["headlines"])
    assert summary["namespace"]["files"] == 2117
    assert summary["replication"]["missing"] == 3  # m0, m1 and the all-corrupt c0
    assert summary["small_files"]["small_files"] == 2007
    assert summary["capacity"]["forecast"]["namenodes_needed"] == 1
    assert summary["tables"]["small_files_by_dir"] == len(table(result, "small_files_by_dir"))


def test_fetch_image_matches_the_saved_one(built: Built) -> None:
    assert built.fetched_image is not None, "fetch_image failed against the NameNode"
    assert built.fetched_image.read_bytes() == built.image.read_bytes()
    assert built.fetched_image.name == built.image.name
    assert DAY_MS == 86_400_000
