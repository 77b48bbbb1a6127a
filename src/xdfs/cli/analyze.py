"""``xdfs analyze``: the metadata reports on Spark (pyspark is imported only when it runs).

Inputs and the output may be local paths or URLs Spark's Hadoop client reads
(``webhdfs://gateway:port/path`` for xdfs). ``--master`` also sets what a cluster's
executors need: the Python they run (``spark.pyspark.python``) and, for ``webhdfs://``
locations, Hadoop's OAuth2 settings for the gateway (the ``[client]`` user and password).
``spark-submit`` runs the same command through :mod:`xdfs.analytics.submit`.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import TextIO

import click

from xdfs.cli.main import CliState


def _as_of_ms(text: str | None) -> int | None:
    if text is None:
        return None
    if text.isdigit():
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is neither ms since the epoch nor an ISO date",
                                 param_hint="--as-of") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


def _fetch(state: CliState, fs: str, out: Path, checkpoint: bool) -> tuple[str, str]:
    """An image of the current namespace and the live block map of a running cluster, into
    OUT/fetched. The NameNode's newest image may be far behind its edits (a cluster that
    never checkpointed has only the empty image of its format): then it first writes one
    (``saveNamespace``), so the report describes the namespace of now and the block map
    matches it; ``checkpoint=False`` takes the newest image as it is and says what is
    missing."""
    from xdfs.cli.admin_export import dump_block_map
    from xdfs.client.client import Client

    fetched = out / "fetched"
    with Client(fs, config=state.config) as client:
        status = client.status()
        behind = status.last_txid - status.image_txid
        if behind > 0 and checkpoint:
            txid = client.save_namespace()
            click.echo(f"Checkpoint written at txid {txid} (the newest image was {behind} "
                       f"transactions behind), so the report describes the current namespace")
        elif behind > 0:
            click.echo(f"Warning: the newest image (txid {status.image_txid}) is {behind} "
                       "transactions behind the namespace: what they did is not in the report "
                       "and their blocks count as orphans (drop --no-checkpoint)", err=True)
        image: Path = client.fetch_image(str(fetched))
        click.echo(f"Fetched fsimage {image.name} to {image}")
        dump_block_map(client, str(fetched / "blockmap"))
    return str(image), str(fetched / "blockmap")


def spark_settings(state: CliState, master: str | None, executor_python: str | None,
                   locations: list[str | None]) -> dict[str, str]:
    """The Spark settings executors need: their Python on a cluster master, the WebHDFS
    OAuth2 settings (``spark.hadoop.*``, which reach every executor) for a ``webhdfs://``
    gateway among the locations."""
    from xdfs.analytics.storage import webhdfs_authorities
    from xdfs.analytics.webhdfs import hadoop_conf

    conf: dict[str, str] = {}
    if master and not master.startswith("local"):
        python = executor_python or os.environ.get("PYSPARK_PYTHON") or sys.executable
        conf["spark.pyspark.python"] = python
    elif executor_python:
        conf["spark.pyspark.python"] = executor_python
    gateways = webhdfs_authorities(*locations)
    if len(gateways) > 1:
        raise click.UsageError(f"webhdfs:// locations on several gateways ({', '.join(gateways)}):"
                               " Hadoop takes one token endpoint; use one gateway")
    client = state.config.client
    if gateways and client.user:
        for key, value in hadoop_conf(gateways[0], client.user, client.password).items():
            conf[f"spark.hadoop.{key}"] = value
    return conf


def progress_settings(stream: TextIO) -> dict[str, str]:
    """Spark's own progress bar (each stage's tasks done of all, on one line) when
    ``stream``, the job's stderr, is a terminal; nothing extra in scripts and logs."""
    shown = "true" if stream.isatty() else "false"
    return {"spark.ui.showConsoleProgress": shown}


@click.command()
@click.option("--image", metavar="PATH",
              help="An fsimage_<txid> file or an `xdfs oiv --format parquet` directory.")
@click.option("--edits", metavar="DIR",
              help="Edits: a segment, a name dir's current/, or an `xdfs oev` Parquet dir.")
@click.option("--blocks", metavar="DIR", help="An `xdfs admin -dumpBlockMap` directory.")
@click.option("--fs", metavar="URI",
              help="Fetch an image of the current namespace (checkpointing first when the "
                   "newest image is behind) and the live block map from this cluster.")
