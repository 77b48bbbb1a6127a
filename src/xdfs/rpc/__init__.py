"""xdfs's own RPC: asyncio TCP, msgpack-framed typed messages, streams (docs/architecture.md)."""

from xdfs.rpc.client import RpcClient
from xdfs.rpc.client_connection import ClientConnection, DownloadStream
from xdfs.rpc.handling import CallContext, Download, Principal
from xdfs.rpc.messages import PROTOCOL_VERSION, Empty, Hello
from xdfs.rpc.server import RpcServer
from xdfs.rpc.service import Method, MethodKind, Service
from xdfs.rpc.streams import StreamReceiver

__all__ = [
    "PROTOCOL_VERSION",
    "CallContext",
    "ClientConnection",
    "Download",
    "DownloadStream",
    "Empty",
    "Hello",
    "Method",
    "MethodKind",
    "Principal",
    "RpcClient",
    "RpcServer",
    "Service",
    "StreamReceiver",
]
