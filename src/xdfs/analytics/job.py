"""The Spark job behind ``xdfs analyze``: exports in, report tables + HTML + JSON out.

Output directory (a local path, or any URL Spark's Hadoop client writes: ``webhdfs://`` for
xdfs itself, see :mod:`xdfs.analytics.storage`)::

    OUT/export/              the Parquet exports made from raw inputs (image, edits); with a
                             URL, every input the executors read (uploaded by the driver)
    OUT/tables/<name>/       one Parquet table per report table (Spark output)
    OUT/report.html          headline findings, then every report as a section with tables
                             and SVG charts
    OUT/summary.json         the key numbers of every report, the headlines, and the txid of
                             the namespace described (``namespace_txid``)

The master is never chosen here unless asked: ``--master`` sets it, otherwise Spark's own
configuration decides (``spark-submit --master``, ``spark-defaults.conf``), and PySpark
falls back to ``local[*]``. ``spark-submit`` runs :mod:`xdfs.analytics.submit`.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from xdfs.analytics import charts, export, forecast, reports
from xdfs.analytics.datasource import use_this_python
from xdfs.analytics.headlines import headlines
from xdfs.analytics.html_report import ROWS_SHOWN, Section, Table, render
from xdfs.analytics.memory import MEASURE_INODES_MAX, measure_bytes_per_inode
from xdfs.analytics.storage import HadoopFiles, is_url, join
from xdfs.errors import InvalidArgument

log = logging.getLogger("xdfs.analytics.job")

_BYTE_WORDS = ("bytes",)


@dataclass(frozen=True)
class JobConfig:
    image: str  # an fsimage_<txid> file or an ``oiv --format parquet`` directory
    out: str
    edits: str | None = None  # a segment, a name dir's current/, or an ``oev`` directory
    blocks: str | None = None  # an ``admin -dumpBlockMap`` directory
    master: str | None = None
    small_file_bytes: int = 2 * reports.MiB
    top_n: int = 20
    as_of_ms: int | None = None  # "now" for ages; default: the wall clock
    bytes_per_inode: float | None = None  # default: measured on the image
    measure_inodes_max: int = MEASURE_INODES_MAX
    planning: forecast.PlanningOptions = field(default_factory=forecast.PlanningOptions)
    shuffle_partitions: int | None = None
    #: Spark settings for the session (``spark.pyspark.python``, ``spark.hadoop.*``)
    spark_conf: dict[str, str] = field(default_factory=dict)


@dataclass
class _Inputs:
    inodes: Path
    blocks: Path
    edits: Path | None
    replicas: Path | None
    datanodes: Path | None
    image_file: Path | None
    image_txid: int | None  # the namespace the reports describe (None: not recorded)
    edits_txids: tuple[int, int] | None  # first and last txid of the edits given


def _prepare(cfg: JobConfig, out: Path) -> _Inputs:
    """Export raw inputs to Parquet (pyarrow, streaming) under OUT/export."""
    image = Path(cfg.image)
    if image.is_dir():
        image_dir, image_file = image, None
    else:
        image_dir, image_file = out / "export" / "image", image
        export.export_image(image, image_dir)
    for name in (export.INODES_FILE, export.BLOCKS_FILE):
        if not (image_dir / name).exists():
            raise InvalidArgument(f"{image_dir} has no {name}: give an fsimage or an "
                                  "`xdfs oiv --format parquet` directory")
    edits: Path | None = None
    edits_txids: tuple[int, int] | None = None
    if cfg.edits is not None:
        source = Path(cfg.edits)
        if (source / export.EDITS_FILE).exists():
            edits = source / export.EDITS_FILE
        else:
            edits_dir = out / "export" / "edits"
            export.export_edits(source, edits_dir)
            edits = edits_dir / export.EDITS_FILE
        edits_txids = export.edits_txid_range(edits)
    replicas = datanodes = None
    if cfg.blocks is not None:
        blocks = Path(cfg.blocks)
        replicas = blocks / export.REPLICAS_FILE
        if not replicas.exists():
            raise InvalidArgument(f"{blocks} has no {export.REPLICAS_FILE}: give an "
                                  "`xdfs admin -dumpBlockMap` directory")
        datanodes = blocks / export.DATANODES_FILE
        datanodes = datanodes if datanodes.exists() else None
    inodes = image_dir / export.INODES_FILE
    return _Inputs(inodes, image_dir / export.BLOCKS_FILE, edits, replicas, datanodes,
                   image_file, export.exported_image_txid(inodes), edits_txids)


@dataclass
class _Sources:
    """Where Spark reads each input: the local exports, or their copies under OUT/export
    when OUT is a URL (executors elsewhere read only what is there)."""

    inodes: str
    blocks: str
    edits: str | None
    replicas: str | None
    datanodes: str | None


def _stage(cfg: JobConfig, files: HadoopFiles, staging: Path) -> JobConfig:
    """The config with every input given as a URL fetched to a local copy (same name)."""
    def local(location: str | None, kind: str) -> str | None:
        if location is None or not is_url(location):
            return location
        name = location.rstrip("/").rsplit("/", 1)[-1]
        checksum = location.rstrip("/") + ".md5"  # an image's, verified on export
        if kind == "image" and files.exists(checksum):
            files.fetch(checksum, staging / kind / (name + ".md5"))
        return str(files.fetch(location, staging / kind / name))

    image = local(cfg.image, "image")
    assert image is not None
    return replace(cfg, image=image, edits=local(cfg.edits, "edits"),
                   blocks=local(cfg.blocks, "blocks"))


def _sources(inputs: _Inputs, files: HadoopFiles, out: str) -> _Sources:
    if not is_url(out):
        def where(path: Path | None) -> str | None:
            return None if path is None else str(path)
    else:
        def where(path: Path | None) -> str | None:
            if path is None:
                return None
            kind = {"edits.parquet": "edits", "replicas.parquet": "blockmap",
                    "datanodes.parquet": "blockmap"}.get(path.name, "image")
            return files.publish(path, join(out, "export", kind, path.name))
    inodes, blocks = where(inputs.inodes), where(inputs.blocks)
    assert inodes is not None and blocks is not None
    return _Sources(inodes, blocks, where(inputs.edits), where(inputs.replicas),
                    where(inputs.datanodes))


def spark_session(master: str | None, shuffle_partitions: int | None = None,
                  conf: dict[str, str] | None = None) -> SparkSession:
    builder = SparkSession.builder.appName("xdfs-analyze")
    if master:
        builder = builder.master(master)
    if shuffle_partitions:
        builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    hadoop = session.sparkContext._jsc.hadoopConfiguration()
    for key, value in (conf or {}).items():  # also when getOrCreate found a session
        if key.startswith("spark.hadoop."):
            hadoop.set(key.removeprefix("spark.hadoop."), value)
    # Local Python workers run this interpreter (the one that has xdfs installed) unless
    # the user chose one; a cluster sets PYSPARK_PYTHON for its executors.
    use_this_python(session.sparkContext)
    return session


class _Collected:
    """Report tables written to OUT/tables and their first rows kept for the HTML/JSON."""

    def __init__(self, spark: SparkSession, out: str) -> None:
        self.spark = spark
        self.dir = join(out, "tables")
        self.tables: dict[str, Table] = {}

    def add(self, name: str, df: DataFrame) -> Table:
        """One Spark job per table (the write); the first rows and the count are then read
        back from the single Parquet file it wrote (coalesce(1) keeps a sort's order)."""
        target = join(self.dir, name)
        df.coalesce(1).write.mode("overwrite").parquet(target)
        total, rows = (self._read_back(target) if is_url(target)
                       else _read_back_local(Path(target)))
        table = Table(name, list(df.columns), rows, total, frozenset(
            c for c in df.columns if any(w in c for w in _BYTE_WORDS) and "pct" not in c))
        self.tables[name] = table
        return table

    def _read_back(self, target: str) -> tuple[int, list[tuple[Any, ...]]]:
        """The count and first rows of a table at a URL, read by Spark (as Arrow: the
        values are those pyarrow gives for a local table)."""
        back = self.spark.read.parquet(target)
        first = back.limit(ROWS_SHOWN).toArrow()
        rows = list(zip(*(c.to_pylist() for c in first.columns), strict=True))
        return back.count(), rows

    def records(self, name: str) -> list[dict[str, Any]]:
        table = self.tables[name]
        return [dict(zip(table.columns, map(_jsonable, row), strict=True))
                for row in table.rows]


def _read_back_local(target: Path) -> tuple[int, list[tuple[Any, ...]]]:
    total = 0
    rows: list[tuple[Any, ...]] = []
    for part in sorted(target.glob("part-*.parquet")):
        data = pq.ParquetFile(part)
        total += data.metadata.num_rows
        for batch in data.iter_batches(batch_size=ROWS_SHOWN):
            if len(rows) < ROWS_SHOWN:
                rows += list(zip(*(c.to_pylist() for c in batch.columns), strict=True))
    return total, rows


def _jsonable(value: object) -> object:
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def run(cfg: JobConfig, spark: SparkSession | None = None) -> dict[str, Any]:
    """Run every report; returns the JSON summary (also written to OUT/summary.json)."""
    started = time.monotonic()
    spark = spark or spark_session(cfg.master, cfg.shuffle_partitions, cfg.spark_conf)
    files = HadoopFiles(spark)
    with tempfile.TemporaryDirectory(prefix="xdfs-analyze-") as staging:
        local_out = Path(staging, "out") if is_url(cfg.out) else Path(cfg.out)
        local_out.mkdir(parents=True, exist_ok=True)
        inputs = _prepare(_stage(cfg, files, Path(staging, "in")), local_out)
        per_inode, method = _bytes_per_inode(cfg, inputs)
        return _run(cfg, spark, files, inputs, per_inode, method, started)


def _bytes_per_inode(cfg: JobConfig, inputs: _Inputs) -> tuple[float, str]:
    if cfg.bytes_per_inode is not None:
        return cfg.bytes_per_inode, "given (--bytes-per-inode)"
    if inputs.image_file is not None:
        cost = measure_bytes_per_inode(inputs.image_file, cfg.measure_inodes_max)
        return cost.bytes_per_inode, cost.method
    raise InvalidArgument("measuring bytes per inode needs the fsimage file: give "
                          "--image fsimage_<txid> or --bytes-per-inode")


def _run(
    cfg: JobConfig, spark: SparkSession, files: HadoopFiles, inputs: _Inputs,
    per_inode: float, method: str, started: float,
) -> dict[str, Any]:
    where = _sources(inputs, files, cfg.out)
    as_of_ms = cfg.as_of_ms if cfg.as_of_ms is not None else int(time.time() * 1000)
    opts = reports.Options(cfg.small_file_bytes, cfg.top_n, as_of_ms)
    inodes = spark.read.parquet(where.inodes).cache()
    blocks = spark.read.parquet(where.blocks)
    file_rows = inodes.where(F.col("type") == "file").cache()
    dirs = inodes.where(F.col("type") == "dir")
    got = _Collected(spark, cfg.out)
    sections = [
        _summary_section(spark, got, inodes, file_rows),
        _small_files_section(got, file_rows, dirs, opts),
        _usage_section(got, inodes),
        _cold_section(spark, got, file_rows, opts),
    ]
    replication_section, datanode_stats = _replication_section(
        spark, got, blocks, inodes, where)
    sections.append(replication_section)
    growth_section, capacity = _growth_section(
        spark, got, inodes, where, per_inode, method, datanode_stats, cfg.planning)
    sections.append(growth_section)
    summary = _summary_json(cfg, got, as_of_ms, capacity, inputs)
    summary["elapsed_s"] = round(time.monotonic() - started, 3)
    facts: list[tuple[str, str]] = [
        ("namespace as of", describe_txids(summary)),
        ("image", cfg.image), ("edits", cfg.edits or "(none)"),
        ("block map", cfg.blocks or "(none)"), ("Spark master", str(spark.sparkContext.master)),
        ("ages as of", _iso(as_of_ms)),
        ("small-file threshold", f"{cfg.small_file_bytes:,} bytes"),
    ]
    page = render("xdfs metadata report", dt.datetime.now(dt.UTC), facts, sections,
                  summary["headlines"])
    text = json.dumps(summary, indent=2, sort_keys=True) + "\n"
    if is_url(cfg.out):
        files.write_bytes(join(cfg.out, "report.html"), page.encode())
        files.write_bytes(join(cfg.out, "summary.json"), text.encode())
    else:
        Path(cfg.out, "report.html").write_text(page, encoding="utf-8")
        Path(cfg.out, "summary.json").write_text(text)
    inodes.unpersist()
    file_rows.unpersist()
    return summary


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="seconds")


