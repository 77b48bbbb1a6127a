"""``xdfs oev`` and ``xdfs oiv``: read edits segments and images offline (no server)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import click
import msgspec

from xdfs.cli.main import CliState

_JSON = msgspec.json.Encoder()


_FORMAT = click.option(
    "--format",
    "fmt",
    type=click.Choice(["json", "parquet"]),
    default="json",
    show_default=True,
    help="json: JSON lines on stdout; parquet: tables in the -o directory (pyarrow).",
)
_OUT = click.option(
    "-o", "--output", "out_dir", metavar="DIR", help="Output directory (--format parquet)."
)


def _parquet_out(fmt: str, out_dir: str | None) -> str | None:
    if fmt != "parquet":
        if out_dir is not None:
            raise click.UsageError("-o DIR goes with --format parquet (JSON goes to stdout)")
        return None
    if out_dir is None:
        raise click.UsageError("--format parquet needs -o DIR")
    return out_dir


def _report(counts: dict[str, int], out_dir: str) -> None:
    for name, rows in counts.items():
        click.echo(f"wrote {rows} rows to {out_dir}/{name}")


def _write_json_lines(rows: object) -> None:
    out = sys.stdout.buffer
    for row in rows:  # type: ignore[attr-defined]
        out.write(_JSON.encode(row))
        out.write(b"\n")
    out.flush()


@click.command()
@click.option(
    "-i",
    "--input",
    "source",
    required=True,
    metavar="PATH",
    help="An edits segment file, a name dir's current/ directory, or a quorum journal "
    "(qjournal://host:port;host:port;host:port/<id>: its committed edits).",
)
@click.option("--stats", is_flag=True, help="Count ops by type instead of dumping them.")
@_FORMAT
@_OUT
@click.pass_obj
def oev(state: CliState, source: str, stats: bool, fmt: str, out_dir: str | None) -> None:
    """Offline edits viewer: one JSON object per record (txid, op, fields), or
    edits.parquet (txid, op, path, user, timestamp, size deltas) with --format parquet."""
    if source.startswith("qjournal://"):
        with tempfile.TemporaryDirectory(prefix="xdfs-oev-") as tmp:
            _fetch_journal(state, source, Path(tmp))
            _oev(tmp, stats, fmt, out_dir)
        return
    _oev(source, stats, fmt, out_dir)


def _fetch_journal(state: CliState, uri: str, dest: Path) -> None:
    """The journal's committed segments, copied into ``dest`` (needs the journal secret)."""
    from xdfs.errors import XdfsError
    from xdfs.namenode.editlog.shared import journal_channels
    from xdfs.protocol.journal import parse_qjournal_uri
    from xdfs.quorum.reader import copy_segments
    from xdfs.rpc.loop import run

    async def fetch() -> None:
        addresses, journal_id = parse_qjournal_uri(uri)
        channels = journal_channels(state.config, addresses)
        try:
            await copy_segments(channels, journal_id, dest)
        finally:
            for channel in channels:
                await channel.close()

    try:
        run(fetch(), use_uvloop=state.config.rpc.use_uvloop)
    except XdfsError as exc:
        raise click.ClickException(
            f"reading {uri}: {type(exc).__name__}: {exc.message}") from None



def _oev(source: str, stats: bool, fmt: str, out_dir: str | None) -> None:
    from xdfs.namenode import tools

    parquet_dir = _parquet_out(fmt, out_dir)
    if parquet_dir is not None:
        from xdfs.analytics.export import export_edits

        _report(export_edits(source, parquet_dir).rows, parquet_dir)
        return

    if stats:
        counts = tools.edits_stats(source)
        width = max((len(name) for name in counts), default=4)
        for name, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
            click.echo(f"{name:<{width}}  {count}")
        click.echo(f"{'total':<{width}}  {sum(counts.values())}")
        return
    _write_json_lines(tools.dump_edits(source))


@click.command()
@click.option(
    "-i",
    "--input",
    "source",
    required=True,
    metavar="FSIMAGE",
    help="An fsimage_<txid> file (its .md5 is checked).",
)
@click.option("--blocks", is_flag=True, help="Include each file's block list.")
@click.option("--summary", is_flag=True, help="Print the header and totals only.")
@_FORMAT
@_OUT
def oiv(source: str, blocks: bool, summary: bool, fmt: str, out_dir: str | None) -> None:
    """Offline image viewer: one JSON object per inode, with its full path, or
    inodes.parquet and blocks.parquet with --format parquet (streamed, bounded memory)."""
    from xdfs.namenode import tools

    parquet_dir = _parquet_out(fmt, out_dir)
    if parquet_dir is not None:
        from xdfs.analytics.export import export_image

        _report(export_image(source, parquet_dir).rows, parquet_dir)
        return

    if summary:
        _write_json_lines([tools.image_summary(source)])
        return
    _write_json_lines(tools.dump_image(source, blocks=blocks))
