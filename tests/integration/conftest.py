"""Shared helpers of the NameNode integration tests (tests/integration/test_nn_*.py).

Every test talks to a real in-process NameNode (MiniCluster) through its RPC interface with
:class:`~xdfs.client.client.AsyncClient`; the ``minicluster`` fixture stops whatever a test
started. Password connections cost one scrypt check each, so fixtures connect every user
once and tests reuse the clients.

Blocks need DataNodes: the ``nn`` and ``cluster`` fixtures come with three
:class:`FakeDataNode` s that speak the DataNode protocol over real RPC (register, reports,
heartbeats) but store nothing; :func:`write_file` makes the targets of each block report
it, as real DataNodes would after the client streamed it to them.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

import pytest

from xdfs.client.client import AsyncClient
from xdfs.config import XdfsConfig
from xdfs.namenode.server import NameNode
from xdfs.protocol import namenode as p
from xdfs.protocol.blocks import BlockRecord
from xdfs.protocol.namenode import FileStatus
from xdfs.testing.minicluster import MiniCluster

from .fake_datanodes import FakeDataNodes, fake_datanodes_of

ROOT = "root"
ROOT_PW = "rootpw"
#: Users the ``users`` fixture creates: name -> (password, groups).
USERS: dict[str, tuple[str, list[str]]] = {
    "alice": ("alice-pw", ["staff"]),
    "bob": ("bob-pw", ["dev"]),
    "carol": ("carol-pw", ["staff", "dev"]),
}


def nn_config(**namenode: Any) -> XdfsConfig:
    """The default configuration with some ``[namenode]`` keys replaced."""
    base = XdfsConfig()
    return replace(base, namenode=replace(base.namenode, **namenode))


def connect(
    nn: NameNode | str,
    user: str | None = None,
    password: str | None = None,
    *,
    token: str | None = None,
) -> AsyncClient:
    """An AsyncClient of ``nn`` that ignores the environment (XDFS_USER ...)."""
    address = nn if isinstance(nn, str) else nn.address
    return AsyncClient(
        f"xdfs://{address}",
        user=user or "",
        password=password or "",
        token=token or "",
        config=XdfsConfig(),
    )


async def write_file(
    client: AsyncClient, path: str, sizes: list[int], *, replication: int = 0
) -> FileStatus:
    """Create ``path`` with one block per entry of ``sizes`` and complete it. No byte is
    sent: the fake DataNodes of the client's NameNode report each block's replicas with
    its length, as real ones do once the client has streamed the block to them."""
    datanodes = fake_datanodes_of(client)
    await client.create(path, replication=replication)
    blocks: list[BlockRecord] = []
    for size in sizes:
        previous = blocks[-1] if blocks else None
        located = await client.rpc.call(
            p.ADD_BLOCK, p.AddBlockRequest(path, client.client_name, previous)
        )
        blocks.append(await datanodes.store(located, size))
    return await client.complete(path, blocks)


async def add_stored_block(
    client: AsyncClient, path: str, size: int, previous: BlockRecord | None = None
) -> BlockRecord:
    """``add_block`` on ``path`` (open by ``client``), its targets reporting ``size`` bytes."""
    located = await client.rpc.call(
        p.ADD_BLOCK, p.AddBlockRequest(path, client.client_name, previous)
    )
    return await fake_datanodes_of(client).store(located, size)


def status_fields(status: FileStatus) -> tuple[object, ...]:
    """Every field of a FileStatus, for exact before/after comparisons."""
    return tuple(getattr(status, name) for name in status.__struct_fields__)


async def walk(client: AsyncClient, top: str = "/") -> dict[str, tuple[object, ...]]:
    """path -> every stat field, for the whole tree under ``top`` (read over RPC)."""
    out: dict[str, tuple[object, ...]] = {}
    root = await client.stat(top)
    out[root.path] = status_fields(root)
    stack = [root]
    while stack:
        directory = stack.pop()
        async for entry in client.iter_dir(directory.path):
            out[entry.path] = status_fields(entry)
            if entry.is_dir:
                stack.append(entry)
    return out


async def run_xdfs(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """``python -m xdfs ARGS`` as a child process; returns (exit code, stdout, stderr)."""
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("XDFS_")}
    child_env.update(env or {})
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "xdfs", *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
        env=child_env,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


_BATCH_DRIVER = r"""
import contextlib, io, json, sys
from xdfs.cli.main import main
results = []
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    sys.argv = ["xdfs", *argv]
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    results.append([code, out.getvalue(), err.getvalue()])
sys.__stdout__.write(json.dumps(results))
"""


async def run_xdfs_batch(
    commands: list[list[str]], env: dict[str, str] | None = None
) -> list[tuple[int, str, str]]:
    """Several ``xdfs`` command lines run one after the other by ``xdfs.cli.main.main`` in
    ONE child process (each with its own argv, output and exit status): a process per
    command would cost ~0.4 s of interpreter start and imports each."""
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("XDFS_")}
    child_env.update(env or {})
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _BATCH_DRIVER, json.dumps(commands),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
        env=child_env,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    return [(code, stdout, stderr) for code, stdout, stderr in json.loads(out)]


@dataclass
class Cluster:
    """A running NameNode with a client per user (root plus USERS) and fake DataNodes."""

    minicluster: MiniCluster
    nn: NameNode
    root: AsyncClient
    clients: dict[str, AsyncClient]
    datanodes: FakeDataNodes

    def __getitem__(self, user: str) -> AsyncClient:
        return self.clients[user]

    async def close(self) -> None:
        for client in self.clients.values():
            await client.close()
        await self.datanodes.close()


async def start_cluster(
    minicluster: MiniCluster, config: XdfsConfig | None = None, *, users: bool = True
) -> Cluster:
    nn = await minicluster.start_namenode(superuser=ROOT, password=ROOT_PW, config=config)
    datanodes = await FakeDataNodes.start(nn)
    root = connect(nn, ROOT, ROOT_PW)
    clients = {ROOT: root}
    if users:
        await asyncio.gather(
            *(root.add_user(name, password, groups) for name, (password, groups) in USERS.items())
        )
        for name, (password, _groups) in USERS.items():
            clients[name] = connect(nn, name, password)
    return Cluster(minicluster, nn, root, clients, datanodes)


@pytest.fixture
async def nn(minicluster: MiniCluster) -> AsyncIterator[NameNode]:
    """A freshly formatted NameNode (superuser root/rootpw), default configuration, with
    three fake DataNodes."""
    node = await minicluster.start_namenode(superuser=ROOT, password=ROOT_PW)
    datanodes = await FakeDataNodes.start(node)
    try:
        yield node
    finally:
        await datanodes.close()


StartDataNodes = Callable[..., Awaitable[FakeDataNodes]]


@pytest.fixture
async def fake_datanodes(minicluster: MiniCluster) -> AsyncIterator[StartDataNodes]:
    """``await fake_datanodes(nn, count=3, beat=True)`` starts fake DataNodes for ``nn``;
    every group started is closed at teardown."""
    started: list[FakeDataNodes] = []

    async def start(nn: NameNode, count: int = 3, **options: Any) -> FakeDataNodes:
        group = await FakeDataNodes.start(nn, count, **options)
        started.append(group)
        return group

    try:
        yield start
    finally:
        for group in started:
            await group.close()


@pytest.fixture
async def root(nn: NameNode) -> AsyncIterator[AsyncClient]:
    async with connect(nn, ROOT, ROOT_PW) as client:
        yield client


@pytest.fixture
async def cluster(minicluster: MiniCluster) -> AsyncIterator[Cluster]:
    """A NameNode with users alice (staff), bob (dev), carol (staff, dev) and their clients."""
    c = await start_cluster(minicluster)
    try:
        yield c
    finally:
        await c.close()