def _column(table: Table, name: str) -> list[Any]:
    index = table.columns.index(name)
    return [row[index] for row in table.rows]


def _summary_section(
    spark: SparkSession, got: _Collected, inodes: DataFrame, files: DataFrame
) -> Section:
    summary = got.add("namespace_summary", reports.namespace_summary(inodes))
    histogram = got.add("size_histogram", reports.size_histogram(spark, files))
    return Section(
        "summary", "1. Namespace summary",
        notes=["Files, directories, bytes and blocks of the image; file sizes by bucket."],
        tables=[summary, histogram],
        charts=[
            charts.bar_chart("size_histogram_files", "Files by size",
                             _column(histogram, "bucket"), _column(histogram, "files")),
            charts.bar_chart("size_histogram_bytes", "Bytes by file size",
                             _column(histogram, "bucket"), _column(histogram, "bytes"),
                             unit="bytes"),
        ],
    )


def _small_files_section(
    got: _Collected, files: DataFrame, dirs: DataFrame, opts: reports.Options
) -> Section:
    tables = reports.small_files(files, dirs, opts)
    totals = got.add("small_files_summary", tables["small_files_summary"])
    top = got.add("small_files_top_dirs", tables["small_files_top_dirs"])
    by_dir = got.add("small_files_by_dir", tables["small_files_by_dir"])
    return Section(
        "small-files", "2. Small files",
        notes=[f"A file is small below {opts.small_file_bytes:,} bytes. small_files_by_dir "
               "rolls every small file up to each of its ancestor directories; the top "
               "directories to compact hold the most small files directly."],
        tables=[totals, top, by_dir],
        charts=[charts.bar_chart("small_files_top_dirs", "Small files directly inside",
                                 _column(top, "path"), _column(top, "direct_small_files"))],
    )


