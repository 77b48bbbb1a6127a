"""The ``xdfs`` command. Subcommands are imported only when run, so ``xdfs --help`` and
light commands never pay for heavy modules (pyspark, pyarrow, the servers)."""

from __future__ import annotations

import importlib
import logging
import os
import sys
from dataclasses import dataclass, field
from typing import Any

import click

from xdfs import __version__

#: name -> (module, attribute, one-line help). The one table of subcommands.
SUBCOMMANDS: dict[str, tuple[str, str, str]] = {
    "namenode": ("xdfs.cli.namenode", "namenode", "Run a NameNode (or format its storage)."),
    "datanode": ("xdfs.cli.datanode", "datanode", "Run a DataNode."),
    "backupnode": ("xdfs.cli.backupnode", "backupnode", "Run a BackupNode."),
    "journalnode": ("xdfs.cli.journalnode", "journalnode", "Run a JournalNode."),
    "zkfc": ("xdfs.cli.zkfc", "zkfc", "Run a ZooKeeper failover controller."),
    "logservice": ("xdfs.cli.logservice", "logservice", "Run the replicated log service."),
    "log": ("xdfs.cli.log", "log", "Named replicated logs: create, append, read, tail -f ..."),
    "dfs": ("xdfs.cli.dfs", "dfs", "File system shell, like `hdfs dfs`."),
    "mount": ("xdfs.cli.mount", "mount", "Mount the cluster as a local file system (FUSE)."),
    "admin": ("xdfs.cli.admin", "admin", "Administration, like `hdfs dfsadmin`."),
    "fsck": ("xdfs.cli.fsck", "fsck", "Check the health of files and blocks."),
    "balancer": ("xdfs.cli.balancer", "balancer", "Even out DataNode usage (moves replicas)."),
    "debug": ("xdfs.cli.debug", "debug", "Repair commands, like `hdfs debug` (-recoverLease)."),
    "oiv": ("xdfs.cli.offline", "oiv", "Offline image viewer: export an fsimage."),
    "oev": ("xdfs.cli.offline", "oev", "Offline edits viewer: dump an edits log."),
    "analyze": ("xdfs.cli.analyze", "analyze", "Metadata analytics on Spark."),
    "dev": ("xdfs.cli.dev", "dev", "Run a local cluster of real processes for trying xdfs."),
    "conf": ("xdfs.cli.conf", "conf", "Print the effective configuration."),
    "ping": ("xdfs.cli.ping", "ping", "Check that an xdfs server answers, and how fast."),
}


@dataclass
class CliState:
    conf_path: str | None = None
    overrides: tuple[str, ...] = ()
    _config: Any = field(default=None, repr=False)

    @property
    def config(self) -> Any:
        """The effective :class:`xdfs.config.XdfsConfig` (loaded on first use)."""
        if self._config is None:
            from xdfs.config import load_config

            self._config = load_config(self.conf_path, self.overrides)
        return self._config


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = SUBCOMMANDS.get(cmd_name)
        if entry is None:
            return None
        module = importlib.import_module(entry[0])
        command = getattr(module, entry[1])
        assert isinstance(command, click.Command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, SUBCOMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="xdfs")
@click.option(
    "--conf",
    "conf_path",
    envvar="XDFS_CONF",
    metavar="FILE",
    help="TOML configuration file (default: $XDFS_CONF).",
)
@click.option(
    "-D",
    "overrides",
    multiple=True,
    metavar="SECTION.KEY=VALUE",
    help="Override one configuration key (repeatable).",
)
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
@click.pass_context
def cli(
    ctx: click.Context, conf_path: str | None, overrides: tuple[str, ...], log_level: str
) -> None:
    """xdfs: a distributed file system (NameNode, DataNodes, BackupNode, journal)."""
    logging.basicConfig(
        level=log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    ctx.obj = CliState(conf_path, overrides)


def main() -> None:
    from xdfs.errors import XdfsError

    if "XDFS_DIE_WITH_PARENT" in os.environ:  # a child of `xdfs dev`: see common/process.py
        from xdfs.common.process import arm_parent_death_signal

        arm_parent_death_signal()
    try:
        cli(prog_name="xdfs")
    except XdfsError as exc:
        click.echo(f"xdfs: {type(exc).__name__}: {exc.message}", err=True)
        sys.exit(1)
