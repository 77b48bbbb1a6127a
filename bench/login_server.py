"""An RPC server that admits one user by a shared secret (as a JournalNode admits its
writer), for bench/rpc.py's connect + login figure.

``python bench/login_server.py --port 0 --secret-file F [--no-uvloop]`` prints
``login server serving on HOST:PORT`` when ready.
"""

from __future__ import annotations

import argparse

from xdfs.common.secrets import read_secret_file
from xdfs.config import load_config
from xdfs.protocol.system_handlers import add_system_services
from xdfs.rpc.loop import run
from xdfs.rpc.secret_auth import SecretAuthenticator
from xdfs.rpc.server import RpcServer
from xdfs.testing.echo_server import serve_until_signalled

USER = "bench"


async def serve(port: int, secret_file: str, use_uvloop: bool) -> None:
    secret = read_secret_file(secret_file, "--secret-file")
    server = RpcServer("login", load_config().rpc,
                       authenticator=SecretAuthenticator(USER, secret))
    add_system_services(server, "login", diagnostics=False)
    await serve_until_signalled(server, "login", "127.0.0.1", port, use_uvloop)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--secret-file", required=True)
    parser.add_argument("--no-uvloop", action="store_true")
    args = parser.parse_args()
    run(serve(args.port, args.secret_file, not args.no_uvloop), use_uvloop=not args.no_uvloop)


if __name__ == "__main__":
    main()