def _usage_section(got: _Collected, inodes: DataFrame) -> Section:
    users = got.add("usage_by_user", reports.usage(inodes, "owner"))
    groups = got.add("usage_by_group", reports.usage(inodes, "group"))
    shown = 15
    return Section(
        "usage", "3. Usage by user and group",
        notes=["replicated_bytes = bytes x each file's replication (disk used)."],
        tables=[users, groups],
        charts=[
            charts.bar_chart("usage_by_user", "Replicated bytes by user",
                             _column(users, "owner")[:shown],
                             _column(users, "replicated_bytes")[:shown], unit="bytes"),
            charts.bar_chart("usage_by_group", "Replicated bytes by group",
                             _column(groups, "group")[:shown],
                             _column(groups, "replicated_bytes")[:shown], unit="bytes"),
        ],
    )


def _cold_section(
    spark: SparkSession, got: _Collected, files: DataFrame, opts: reports.Options
) -> Section:
    cold = got.add("cold_data", reports.cold_data(spark, files, opts))
    figures = []
    for basis in ("access", "modification"):
        rows = [r for r in cold.rows if r[0] == basis]
        figures.append(charts.bar_chart(
            f"cold_data_{basis}", f"Bytes by age of last {basis}",
            [str(r[cold.columns.index("bucket")]) for r in rows],
            [float(r[cold.columns.index("bytes")]) for r in rows], unit="bytes"))
    return Section(
        "cold-data", "4. Cold data",
        notes=[f"Ages as of {_iso(opts.as_of_ms)}, by last access and by last modification."],
        tables=[cold], charts=figures,
    )


