"""``xdfs debug``: repair commands following ``hdfs debug``.

``-recoverLease PATH [-retries N]`` asks the NameNode to recover the lease of a file left
open by a writer that went away (HDFS's ``hdfs debug recoverLease``): the file is closed
with what its DataNodes agree on. The first call usually starts a block recovery and
answers "not closed yet"; with ``-retries N`` the call is repeated up to N times in all,
``client.recover_lease_retry_interval_s`` apart. Exit status 0 once the file is closed,
1 if it is not after the last try, 2 on a usage error.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from xdfs.cli.main import CliState
from xdfs.cli.shell import raw_command, split_generic_options

USAGE = """Usage: xdfs debug [-fs URI] COMMAND
  -recoverLease PATH [-retries N]
                 close a file a vanished writer left open, with the bytes its
                 DataNodes agree on (N tries in all, default 1)"""


@raw_command
def debug(state: CliState, argv: tuple[str, ...]) -> None:
    """Repair commands: -recoverLease."""
    fs, args = split_generic_options(argv, lambda: click.echo(USAGE))
    parsed = _parse(args)
    if parsed is None:
        click.echo(USAGE, err=True)
        sys.exit(2)
    path, retries = parsed
    from xdfs.client.client import Client

    with Client(fs, config=state.config) as client:
        sys.exit(recover_lease(client, path, retries,
                               state.config.client.recover_lease_retry_interval_s))


def _parse(args: list[str]) -> tuple[str, int] | None:
    """(path, tries) of ``-recoverLease PATH [-retries N]``; None for anything else."""
    if len(args) not in (2, 4) or args[0] != "-recoverLease" or args[1].startswith("-"):
        return None
    if len(args) == 2:
        return args[1], 1
    if args[2] != "-retries" or not args[3].isdigit() or int(args[3]) < 1:
        return None
    return args[1], int(args[3])


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
