"""A real cluster serving WebHDFS (a NameNode and three DataNodes in process, each with an
HTTP server on a free port, on a loop thread of their own) for the synchronous clients of
these tests: requests, fsspec's own webhdfs file system, curl, Spark. One per module; each
test works under a fresh directory."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import pytest
import requests

from tests.datapath.conftest import fast_config, start_cluster
from tests.integration.conftest import ROOT, ROOT_PW
from xdfs.client.client import AsyncClient
from xdfs.config import KiB, XdfsConfig
from xdfs.rpc.sync import LoopThread
from xdfs.testing.minicluster import MiniCluster

ALICE, ALICE_PW = "alice", "alice-pw"
#: Small blocks: test files span several.
BLOCK_BYTES = 64 * KiB


def webhdfs_config(auth: str = "credentials", **http: Any) -> XdfsConfig:
    config = fast_config(scan_period_s=3600.0, http_address="127.0.0.1:0")
    return replace(
        config,
        namenode=replace(config.namenode, http_address="127.0.0.1:0",
                         default_block_size_bytes=BLOCK_BYTES),
        http=replace(config.http, auth=auth, **http),
    )


@dataclass(frozen=True)
class WebCluster:
    """The cluster as a WebHDFS client sees it."""

    http: str  # host:port of the NameNode's HTTP server
    rpc: str  # host:port of its RPC server
    loop: LoopThread

    @property
    def url(self) -> str:
        return f"http://{self.http}/webhdfs/v1"

    def call(self, method: str, path: str, op: str, *, auth: Any = (ROOT, ROOT_PW),
             allow_redirects: Any = True, data: Any = None,
             **params: Any) -> requests.Response:
        """One request as root (``auth``: a (user, password) for Basic, None for none)."""
        return requests.request(method, self.url + path, params={"op": op, **params},
                                auth=auth, allow_redirects=allow_redirects, data=data,
                                timeout=60)

    def client(self, user: str = ROOT, password: str = ROOT_PW) -> AsyncClient:
        return AsyncClient(f"xdfs://{self.rpc}", user=user, password=password)

    def run(self, coroutine: Any) -> Any:
        return self.loop.run(coroutine)


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def start_web_cluster(tmp: Any, auth: str = "credentials", **http: Any
                      ) -> Iterator[WebCluster]:
    loop = LoopThread("xdfs-webhdfs-cluster")
    mc = MiniCluster(tmp)
    try:
        cluster = loop.run(start_cluster(mc, webhdfs_config(auth, **http)))
        loop.run(cluster.client.add_user(ALICE, ALICE_PW, ["staff"]))
        loop.run(cluster.client.close())
        nn = mc.namenodes[0]
        yield WebCluster(nn.http_address, nn.address, loop)
    finally:
        loop.run(mc.close())
        loop.close()


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebCluster]:
    yield from start_web_cluster(tmp_path_factory.mktemp("webhdfs-cluster"))


@pytest.fixture
def web_dir(web: WebCluster) -> Iterator[str]:
    """A fresh directory (root's, mode 777 so alice may write in it) for one test."""
    path = f"/w/{uuid.uuid4().hex[:12]}"
    assert web.call("PUT", path, "MKDIRS", permission="777").json() == {"boolean": True}
    web.call("PUT", path, "SETPERMISSION", permission="777").raise_for_status()
    yield path
    web.call("DELETE", path, "DELETE", recursive="true")