def _replication_section(
    spark: SparkSession, got: _Collected, blocks: DataFrame, inodes: DataFrame,
    inputs: _Sources,
) -> tuple[Section, dict[str, int]]:
    section = Section("replication", "5. Replication health")
    if inputs.replicas is None:
        section.notes.append("Not available: no block map given (--blocks DIR from "
                             "`xdfs admin -dumpBlockMap`, or --fs).")
        return section, {}
    replicas = spark.read.parquet(inputs.replicas)
    datanodes = (spark.read.parquet(inputs.datanodes)
                 if inputs.datanodes is not None else None)
    tables = reports.replication(blocks, inodes, replicas, datanodes)
    summary = got.add("replication_summary", tables["replication_summary"])
    problems = got.add("replication_problems", tables["replication_problems"])
    nodes = got.add("datanode_usage", tables["datanode_usage"])
    statuses = ["healthy", "missing", "under_replicated", "over_replicated",
                "corrupt_replicas", "orphan_replicas"]
    first: dict[str, Any] = (
        dict(zip(summary.columns, summary.rows[0], strict=True)) if summary.rows else {})
    section.notes.append(
        "Expected replication is the image's; replicas are the live block map's. Orphan "
        "replicas belong to blocks the image does not hold (newer files, or blocks the "
        "NameNode is deleting).")
    section.tables = [summary, problems, nodes]
    section.charts = [
        charts.bar_chart("replication_status", "Blocks by replication status",
                         statuses, [first.get(s) or 0 for s in statuses]),
        charts.bar_chart("datanode_replica_bytes", "Replica bytes by DataNode",
                         [str(a) for a in _column(nodes, "address")],
                         _column(nodes, "replica_bytes"), unit="bytes"),
    ]
    live: list[dict[str, Any]] = [dict(zip(nodes.columns, row, strict=True)) for row in nodes.rows]
    stats = {
        "datanodes": sum(1 for n in live if n["state"] == "live"),
        "capacity_bytes": sum(n["capacity_bytes"] or 0 for n in live if n["state"] == "live"),
        "used_bytes": sum(n["used_bytes"] or 0 for n in live if n["state"] == "live"),
    }
    return section, stats


