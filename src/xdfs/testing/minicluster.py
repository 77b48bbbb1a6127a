"""In-process servers for integration tests: every server on 127.0.0.1 and an ephemeral
port, every client tracked, and teardown that fails the test when it leaks a task.

Later components add ``start_namenode``/``start_datanode``/``start_backupnode``; the
generic :meth:`MiniCluster.start_server` hosts any services.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

from xdfs.backupnode.server import BackupNode
from xdfs.config import XdfsConfig
from xdfs.datanode.server import DataNode
from xdfs.namenode.image.format import format_namenode
from xdfs.namenode.security.passwords import DATANODE_SECRET_FILE
from xdfs.namenode.server import NameNode
from xdfs.protocol.system_handlers import add_system_services
from xdfs.rpc.client import RpcClient
from xdfs.rpc.handling import Authenticator
from xdfs.rpc.messages import PROTOCOL_VERSION, Hello
from xdfs.rpc.server import RpcServer
from xdfs.rpc.service import Service


class MiniCluster:
    def __init__(
        self, base_dir: Path, config: XdfsConfig | None = None, *, deadline_s: float = 120.0
    ) -> None:
        self.base_dir = base_dir
        self.config = config or XdfsConfig()
        self.deadline_s = deadline_s
        self.servers: list[RpcServer] = []
        self.namenodes: list[NameNode] = []
        self.datanodes: list[DataNode] = []
        self.backupnodes: list[BackupNode] = []
        self.clients: list[RpcClient] = []
        self._tasks_before: set[asyncio.Task[Any]] = set()
        self._deadline: asyncio.TimerHandle | None = None

    async def __aenter__(self) -> MiniCluster:
        self._tasks_before = asyncio.all_tasks()
        task = asyncio.current_task()
        assert task is not None
        # A mandatory deadline: a hung cluster cancels the test instead of hanging CI.
        self._deadline = asyncio.get_running_loop().call_later(
            self.deadline_s, self._deadline_passed, task
        )
        return self

    def _deadline_passed(self, entered_in: asyncio.Task[Any]) -> None:
        if not entered_in.done():
            entered_in.cancel()
            return
        # Entered from a task that has finished, as a fixture's setup task does: the test
        # runs in a task of its own, started later, so cancel everything started since.
        for task in asyncio.all_tasks() - self._tasks_before:
            task.cancel()

    async def __aexit__(self, *exc: object) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        await self.close()
        await self._assert_no_leaked_tasks()

    async def start_server(
        self,
        name: str,
        services: list[tuple[Service, object]],
        *,
        role: str = "test",
        cluster_id: str = "",
        authenticator: Authenticator | None = None,
        diagnostics: bool = True,
        **rpc_overrides: Any,
    ) -> RpcServer:
        rpc = replace(self.config.rpc, **rpc_overrides) if rpc_overrides else self.config.rpc
        server = RpcServer(name, rpc, cluster_id=cluster_id, authenticator=authenticator)
        add_system_services(server, role, diagnostics=diagnostics)
        for service, impl in services:
            server.add_service(service, impl)
        await server.start("127.0.0.1", 0)
        self.servers.append(server)
        return server

    async def start_namenode(
        self,
        name: str = "nn",
        *,
        superuser: str = "root",
        password: str = "rootpw",
        format_dirs: bool = True,
        name_dir_count: int = 1,
        config: XdfsConfig | None = None,
    ) -> NameNode:
        """A real NameNode (storage, edits log, RPC) on 127.0.0.1 and an ephemeral port.

        ``format_dirs=False`` restarts on the dirs a previous NameNode of that name left."""
        dirs = [self.base_dir / f"{name}-dir{i}" for i in range(name_dir_count)]
        config = config or self.config
        if format_dirs:
            format_namenode(dirs, config.namenode, superuser=superuser, password=password,
                            cluster_id=f"CID-{name}")
        node = NameNode(config, dirs)
        await node.start("127.0.0.1", 0)
        self.namenodes.append(node)
        return node

    async def stop_namenode(self, node: NameNode) -> None:
        await node.stop()
        self.namenodes.remove(node)

    async def start_datanode(
        self,
        name: str = "dn0",
        namenode: str | None = None,
        *,
        config: XdfsConfig | None = None,
        user: str | None = None,
        password: str = "rootpw",
        port: int = 0,
    ) -> DataNode:
        """A real DataNode on ``base_dir/name`` (the same dir again when a node of that name
        is started after being stopped), registering with ``namenode`` (``host:port[,...]``;
        default: the first NameNode started). It logs in with the DataNode secret of the
        first NameNode started (as DataNodes do), or as ``user`` when one is given (or no
        NameNode was started here)."""
        namenode, config = self._follower_setup(namenode, config, user or "root", password)
        if user is None and self.namenodes and not config.datanode.secret_file:
            secret = self.namenodes[0].dirs[0].root / DATANODE_SECRET_FILE
            config = replace(config, datanode=replace(config.datanode, secret_file=str(secret)))
        node = DataNode(config, self.base_dir / name, namenode.split(","))
        await node.start("127.0.0.1", port)
        self.datanodes.append(node)
        return node

    def _follower_setup(
        self, namenode: str | None, config: XdfsConfig | None, user: str, password: str
    ) -> tuple[str, XdfsConfig]:
        """The NameNode address a DataNode or backup follows (default: the first NameNode
        started) and its configuration, logged in as ``user``."""
        if namenode is None:
            assert self.namenodes, "start a NameNode first or pass its address"
            namenode = self.namenodes[0].address
        config = config or self.config
        client = replace(config.client, user=user, password=password, token="")
        return namenode, replace(config, client=client)

    async def stop_datanode(self, node: DataNode) -> None:
        await node.stop()
        self.datanodes.remove(node)

    async def start_backupnode(
        self,
        name: str = "backup",
        namenode: str | None = None,
        *,
        config: XdfsConfig | None = None,
        user: str = "root",
        password: str = "rootpw",
    ) -> BackupNode:
        """A real BackupNode on ``base_dir/name`` following ``namenode`` (default: the first
        NameNode started), logged in as ``user``; the same dir again after a stop."""
        namenode, config = self._follower_setup(namenode, config, user, password)
        node = BackupNode(config, self.base_dir / name, namenode.split(","))
        await node.start("127.0.0.1", 0)
        self.backupnodes.append(node)
        return node

    async def stop_backupnode(self, node: BackupNode) -> None:
        await node.stop()
        self.backupnodes.remove(node)

    def client(
        self, *addresses: str, hello: Hello | None = None, **rpc_overrides: Any
    ) -> RpcClient:
        rpc = replace(self.config.rpc, **rpc_overrides) if rpc_overrides else self.config.rpc
        client = RpcClient(
            list(addresses) or [self.servers[0].address], rpc,
            hello=hello or Hello(PROTOCOL_VERSION, client_name="minicluster"),
        )
        self.clients.append(client)
        return client

    async def close(self) -> None:
        for client in self.clients:
            await client.close()
        for server in self.servers:
            await server.close()
        for datanode in self.datanodes:
            await datanode.stop()
        self.datanodes.clear()
        for backup in self.backupnodes:
            await backup.stop()
        self.backupnodes.clear()
        for node in self.namenodes:
            await node.stop()
        self.namenodes.clear()
        self.clients.clear()
        self.servers.clear()

    async def _assert_no_leaked_tasks(self) -> None:
        current = asyncio.current_task()
        for _ in range(100):
            leaked = [t for t in asyncio.all_tasks() - self._tasks_before if t is not current]
            if not leaked:
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"MiniCluster leaked tasks: {leaked}")
