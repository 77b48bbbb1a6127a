"""``xdfs ping ADDRESS``: is a server up, who is it, and what is its round-trip time."""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

import click

from xdfs.cli.format import human_duration
from xdfs.cli.main import CliState


@click.command()
@click.argument("address")
@click.option("-n", "--count", default=3, show_default=True, help="Pings to send.")
@click.pass_obj
def ping(state: CliState, address: str, count: int) -> None:
    """Ping an xdfs server at ADDRESS (HOST:PORT) and print what it is."""
    from xdfs.errors import XdfsError
    from xdfs.protocol.system import PING, SERVER_INFO
    from xdfs.rpc.client import RpcClient
    from xdfs.rpc.loop import run
    from xdfs.rpc.messages import PROTOCOL_VERSION, Empty, Hello
    from xdfs.rpc.tls import client_context

    config = state.config

    async def go() -> None:
        # Anonymous (server_info and ping need no user): no credential goes to whatever
        # answers at ADDRESS, and servers without accounts (DataNodes), which cannot prove
        # a password, answer too.
        hello = Hello(PROTOCOL_VERSION, client_name="xdfs-ping")
        client = RpcClient(address, config.rpc, hello=hello, ssl_context=client_context(config.rpc))
        try:
            click.echo(describe(address, await client.call(SERVER_INFO, Empty()), time.time()))
            times_ms = []
            for _ in range(count):
                start = time.perf_counter()
                await client.call(PING, Empty())
                times_ms.append((time.perf_counter() - start) * 1e3)
                click.echo(f"reply from {address}: time={times_ms[-1]:.3f} ms")
            if times_ms:
                click.echo(f"{len(times_ms)} replies, round trip min/avg/max = "
                           f"{min(times_ms):.3f}/{statistics.mean(times_ms):.3f}/"
                           f"{max(times_ms):.3f} ms")
        finally:
            await client.close()

    try:
        run(go(), use_uvloop=config.rpc.use_uvloop)
    except XdfsError as exc:
        click.echo(f"ping: {address}: {exc.message}", err=True)
        sys.exit(1)


def describe(address: str, info: Any, now_s: float) -> str:
    """One line: what answers at ``address`` (role, name, version, cluster, uptime)."""
    name = "" if info.name == info.role else f" {info.name!r}"
    cluster = info.cluster_id or "no cluster yet"
    connections = f"{info.connections} connection{'s' if info.connections != 1 else ''}"
    uptime = human_duration(now_s - info.started_at_s)
    return (f"{address}: xdfs {info.role}{name}, version {info.version} (protocol "
            f"{info.protocol_version}), cluster {cluster}, up {uptime}, {connections}")

