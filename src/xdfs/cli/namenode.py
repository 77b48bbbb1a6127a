"""``xdfs namenode``: format storage or serve."""

from __future__ import annotations

import getpass
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from xdfs.cli.main import CliState
from xdfs.sharding.ids import SHARDS_MAX

if TYPE_CHECKING:
    from xdfs.config import XdfsConfig


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--name-dir",
    "name_dirs",
    multiple=True,
    metavar="DIR",
    help="Storage directory (repeat for several; default namenode.name_dirs).",
)
@click.option(
    "--rpc-address",
    default=None,
    metavar="HOST:PORT",
    help="Where to serve (default namenode.rpc_address).",
)
@click.option(
    "-format",
    "--format",
    "do_format",
    is_flag=True,
    help="Create the storage layout and the superuser, then exit.",
)
@click.option(
    "-initializeSharedEdits",
    "--initialize-shared-edits",
    "init_shared",
    is_flag=True,
    help="Format the quorum journal (namenode.shared_edits) on every JournalNode and copy "
    "the local edits after the newest image into it, then exit (the NameNode is stopped).",
)
@click.option(
    "-bootstrapStandby",
    "--bootstrap-standby",
    "bootstrap_standby",
    is_flag=True,
    help="Format the name dirs like the active NameNode of ha.namenodes and download its "
    "newest image, then exit (the second NameNode of an HA pair).",
)
@click.option("-force", "--force", is_flag=True,
              help="With -format or -bootstrapStandby: wipe a non-empty dir. With "
              "-initializeSharedEdits: reformat journals that hold edits.")
@click.option("--cluster-id", default="", help="With -format: the cluster id to use.")
@click.option("--shard", default=0, type=click.IntRange(0, SHARDS_MAX - 1), metavar="N",
              help="With -format: make the namespace metadata shard N (its inode and block "
              "ids start at shard N's first ids; all shards of a cluster share --cluster-id).")
@click.option("--datanode-secret-file", default="", metavar="FILE",
              help="With -format: take the DataNode secret from FILE (the datanode.secret of "
              "another shard's name dir) instead of a new one, so one datanode.secret_file "
              "logs a DataNode in to every shard.")
@click.pass_obj
def namenode(
    state: CliState,
    name_dirs: tuple[str, ...],
    rpc_address: str | None,
    do_format: bool,
    init_shared: bool,
    bootstrap_standby: bool,
    force: bool,
    cluster_id: str,
    shard: int,
    datanode_secret_file: str,
) -> None:
    """Run a NameNode on its storage directories (or -format them).

    The superuser of a new file system is $XDFS_USER (else the login name) with password
    $XDFS_PASSWORD (else one is generated and printed once)."""
    config = state.config
    dirs = [Path(d) for d in (name_dirs or config.namenode.name_dirs)]
    if not dirs:
        raise click.UsageError("give --name-dir DIR (or set namenode.name_dirs)")
    if do_format:
        _format(config, dirs, force=force, cluster_id=cluster_id, shard=shard,
                secret=_read_datanode_secret(datanode_secret_file))
        return
    from xdfs.common.addresses import parse_address
    from xdfs.rpc.loop import run

    if init_shared:
        if not config.namenode.shared_edits:
            raise click.UsageError("-initializeSharedEdits needs namenode.shared_edits "
                                   "(-D namenode.shared_edits=qjournal://h:p;h:p;h:p/id)")
        sys.exit(run(_initialize_shared_edits(config, dirs, force),
                     use_uvloop=config.rpc.use_uvloop))

    if bootstrap_standby:
        sys.exit(run(_bootstrap_standby(config, dirs, force),
                     use_uvloop=config.rpc.use_uvloop))
    host, port = parse_address(rpc_address or config.namenode.rpc_address)
    sys.exit(run(_serve(config, dirs, host, port), use_uvloop=config.rpc.use_uvloop))


def _read_datanode_secret(path: str) -> bytes:
    """The secret a ``datanode.secret`` file holds (hex); b"": none given."""
    from xdfs.namenode.security.passwords import DATANODE_SECRET_BYTES

    if not path:
        return b""
    try:
        secret = bytes.fromhex(Path(path).read_text("ascii").strip())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise click.BadParameter(f"cannot read a DataNode secret from {path}: {exc}",
                                 param_hint="--datanode-secret-file") from None
    if len(secret) != DATANODE_SECRET_BYTES:
        raise click.BadParameter(f"{path} holds {len(secret)} bytes, not a DataNode secret's "
                                 f"{DATANODE_SECRET_BYTES}", param_hint="--datanode-secret-file")
    return secret


def _format(
    config: XdfsConfig, dirs: list[Path], *, force: bool, cluster_id: str, shard: int,
    secret: bytes,
) -> None:
    from xdfs.namenode.image.format import format_namenode

    user = os.environ.get("XDFS_USER") or getpass.getuser()
    result = format_namenode(
        dirs,
        config.namenode,
        superuser=user,
        password=os.environ.get("XDFS_PASSWORD", ""),
        cluster_id=cluster_id,
        force=force,
        shard=shard,
        datanode_secret=secret,
    )
    click.echo(
        f"formatted {', '.join(map(str, dirs))}: cluster {result.cluster_id}, "
        f"superuser {result.superuser}"
    )
    if result.generated_password:
        click.echo(f"generated password for {user} (shown once): {result.generated_password}")


async def _serve(config: XdfsConfig, dirs: list[Path], host: str, port: int) -> int:
    from xdfs.cli.serving import serve
    from xdfs.namenode.server import NameNode

    return await serve("namenode", NameNode(config, dirs), host, port, config.rpc)


async def _initialize_shared_edits(config: XdfsConfig, dirs: list[Path], force: bool) -> int:
    from xdfs.errors import XdfsError
    from xdfs.namenode.editlog.shared import SharedEdits
    from xdfs.namenode.image.recovery import check_versions
    from xdfs.namenode.image.storage import StorageDirectory
    from xdfs.protocol.journal import JournalNamespace

    storage = [StorageDirectory(d) for d in dirs]
    try:
        for d in storage:
            d.lock()
        version = check_versions(storage)
        image_txid = max(max(d.images(), default=0) for d in storage)
        shared = SharedEdits(config, JournalNamespace(version.cluster_id, version.namespace_id))
        try:
            last = await shared.initialize(storage[0].current, image_txid, force=force)
        finally:
            await shared.close()
    except XdfsError as exc:
        click.echo(f"initializeSharedEdits: {type(exc).__name__}: {exc.message}", err=True)
        return 1
    finally:
        for d in storage:
            d.unlock()
    click.echo(f"initialized shared edits {config.namenode.shared_edits}: image at txid "
               f"{image_txid}, edits copied up to txid {last}")
    return 0


async def _bootstrap_standby(config: XdfsConfig, dirs: list[Path], force: bool) -> int:
    from xdfs.errors import XdfsError
    from xdfs.namenode.image.bootstrap import bootstrap_standby

    try:
        txid = await bootstrap_standby(config, dirs, force=force)
    except XdfsError as exc:
        click.echo(f"bootstrapStandby: {type(exc).__name__}: {exc.message}", err=True)
        return 1
    click.echo(f"bootstrapped {', '.join(map(str, dirs))} from the active NameNode's image "
               f"at txid {txid}")
    return 0
