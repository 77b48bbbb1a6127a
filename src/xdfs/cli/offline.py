"""``xdfs oev`` and ``xdfs oiv``: read edits segments and images offline (no server)."""

from __future__ import annotations

import sys

import click
import msgspec

_JSON = msgspec.json.Encoder()


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
    help="An edits segment file or a name dir's current/ directory.",
)
@click.option("--stats", is_flag=True, help="Count ops by type instead of dumping them.")
def oev(source: str, stats: bool) -> None:
    """Offline edits viewer: one JSON object per record (txid, op, fields)."""
    from xdfs.namenode import tools

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
def oiv(source: str, blocks: bool, summary: bool) -> None:
    """Offline image viewer: one JSON object per inode, with its full path."""
    from xdfs.namenode import tools

    if summary:
        _write_json_lines([tools.image_summary(source)])
        return
    _write_json_lines(tools.dump_image(source, blocks=blocks))