def _growth_section(
    spark: SparkSession, got: _Collected, inodes: DataFrame, inputs: _Sources,
    per_inode: float, method: str, nodes: dict[str, int], plan: forecast.PlanningOptions,
) -> tuple[Section, dict[str, Any]]:
    if inputs.edits is not None:
        basis = "edits"
        daily_df = reports.growth_from_edits(spark.read.parquet(inputs.edits))
    else:
        basis = "image"
        daily_df = reports.growth_from_image(inodes)
    daily = got.add("growth_daily", daily_df)
    days_col = _column(daily, "day")
    span_days = (max(days_col) - min(days_col)).days + 1 if days_col else 0
    totals = daily_df.agg(*[F.sum(c).alias(c) for c in (
        "files_created", "dirs_created", "net_bytes")]).collect()[0]
    summary = got.tables["namespace_summary"]
    ns: dict[str, Any] = dict(zip(summary.columns, summary.rows[0], strict=True))

    def per_day(value: int | None) -> float:
        return (value or 0) / span_days if span_days else 0.0

    replicated = int(ns["replicated_bytes"] or 0)
    now = forecast.CurrentState(
        inodes=int(ns["files"] + ns["dirs"]), files=int(ns["files"]),
        bytes=int(ns["bytes"] or 0), replicated_bytes=replicated,
        bytes_per_inode=per_inode, files_per_day=per_day(totals["files_created"]),
        inodes_per_day=per_day((totals["files_created"] or 0) + (totals["dirs_created"] or 0)),
        bytes_per_day=per_day(totals["net_bytes"]), history_days=span_days,
        growth_basis=basis,
        raw_used_bytes=nodes.get("used_bytes") or replicated,
        raw_capacity_bytes=nodes.get("capacity_bytes", 0), datanodes=nodes.get("datanodes", 0),
    )
    result = forecast.forecast(now, plan)
    months = forecast.monthly(now, plan)
    metrics = {**asdict(now), **result.as_dict(), "bytes_per_inode_method": method,
               **{f"plan_{k}": v for k, v in asdict(plan).items()}}
    got.add("capacity_forecast", spark.createDataFrame(
        [(k, float(v) if isinstance(v, int | float) else None,
          None if isinstance(v, int | float) or v is None else str(v))
         for k, v in metrics.items()],
        "metric string, value double, text string"))
    monthly = got.add("capacity_monthly", spark.createDataFrame(
        months, "month long, inodes long, namenode_memory_bytes long, raw_bytes long, "
        "raw_capacity_bytes long"))
    until = (f"{result.months_until_full:.1f} months until the DataNodes are full"
             if result.months_until_full is not None else
             "months until full: not known (no DataNode capacity, or no growth)")
    section = Section(
        "growth", "6. Growth and capacity forecast",
        notes=[
            f"Growth from the {basis} over {span_days} day(s): "
            f"{now.files_per_day:,.1f} files/day, {now.bytes_per_day:,.0f} bytes/day.",
            f"NameNode memory: {per_inode:,.1f} bytes per inode, measured by {method}.",
            f"In {plan.horizon_months} months (NameNode memory x growth "
            f"{plan.growth_factor}): "
            f"{result.projected_namenode_memory_with_growth_bytes:,} bytes of NameNode "
            f"memory ({result.namenodes_needed} NameNode(s) of "
            f"{plan.namenode_heap_bytes:,} bytes), "
            f"{result.projected_raw_bytes:,} raw bytes "
            f"({result.datanodes_needed} DataNode(s) of {result.datanode_disk_bytes:,} "
            f"bytes); {until}.",
        ],
        tables=[daily, got.tables["capacity_forecast"], monthly],
        charts=[
            charts.bar_chart("growth_files_per_day", "Files created per day",
                             [str(d) for d in days_col], _column(daily, "files_created")),
            charts.bar_chart("forecast_namenode_memory", "Projected NameNode memory",
                             [f"month {m}" for m in _column(monthly, "month")],
                             _column(monthly, "namenode_memory_bytes"), unit="bytes"),
            charts.bar_chart("forecast_raw_bytes", "Projected raw disk use",
                             [f"month {m}" for m in _column(monthly, "month")],
                             _column(monthly, "raw_bytes"), unit="bytes"),
        ],
    )
    capacity = {"current": asdict(now), "forecast": result.as_dict(),
                "planning": asdict(plan), "bytes_per_inode_method": method}
    return section, capacity


