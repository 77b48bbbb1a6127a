"""``xdfs ping ADDRESS``: is a server up, who is it, and what is its round-trip time."""

from __future__ import annotations

import time

import click

from xdfs.cli.main import CliState


@click.command()
@click.argument("address")
@click.option("-n", "--count", default=3, show_default=True, help="Pings to send.")
@click.pass_obj
def ping(state: CliState, address: str, count: int) -> None:
    """Ping an xdfs server at ADDRESS (HOST:PORT) and print what it is."""
    from xdfs.protocol.system import PING, SERVER_INFO
    from xdfs.rpc.client import RpcClient
    from xdfs.rpc.loop import run
    from xdfs.rpc.messages import PROTOCOL_VERSION, Empty, Hello
    from xdfs.rpc.tls import client_context

    config = state.config

    async def go() -> None:
        hello = Hello(
            PROTOCOL_VERSION,
            client_name="xdfs-ping",
            user=config.client.user,
            password=config.client.password,
            token=config.client.token,
        )
        client = RpcClient(address, config.rpc, hello=hello, ssl_context=client_context(config.rpc))
        try:
            info = await client.call(SERVER_INFO, Empty())
            click.echo(
                f"{address}: {info.role} {info.name} version {info.version} "
                f"cluster {info.cluster_id or '-'} connections {info.connections}"
            )
            for i in range(count):
                start = time.perf_counter()
                await client.call(PING, Empty())
                click.echo(f"ping {i + 1}: {(time.perf_counter() - start) * 1e3:.3f} ms")
        finally:
            await client.close()

    run(go(), use_uvloop=config.rpc.use_uvloop)
