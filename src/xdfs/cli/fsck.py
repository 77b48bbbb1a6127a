"""``xdfs fsck PATH [-files [-blocks [-locations]]]``: block health, like ``hdfs fsck``.

Exit status 0 when the path is HEALTHY, 1 when a block is missing or corrupt, 2 on a usage
error.
"""

from __future__ import annotations

from typing import Any

import click

from xdfs.cli.shell import FS_KEY, HdfsCommand, client_for


@click.pass_context
def _fsck(ctx: click.Context, /, path: str, fs: str | None, files: bool, blocks: bool,
          locations: bool) -> None:
    ctx.meta[FS_KEY] = fs
    with client_for(ctx, [path]) as client:
        report = client.fsck(path, files=files, blocks=blocks, locations=locations)
    for line in render(report, show_blocks=blocks):
        click.echo(line)
    ctx.exit(0 if report.healthy else 1)


fsck = HdfsCommand(
    "fsck", usage="[-fs URI] <path> [-files [-blocks [-locations]]]", prefix="xdfs fsck",
    standalone=True, callback=_fsck, help="Check the health of files and blocks under a path.",
    params=[
        click.Argument(["path"]),
        click.Option(["-fs", "--fs", "fs"], default=None),
        click.Option(["-files", "files"], is_flag=True),
        click.Option(["-blocks", "blocks"], is_flag=True),
        click.Option(["-locations", "locations"], is_flag=True),
    ],
)


def _share(count: int, total: int) -> str:
    return f"{count} ({100.0 * count / total if total else 0.0:.1f} %)"


def render(report: Any, show_blocks: bool) -> list[str]:
    lines = [f"FSCK for path {report.path}"]
    for entry in report.listed:
        blocks = entry.blocks
        lines.append(
            f"{entry.path} {entry.length} bytes, replicated: replication={entry.replication}, "
            f"{len(blocks) if show_blocks else ''}{' block(s)' if show_blocks else ''}: "
            f"{'OK' if entry.status == 'healthy' else entry.status.upper()}"
        )
        for index, block in enumerate(blocks if show_blocks else []):
            where = f" {block.locations}" if block.locations else ""
            bad = f" corrupt={block.corrupt_locations}" if block.corrupt_locations else ""
            bad += " MIS-REPLICATED (one rack)" if block.mis_replicated else ""
            lines.append(
                f"{index}. blk_{block.block.block_id}_{block.block.genstamp} "
                f"len={block.block.num_bytes} Live_repl={block.live_replicas}{where}{bad} "
                f"{block.status.upper()}"
            )
    if report.truncated:
        lines.append("... (listing truncated at the server's limit)")
    state = "HEALTHY" if report.healthy else "CORRUPT"
    blocks = report.total_blocks
    average = report.total_bytes // blocks if blocks else 0
    lines += [
        "",
        f"Status: {state}",
        f" Number of data-nodes:\t{report.live_datanodes}",
        f" Total size:\t{report.total_bytes} B",
        f" Total dirs:\t{report.directories}",
        f" Total files:\t{report.files}",
        f" Total blocks (validated):\t{blocks} (avg. block size {average} B)",
        f" Minimally replicated blocks:\t{_share(blocks - report.missing_blocks, blocks)}",
        f" Under-replicated blocks:\t{_share(report.under_replicated_blocks, blocks)}",
        f" Default replication factor:\t{report.default_replication}",
        f" Mis-replicated blocks:\t{_share(report.mis_replicated_blocks, blocks)}",
        f" Number of racks:\t\t{report.racks}",
        f" Missing blocks:\t\t{report.missing_blocks}",
        f" Corrupt blocks:\t\t{report.corrupt_blocks}",
        *([f" Blocks from the future (kept):\t{report.future_blocks}"]
          if report.future_blocks else []),
        "",
        f"The filesystem under path '{report.path}' is {state}",
    ]
    return lines