@click.option("--no-checkpoint", is_flag=True,
              help="With --fs: analyze the newest image as it is, even if it is behind.")
@click.option("--out", "out_dir", required=True, metavar="DIR",
              help="Output directory: a path, or a URL such as webhdfs://host:port/reports.")
@click.option("--master", metavar="URL",
              help="Spark master (default: Spark's configuration, else local[*]).")
@click.option("--executor-python", metavar="PATH",
              help="Python of the executors (with a cluster --master: default "
                   "$PYSPARK_PYTHON, else this interpreter's path).")
@click.option("--small-file-bytes", type=click.IntRange(min=1), default=2 * 1024 * 1024,
              show_default=True, help="Files below this size are small.")
@click.option("--top", "top_n", type=click.IntRange(min=1), default=20, show_default=True,
              help="Directories listed as the top to compact.")
@click.option("--as-of", metavar="WHEN", help="'Now' for ages: ms since the epoch or ISO date.")
@click.option("--bytes-per-inode", type=click.FloatRange(min=0.0),
              help="NameNode memory per inode (default: measured on the image).")
@click.option("--horizon-months", type=click.IntRange(min=1), default=6, show_default=True)
@click.option("--growth-factor", type=click.FloatRange(min=0.0), default=3.0,
              show_default=True, help="Business growth on top of the measured rate.")
@click.option("--namenode-heap-bytes", type=click.IntRange(min=1), default=1 << 30,
              show_default=True, help="Memory one NameNode may use for the namespace.")
@click.option("--datanode-disk-bytes", type=click.IntRange(min=1), default=500 * 10**9,
              show_default=True, help="Disk per DataNode when the block map does not say.")
@click.pass_obj
def analyze(
    state: CliState, image: str | None, edits: str | None, blocks: str | None,
    fs: str | None, no_checkpoint: bool, out_dir: str, master: str | None,
    executor_python: str | None, small_file_bytes: int, top_n: int,
    as_of: str | None, bytes_per_inode: float | None, horizon_months: int,
    growth_factor: float, namenode_heap_bytes: int, datanode_disk_bytes: int,
) -> None:
    """Metadata analytics on Spark: namespace summary, small files, usage, cold data,
    replication health and a capacity forecast, as Parquet tables, one HTML report and a
    JSON summary in --out (a path or a URL: webhdfs://, hdfs://, s3a://...)."""
    from xdfs.analytics.storage import is_url, join

    with ExitStack() as stack:
        if fs is not None:
            if image is not None or blocks is not None:
                raise click.UsageError("--fs fetches the image and block map: drop "
                                       "--image/--blocks")
            # with a URL for --out the fetched files are staged locally, then uploaded
            fetched = (Path(stack.enter_context(tempfile.TemporaryDirectory(
                prefix="xdfs-analyze-fetch-"))) if is_url(out_dir) else Path(out_dir))
            image, blocks = _fetch(state, fs, fetched, checkpoint=not no_checkpoint)
        if image is None:
            raise click.UsageError("give --image PATH or --fs URI")
        from xdfs.analytics.forecast import PlanningOptions
        from xdfs.analytics.job import JobConfig, describe_txids, run

        config = JobConfig(
            image=image, out=out_dir, edits=edits, blocks=blocks, master=master,
            small_file_bytes=small_file_bytes, top_n=top_n, as_of_ms=_as_of_ms(as_of),
            bytes_per_inode=bytes_per_inode,
            planning=PlanningOptions(horizon_months, growth_factor, namenode_heap_bytes,
                                     datanode_disk_bytes),
            spark_conf={**spark_settings(state, master, executor_python,
                                         [image, edits, blocks, out_dir]),
                        **progress_settings(sys.stderr)},
        )
        summary = run(config)
    click.echo(f"namespace as of {describe_txids(summary)}")
    for line in summary["headlines"]:
        click.echo(f"  - {line}")
    click.echo(f"report: {join(out_dir, 'report.html')}")
    click.echo(f"summary: {join(out_dir, 'summary.json')}; tables: {join(out_dir, 'tables')} "
               f"({len(summary['tables'])}) in {summary['elapsed_s']:.1f} s")
