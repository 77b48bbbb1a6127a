"""``xdfs balancer [-threshold PCT] [-bandwidth BYTES/S]``: even out DataNode usage, like
``hdfs balancer`` (see xdfs.balancer.runner).

Exit status: 0 balanced, 1 error (another balancer runs, the NameNode refused ...), 2 usage
error, 3 no move possible while unbalanced.
"""

from __future__ import annotations

import dataclasses

import click

from xdfs.cli.shell import FS_KEY, HdfsCommand, client_for


@click.pass_context
def _balancer(ctx: click.Context, /, fs: str | None, threshold: float | None,
              bandwidth: int | None) -> None:
    from xdfs.balancer.runner import Balancer
    from xdfs.cli.main import CliState

    state = ctx.find_object(CliState)
    assert state is not None
    config = state.config.balancer
    if threshold is not None:
        config = dataclasses.replace(config, threshold_percent=threshold)
    if bandwidth is not None:
        config = dataclasses.replace(config, bandwidth_bytes_per_s=bandwidth)
    config.validate()
    ctx.meta[FS_KEY] = fs
    with client_for(ctx) as client:
        balancer = Balancer(client.async_client, config, click.echo)
        outcome = client.run(balancer.run())
    click.echo(f"Moved {outcome.moved_blocks} block(s), {outcome.moved_bytes} byte(s) in "
               f"{outcome.iterations} iteration(s)")
    ctx.exit(outcome.status)


balancer = HdfsCommand(
    "balancer", usage="[-fs URI] [-threshold PCT] [-bandwidth BYTES/S]",
    prefix="xdfs balancer", standalone=True, callback=_balancer,
    help="Move replicas from over-used to under-used DataNodes.",
    params=[
        click.Option(["-fs", "--fs", "fs"], default=None),
        click.Option(["-threshold", "threshold"], type=click.FloatRange(0, 100, min_open=True,
                                                                        max_open=True)),
        click.Option(["-bandwidth", "bandwidth"], type=click.IntRange(min=1)),
    ],
)
