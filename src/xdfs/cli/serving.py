"""What every server command shares: arm crash-test fault points, start, print the ready
line, run until SIGTERM/SIGINT or the server stops itself, stop gracefully."""

from __future__ import annotations

import asyncio
import signal
from typing import Protocol

import click

from xdfs.config.rpc import RpcConfig


class Server(Protocol):
    @property
    def stopped(self) -> asyncio.Event: ...

    @property
    def fatal(self) -> BaseException | None: ...

    async def start(self, host: str, port: int) -> str: ...

    async def stop(self) -> None: ...


def arm_faults() -> None:
    """Crash tests only: ``XDFS_FAULTS=point=action`` (call after the server's modules are
    imported, so their fault points are registered)."""
    from xdfs.common.faults import arm_faults_from_env

    armed = arm_faults_from_env()
    if armed:
        click.echo(f"fault points armed: {', '.join(armed)}", err=True)


async def serve(role: str, node: Server, host: str, port: int, rpc: RpcConfig) -> int:
    """Exit status: 0 after a graceful stop, 1 when the server could not start or died."""
    from xdfs.common import collector, memory
    from xdfs.errors import XdfsError

    arm_faults()
    collector.tune(rpc.gc_young_objects)
    memory.keep_freed_memory(rpc.server_malloc_keep_bytes)
    try:
        address = await node.start(host, port)
    except (XdfsError, OSError) as exc:
        message = exc.message if isinstance(exc, XdfsError) else str(exc)
        click.echo(f"{role} cannot start: {type(exc).__name__}: {message}", err=True)
        return 1
    collector.settle()  # its state is loaded: keep the collector off it from now on
    http = getattr(node, "http_address", "")
    if http:  # before the ready line: whoever waits for that one finds this one too
        click.echo(f"{role} http on {http}")
    click.echo(f"{role} serving on {address}")
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(node.stopped.wait())]
    await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    for waiter in waiters:
        waiter.cancel()
    await node.stop()
    fatal = node.fatal
    if fatal is not None:
        message = fatal.message if isinstance(fatal, XdfsError) else repr(fatal)
        click.echo(f"{role} stopped: {type(fatal).__name__}: {message}", err=True)
        return 1
    click.echo(f"{role} stopped")
    return 0