def _summary_json(
    cfg: JobConfig, got: _Collected, as_of_ms: int, capacity: dict[str, Any],
    inputs: _Inputs,
) -> dict[str, Any]:
    def one(name: str) -> dict[str, Any] | None:
        rows = got.records(name) if name in got.tables else []
        return rows[0] if rows else None

    summary: dict[str, Any] = {
        "generated": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "as_of": _iso(as_of_ms),
        "namespace_txid": inputs.image_txid,
        "edits_txids": list(inputs.edits_txids) if inputs.edits_txids else None,
        "inputs": {"image": cfg.image, "edits": cfg.edits, "blocks": cfg.blocks},
        "namespace": one("namespace_summary"),
        "size_histogram": got.records("size_histogram"),
        "small_files": {**(one("small_files_summary") or {}),
                        "top_dirs": got.records("small_files_top_dirs")[:cfg.top_n]},
        "usage": {"by_user": got.records("usage_by_user")[:10],
                  "by_group": got.records("usage_by_group")[:10]},
        "cold_data": got.records("cold_data"),
        "replication": one("replication_summary") if inputs.replicas is not None else None,
        "capacity": capacity,
        "tables": {name: t.total_rows for name, t in got.tables.items()},
    }
    summary["headlines"] = headlines(summary)
    return summary


def describe_txids(summary: dict[str, Any]) -> str:
    """Which namespace the report describes: the image's txid (and the edits' range)."""
    txid = summary.get("namespace_txid")
    text = f"txid {txid} (the image)" if txid is not None else "the image (txid not recorded)"
    edits = summary.get("edits_txids")
    if edits:
        text += f"; growth from edits txid {edits[0]} to {edits[1]}"
    return text
