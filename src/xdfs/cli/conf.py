"""``xdfs conf``: the effective configuration, or the reference of every key.

Secrets (passwords, tokens: any key named ``password``, ``token`` or ending in
``_password``, ``_token``, ``_secret``) are masked unless ``--show-secrets`` is given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from xdfs.cli.main import CliState

if TYPE_CHECKING:
    from xdfs.config import XdfsConfig

MASK = "********"
_SECRET_NAMES = ("password", "token")
_SECRET_SUFFIXES = ("_password", "_token", "_secret")


def is_secret(key: str) -> bool:
    return key in _SECRET_NAMES or key.endswith(_SECRET_SUFFIXES)


@click.command()
@click.option("--markdown", is_flag=True, help="Print the reference table of every key instead.")
@click.option("--show-secrets", is_flag=True, help="Print passwords and tokens in clear.")
@click.option("--hadoop", is_flag=True,
              help="Print the Hadoop settings of the nameservice for webhdfs:// clients "
                   "(hdfs-site.xml), as client.user.")
@click.option("--spark", is_flag=True,
              help="With --hadoop: as spark-submit/pyspark --conf lines instead of XML.")
@click.option("--token-namenode", default="", metavar="ID",
              help="With --hadoop: the NameNode whose token endpoint Hadoop asks "
                   "(default: the first of ha.webhdfs).")
@click.pass_obj
def conf(state: CliState, markdown: bool, show_secrets: bool, hadoop: bool, spark: bool,
         token_namenode: str) -> None:
    """Print the effective configuration (defaults < --conf file < env < -D overrides)."""
    from xdfs import config

    if hadoop or spark or token_namenode:
        print_hadoop(state.config, spark, token_namenode, show_secrets)
        return
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


def print_hadoop(config: XdfsConfig, spark: bool, token_namenode: str,
                 show_secrets: bool) -> None:
    """``--hadoop``: the nameservice's Hadoop settings; the password masked unless
    ``show_secrets`` (the file is meant to be written with it, so say how)."""
    from xdfs.analytics import hadoop_ha

    password = config.client.password if show_secrets or not config.client.password else MASK
    settings = hadoop_ha.nameservice_conf(config, config.client.user, password,
                                          token_namenode)
    if password == MASK:
        click.echo("the password (dfs.webhdfs.oauth2.credential) is masked: add "
                   "--show-secrets to print it", err=True)
    click.echo(hadoop_ha.as_spark_args(settings) if spark else hadoop_ha.as_xml(settings),
               nl=False)
