"""A server hosting only the SYSTEM and DIAGNOSTICS services, for RPC tests and benchmarks.

``python -m xdfs.testing.echo_server [--port P] [--no-uvloop]`` prints
``echo server serving on HOST:PORT`` when ready.
"""

from __future__ import annotations

import argparse
import asyncio
import signal

from xdfs.config import load_config
from xdfs.protocol.system_handlers import add_system_services
from xdfs.rpc.loop import run
from xdfs.rpc.server import RpcServer
from xdfs.rpc.tls import server_context


async def serve(host: str, port: int, cluster_id: str, use_uvloop: bool) -> None:
    config = load_config().rpc
    server = RpcServer("echo", config, cluster_id=cluster_id, ssl_context=server_context(config))
    add_system_services(server, "echo", diagnostics=True)
    await serve_until_signalled(server, "echo", host, port, use_uvloop)


async def serve_until_signalled(server: RpcServer, name: str, host: str, port: int,
                                use_uvloop: bool) -> None:
    """Start ``server``, print ``NAME server serving on HOST:PORT`` (the ready line a
    parent waits for), and serve until SIGTERM or SIGINT."""
    address = await server.start(host, port)
    print(f"{name} server serving on {address} (uvloop={use_uvloop})", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--cluster-id", default="")
    parser.add_argument("--no-uvloop", action="store_true")
    args = parser.parse_args()
    run(serve(args.host, args.port, args.cluster_id, not args.no_uvloop),
        use_uvloop=not args.no_uvloop)


if __name__ == "__main__":
    main()
