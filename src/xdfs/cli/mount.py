"""``xdfs mount MOUNTPOINT``: the cluster of client.toml as a local file system (FUSE)."""

from __future__ import annotations

import subprocess
import sys

import click

from xdfs.cli.main import CliState


@click.command()
@click.argument("mountpoint")
@click.option("-o", "specs", multiple=True, metavar="OPT[,OPT...]",
              help="Mount options: ro, allow_other, attr_timeout=S, entry_timeout=S, "
                   "call_timeout=S, readdir_page=N, unknown_uid=N, unknown_gid=N, "
                   "max_tasks=N, fsname=NAME (docs/user-guide.md, Mounting).")
@click.option("--foreground/--daemon", default=False,
              help="Serve in this process until unmounted (default: daemonize once "
                   "mounted).")
@click.option("--log-file", metavar="FILE", help="Where a daemonized mount logs.")
@click.option("--daemon-child", is_flag=True, hidden=True)
@click.pass_obj
def mount(state: CliState, mountpoint: str, specs: tuple[str, ...], foreground: bool,
          log_file: str | None, daemon_child: bool) -> None:
    """Mount the cluster named by the configuration (client.fs, as client.user) on
    MOUNTPOINT, an empty directory. Unmount with Ctrl-C, SIGTERM or `fusermount3 -u`."""
    from xdfs.mount.options import parse_options
    from xdfs.mount.run import check_mountpoint, detach_output, serve
    from xdfs.rpc.loop import run

    options = parse_options(specs)
    where = check_mountpoint(mountpoint)
    if not foreground:
        sys.exit(_daemonize(state, where, specs, log_file))
    config = state.config
    ready = (lambda: detach_output(log_file)) if daemon_child else None
    run(serve(config, where, options, ready), use_uvloop=config.rpc.use_uvloop)


def _daemonize(state: CliState, where: object, specs: tuple[str, ...],
               log_file: str | None) -> int:
    """Start the mount as a detached child and return once it answers (0) or failed
    (its exit status, its error printed here)."""
    from xdfs.mount.run import READY_LINE

    command = [sys.executable, "-m", "xdfs"]
    if state.conf_path:
        command += ["--conf", state.conf_path]
    for override in state.overrides:
        command += ["-D", override]
    command += ["mount", str(where), "--foreground", "--daemon-child"]
    command += [word for spec in specs for word in ("-o", spec)]
    if log_file:
        command += ["--log-file", log_file]
    child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    assert child.stdout is not None
    said: list[str] = []
    for line in child.stdout:
        if line.startswith(READY_LINE):
            click.echo(line.rstrip())
            return 0
        said.append(line)
    click.echo("".join(said).rstrip(), err=True)
    return child.wait() or 1
