"""``xdfs debug``: repair commands following ``hdfs debug``.

``-recoverLease PATH [-retries N]`` asks the NameNode to recover the lease of a file left
open by a writer that went away (HDFS's ``hdfs debug recoverLease``): the file is closed
with what its DataNodes agree on. The first call usually starts a block recovery and
answers "not closed yet"; with ``-retries N`` the call is repeated up to N times in all,
``client.recover_lease_retry_interval_s`` apart. Exit status 0 once the file is closed,
1 if it is not after the last try, 2 on a usage error.
"""

from __future__ import annotations

import time
from typing import Any

import click

from xdfs.cli.shell import HdfsCommand, HdfsShell, client_for

debug = HdfsShell("debug", summary="Repair commands: -recoverLease.")


@click.pass_context
def _recover_lease(ctx: click.Context, /, path: str, retries: int) -> None:
    from xdfs.cli.main import CliState

    state = ctx.find_object(CliState)
    assert state is not None
    with client_for(ctx, [path]) as client:
        ctx.exit(recover_lease(client, path, retries,
                               state.config.client.recover_lease_retry_interval_s))


debug.add(HdfsCommand(
    "-recoverLease", usage="PATH [-retries N]", prefix="xdfs debug", callback=_recover_lease,
    help="close a file a vanished writer left open, with the bytes its DataNodes agree on "
         "(N tries in all, default 1)",
    params=[click.Argument(["path"]),
            click.Option(["-retries", "retries"], type=click.IntRange(min=1), default=1)],
))


def recover_lease(client: Any, path: str, tries: int, interval_s: float) -> int:
    for attempt in range(1, tries + 1):
        if client.recover_lease(path):
            click.echo(f"recoverLease SUCCEEDED on {path}")
            return 0
        click.echo(f"recoverLease returned false (try {attempt} of {tries}): "
                   "recovery is under way")
        if attempt < tries:
            click.echo(f"Retrying in {interval_s:g} s...")
            time.sleep(interval_s)
    click.echo(f"Giving up on recoverLease for {path} after {tries} tr"
               f"{'y' if tries == 1 else 'ies'}")
    return 1
