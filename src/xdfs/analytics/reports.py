"""The reports of ``xdfs analyze`` as Spark DataFrames (one function per report).

Inputs are the export tables (:mod:`xdfs.analytics.export`): ``inodes`` and ``blocks`` of an
image, optionally ``edits``, ``replicas`` and ``datanodes``. Every function returns small
aggregate tables except the per-directory small-files roll-up (one row per directory that
holds a small file somewhere beneath it) and the list of problem blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
DAY_MS = 86_400_000

#: File-size histogram buckets: (label, lower bound inclusive, upper bound exclusive).
SIZE_BUCKETS: tuple[tuple[str, int, int | None], ...] = (
    ("0 B", 0, 1),
    ("1 B - 1 KiB", 1, KiB),
    ("1 KiB - 64 KiB", KiB, 64 * KiB),
    ("64 KiB - 1 MiB", 64 * KiB, MiB),
    ("1 MiB - 16 MiB", MiB, 16 * MiB),
    ("16 MiB - 128 MiB", 16 * MiB, 128 * MiB),
    ("128 MiB - 1 GiB", 128 * MiB, GiB),
    (">= 1 GiB", GiB, None),
)

#: Age buckets of cold data, in days: (label, lower inclusive, upper exclusive).
AGE_BUCKETS: tuple[tuple[str, int, int | None], ...] = (
    ("< 7 days", 0, 7),
    ("7 - 30 days", 7, 30),
    ("30 - 90 days", 30, 90),
    ("90 - 180 days", 90, 180),
    ("180 - 365 days", 180, 365),
    (">= 365 days", 365, None),
)


@dataclass(frozen=True)
class Options:
    small_file_bytes: int = 2 * MiB
    top_n: int = 20
    as_of_ms: int = 0  # "now" for ages (the job fills it in)


def _bucket_index(value: Column, buckets: tuple[tuple[str, int, int | None], ...]) -> Column:
    expr = F.lit(len(buckets) - 1)
    for index in range(len(buckets) - 2, -1, -1):
        upper = buckets[index][2]
        assert upper is not None
        expr = F.when(value < upper, F.lit(index)).otherwise(expr)
    return expr


def _bucket_table(
    spark: SparkSession, buckets: tuple[tuple[str, int, int | None], ...], unit: str
) -> DataFrame:
    rows = [(i, label, lower, upper) for i, (label, lower, upper) in enumerate(buckets)]
    return spark.createDataFrame(
        rows, f"bucket_index int, bucket string, lower_{unit} long, upper_{unit} long"
    )


# --- 1. namespace summary --------------------------------------------------------------


def namespace_summary(inodes: DataFrame) -> DataFrame:
    files = F.col("type") == "file"
    return inodes.agg(
        F.sum(files.cast("long")).alias("files"),
        F.sum((~files).cast("long")).alias("dirs"),
        F.sum(F.when(files, F.col("size_bytes")).otherwise(0)).alias("bytes"),
        F.sum(F.when(files, F.col("block_count")).otherwise(0)).cast("long").alias("blocks"),
        F.sum(F.when(files, F.col("size_bytes") * F.col("replication")).otherwise(0))
        .alias("replicated_bytes"),
        F.sum((files & (F.col("size_bytes") == 0)).cast("long")).alias("empty_files"),
        F.sum((files & F.col("under_construction")).cast("long"))
        .alias("under_construction_files"),
    ).select(
        "*",
        F.when(F.col("files") > 0, F.col("bytes") / F.col("files")).otherwise(0.0)
        .alias("avg_file_bytes"),
        F.when(F.col("blocks") > 0, F.col("bytes") / F.col("blocks")).otherwise(0.0)
        .alias("avg_block_bytes"),
    )


def size_histogram(spark: SparkSession, files: DataFrame) -> DataFrame:
    counted = (
        files.select(_bucket_index(F.col("size_bytes"), SIZE_BUCKETS).alias("bucket_index"),
                     "size_bytes")
        .groupBy("bucket_index")
        .agg(F.count("*").alias("files"), F.sum("size_bytes").alias("bytes"))
    )
    return (
        _bucket_table(spark, SIZE_BUCKETS, "bytes")
        .join(counted, "bucket_index", "left")
        .fillna(0, ["files", "bytes"])
        .orderBy("bucket_index")
    )


# --- 2. small files --------------------------------------------------------------------


def _ancestors(path: Column, depth: Column) -> Column:
    """Every ancestor directory of a file path: "/", "/a", "/a/b" for "/a/b/f"."""
    parts = F.split(F.substring(path, 2, 1 << 30), "/")
    return F.transform(
        F.sequence(F.lit(0), depth - 1),
        lambda i: F.when(i == 0, F.lit("/")).otherwise(
            F.concat(F.lit("/"), F.array_join(F.slice(parts, F.lit(1), i), "/"))
        ),
    )


def small_files(files: DataFrame, dirs: DataFrame, opts: Options) -> dict[str, DataFrame]:
    """Small files rolled up to every ancestor directory; the top directories to compact
    (most small files directly inside them)."""
    marked = files.select(
        "path", "parent_path", "depth", "size_bytes",
        (F.col("size_bytes") < opts.small_file_bytes).cast("long").alias("small"),
    )
    rollup = (
        marked.select(F.explode(_ancestors(F.col("path"), F.col("depth"))).alias("dir"),
                      "size_bytes", "small")
        .groupBy("dir")
        .agg(
            F.count("*").alias("files"),
            F.sum("small").alias("small_files"),
            F.sum(F.col("small") * F.col("size_bytes")).alias("small_bytes"),
        )
    )
    direct = marked.groupBy(F.col("parent_path").alias("dir")).agg(
        F.sum("small").alias("direct_small_files"),
        F.sum(F.col("small") * F.col("size_bytes")).alias("direct_small_bytes"),
        F.count("*").alias("direct_files"),
    )
    by_dir = (
        rollup.where(F.col("small_files") > 0)
        .join(direct, "dir", "left")
        .join(dirs.select(F.col("path").alias("dir"), "depth", "owner"), "dir", "left")
        .fillna(0, ["direct_small_files", "direct_small_bytes", "direct_files"])
        .select(
            F.col("dir").alias("path"), "depth", "owner", "files", "small_files", "small_bytes",
            (F.col("small_files") / F.col("files")).alias("small_share"),
            "direct_files", "direct_small_files", "direct_small_bytes",
        )
    )
    top = (
        by_dir.where(F.col("direct_small_files") > 0)
        .orderBy(F.desc("direct_small_files"), F.desc("direct_small_bytes"), "path")
        .limit(opts.top_n)
        .select("path", "owner", "direct_small_files", "direct_small_bytes", "direct_files",
                (F.col("direct_small_files") / F.col("direct_files")).alias("small_share"))
    )
    totals = marked.agg(
        F.sum("small").alias("small_files"),
        F.sum(F.col("small") * F.col("size_bytes")).alias("small_bytes"),
        F.count("*").alias("files"),
    ).select("*", F.lit(opts.small_file_bytes).alias("threshold_bytes"),
             (F.col("small_files") / F.col("files")).alias("small_share"))
    return {"small_files_summary": totals, "small_files_by_dir": by_dir.orderBy("path"),
            "small_files_top_dirs": top}


# --- 3. usage --------------------------------------------------------------------------


def usage(inodes: DataFrame, key: str) -> DataFrame:
    files = F.col("type") == "file"
    return (
        inodes.groupBy(key)
        .agg(
            F.sum(files.cast("long")).alias("files"),
            F.sum((~files).cast("long")).alias("dirs"),
            F.sum(F.when(files, F.col("size_bytes")).otherwise(0)).alias("bytes"),
            F.sum(F.when(files, F.col("size_bytes") * F.col("replication")).otherwise(0))
            .alias("replicated_bytes"),
            F.sum(F.when(files, F.col("block_count")).otherwise(0)).cast("long")
            .alias("blocks"),
        )
        .orderBy(F.desc("bytes"), F.desc("files"), key)
    )


# --- 4. cold data ----------------------------------------------------------------------


def cold_data(spark: SparkSession, files: DataFrame, opts: Options) -> DataFrame:
    buckets = _bucket_table(spark, AGE_BUCKETS, "days")
    parts = []
    for basis, column in (("access", "atime_ms"), ("modification", "mtime_ms")):
        age_days = F.floor((F.lit(opts.as_of_ms) - F.col(column)) / DAY_MS)
        counted = (
            files.select(_bucket_index(F.greatest(age_days, F.lit(0)), AGE_BUCKETS)
                         .alias("bucket_index"), "size_bytes")
            .groupBy("bucket_index")
            .agg(F.count("*").alias("files"), F.sum("size_bytes").alias("bytes"))
        )
        parts.append(
            buckets.join(counted, "bucket_index", "left").fillna(0, ["files", "bytes"])
            .select(F.lit(basis).alias("basis"), "*")
        )
    return parts[0].unionByName(parts[1]).orderBy("basis", "bucket_index")


# --- 5. replication health -------------------------------------------------------------


def replication(
    blocks: DataFrame, inodes: DataFrame, replicas: DataFrame, datanodes: DataFrame | None
) -> dict[str, DataFrame]:
    """The image's blocks (expected replication as of the image) joined with the live block
    map: missing (no good live replica), under- and over-replicated blocks, corrupt
    replicas, and replicas of blocks the image does not hold (orphans); DataNode skew."""
    held = replicas.where(F.col("node_id").isNotNull())
    per_block = held.groupBy("block_id").agg(
        F.sum(((F.col("replica_state") == "good") & (F.col("node_state") == "live"))
              .cast("long")).alias("live_replicas"),
        F.sum((F.col("replica_state") == "corrupt").cast("long")).alias("corrupt_replicas"),
    )
    joined = (
        blocks.join(per_block, "block_id", "left")
        .fillna(0, ["live_replicas", "corrupt_replicas"])
        .withColumn(
            "status",
            F.when(F.col("live_replicas") == 0, "missing")
            .when(F.col("live_replicas") < F.col("replication"), "under_replicated")
            .when(F.col("live_replicas") > F.col("replication"), "over_replicated")
            .otherwise("healthy"),
        )
    )
    orphans = held.join(blocks.select("block_id"), "block_id", "left_anti")
    counts = joined.agg(
        F.count("*").alias("blocks"),
        *[F.sum((F.col("status") == s).cast("long")).alias(s)
          for s in ("healthy", "missing", "under_replicated", "over_replicated")],
        F.sum("corrupt_replicas").alias("corrupt_replicas"),
        F.sum((F.col("corrupt_replicas") > 0).cast("long")).alias("blocks_with_corrupt"),
    )
    orphan_counts = orphans.agg(
        F.count("*").alias("orphan_replicas"),
        F.countDistinct("block_id").alias("orphan_blocks"),
    )
    summary = counts.crossJoin(orphan_counts)
    problems = (
        joined.where((F.col("status") != "healthy") | (F.col("corrupt_replicas") > 0))
        .join(inodes.select("inode_id", "path"), "inode_id", "left")
        .select("block_id", "inode_id", "path", "size_bytes",
                F.col("replication").alias("expected_replication"), "live_replicas",
                "corrupt_replicas", "status")
        .orderBy("status", "block_id")
    )
    per_node = held.groupBy("node_id").agg(
        F.count("*").alias("replicas"), F.sum("replica_bytes").alias("replica_bytes"),
        F.first("address").alias("replica_address"),
    )
    if datanodes is not None:
        nodes = datanodes.join(per_node, "node_id", "full").select(
            "node_id", F.coalesce("address", "replica_address").alias("address"),
            F.coalesce("state", F.lit("unknown")).alias("state"),
            "capacity_bytes", "used_bytes", "free_bytes",
            F.coalesce("replicas", F.lit(0)).alias("replicas"),
            F.coalesce("replica_bytes", F.lit(0)).alias("replica_bytes"),
        )
    else:
        nodes = per_node.select(
            "node_id", F.col("replica_address").alias("address"), F.lit("unknown").alias(
                "state"), *[F.lit(None).cast("long").alias(c) for c in (
                    "capacity_bytes", "used_bytes", "free_bytes")], "replicas", "replica_bytes")
    everyone = Window.partitionBy()
    skew = nodes.select(
        "*",
        F.when(F.col("capacity_bytes") > 0,
               100.0 * F.col("used_bytes") / F.col("capacity_bytes")).alias("used_pct"),
        F.when(F.avg("replica_bytes").over(everyone) > 0,
               100.0 * (F.col("replica_bytes") / F.avg("replica_bytes").over(everyone) - 1))
        .otherwise(0.0).alias("replica_bytes_skew_pct"),
    ).orderBy(F.desc("replica_bytes"), "node_id")
    return {"replication_summary": summary, "replication_problems": problems,
            "datanode_usage": skew}


# --- 6. growth -------------------------------------------------------------------------


def growth_from_edits(edits: DataFrame) -> DataFrame:
    """Per day: files and dirs created, deletes, bytes added and removed. An op without a
    time of its own (add_block, update_blocks) counts at the time of the latest earlier op
    that has one."""
    ordered = Window.orderBy("txid").rowsBetween(Window.unboundedPreceding, 0)
    timed = edits.withColumn(
        "at_ms", F.last("timestamp_ms", ignorenulls=True).over(ordered)
    ).where(F.col("at_ms").isNotNull())
    delta = F.coalesce(F.col("size_delta_bytes"), F.lit(0))
    return (
        timed.groupBy(F.to_date(F.timestamp_millis("at_ms")).alias("day"))
        .agg(
            F.sum((F.col("op") == "add_file").cast("long")).alias("files_created"),
            F.sum((F.col("op") == "mkdir").cast("long")).alias("dirs_created"),
            F.sum((F.col("op") == "delete").cast("long")).alias("deletes"),
            F.sum(F.when(delta > 0, delta).otherwise(0)).alias("bytes_added"),
            F.sum(F.when(delta < 0, -delta).otherwise(0)).alias("bytes_removed"),
        )
        .select("*", (F.col("bytes_added") - F.col("bytes_removed")).alias("net_bytes"))
        .orderBy("day")
    )


def growth_from_image(inodes: DataFrame) -> DataFrame:
    """Without edits: inodes by the day of their modification time (what survives of the
    history in an image; deletes are not visible)."""
    files = F.col("type") == "file"
    return (
        inodes.where(F.col("parent_id") != 0)
        .groupBy(F.to_date(F.col("mtime")).alias("day"))
        .agg(
            F.sum(files.cast("long")).alias("files_created"),
            F.sum((~files).cast("long")).alias("dirs_created"),
            F.lit(0).cast("long").alias("deletes"),
            F.sum(F.when(files, F.col("size_bytes")).otherwise(0)).alias("bytes_added"),
            F.lit(0).cast("long").alias("bytes_removed"),
        )
        .select("*", F.col("bytes_added").alias("net_bytes"))
        .orderBy("day")
    )
