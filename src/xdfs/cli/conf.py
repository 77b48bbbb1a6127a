"""``xdfs conf``: the effective configuration, or the reference of every key."""

from __future__ import annotations

import click

from xdfs.cli.main import CliState


@click.command()
@click.option("--markdown", is_flag=True, help="Print the reference table of every key instead.")
@click.pass_obj
def conf(state: CliState, markdown: bool) -> None:
    """Print the effective configuration (defaults < --conf file < env < -D overrides)."""
    from xdfs import config

    if markdown:
        click.echo(config.config_reference_markdown(), nl=False)
    else:
        click.echo(config.config_as_toml(state.config), nl=False)
