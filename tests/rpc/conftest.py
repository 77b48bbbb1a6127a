from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import pytest

from tests.rpc.services import TEST_SERVICE, TestHandlers
from xdfs.rpc.client import RpcClient
from xdfs.rpc.server import RpcServer
from xdfs.testing.minicluster import MiniCluster


@pytest.fixture
def handlers() -> TestHandlers:
    return TestHandlers()


@pytest.fixture
async def server(minicluster: MiniCluster, handlers: TestHandlers) -> RpcServer:
    """A server with SYSTEM, DIAGNOSTICS and the test-only service, default settings."""
    return await minicluster.start_server("s1", [(TEST_SERVICE, handlers)])


@pytest.fixture
def client(minicluster: MiniCluster, server: RpcServer) -> RpcClient:
    return minicluster.client(server.address)


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    """Every async RPC test runs on the stdlib loop and, when installed, on uvloop (which
    the servers and the CLI use in production)."""
    factories: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
        "asyncio": asyncio.new_event_loop
    }
    try:
        import uvloop
    except ImportError:
        pass
    else:
        factories["uvloop"] = uvloop.new_event_loop
    return factories
