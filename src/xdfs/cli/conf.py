"""``xdfs conf``: the effective configuration, or the reference of every key.

Secrets (passwords, tokens: any key named ``password``, ``token`` or ending in
``_password``, ``_token``, ``_secret``) are masked unless ``--show-secrets`` is given.
"""

from __future__ import annotations

from typing import Any

import click

from xdfs.cli.main import CliState

MASK = "********"
_SECRET_NAMES = ("password", "token")
_SECRET_SUFFIXES = ("_password", "_token", "_secret")


def is_secret(key: str) -> bool:
    return key in _SECRET_NAMES or key.endswith(_SECRET_SUFFIXES)


@click.command()
@click.option("--markdown", is_flag=True, help="Print the reference table of every key instead.")
@click.option("--show-secrets", is_flag=True, help="Print passwords and tokens in clear.")
@click.pass_obj
def conf(state: CliState, markdown: bool, show_secrets: bool) -> None:
    """Print the effective configuration (defaults < --conf file < env < -D overrides)."""
    from xdfs import config

    if markdown:
        click.echo(config.config_reference_markdown(), nl=False)
        return
    if show_secrets:
        click.echo(config.config_as_toml(state.config), nl=False)
        return
    import tomli_w

    sections, masked = masked_config(config.config_as_dict(state.config))
    if masked:
        click.echo(f"# secrets masked ({', '.join(masked)}): xdfs conf --show-secrets")
    click.echo(tomli_w.dumps(sections), nl=False)


def masked_config(sections: dict[str, dict[str, Any]]
                  ) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The configuration with every secret that is set replaced by MASK, and their keys."""
    masked: list[str] = []
    out: dict[str, dict[str, Any]] = {}
    for section, values in sections.items():
        out[section] = dict(values)
        for key, value in values.items():
            if is_secret(key) and value:
                out[section][key] = MASK
                masked.append(f"{section}.{key}")
    return out, masked
