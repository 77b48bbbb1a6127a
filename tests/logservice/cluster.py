"""A log service of real processes for the tests: one ZooKeeper, storage nodes (``xdfs
journalnode``) and log service instances (``xdfs logservice``), each on a port chosen once
so it comes back on the same address after a kill -9."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

from xdfs.common.process import ProcessGroup, ServerProcess
from xdfs.common.secrets import new_secret_file
from xdfs.common.zookeeper import ServerPorts, ZooKeeperServer
from xdfs.config import XdfsConfig
from xdfs.log.client import AsyncLogClient
from xdfs.testing.net import free_port

WAIT_S = 60.0


@dataclass
class LogCluster:
    base: Path
    group: ProcessGroup
    storage_count: int = 4
    service_count: int = 2
    extra: list[str] = field(default_factory=list)
    storage: dict[int, ServerProcess] = field(default_factory=dict)
    services: dict[int, ServerProcess] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.secret = self.base / "secret"
        new_secret_file(self.secret)
        self.zookeeper_secret_file = self.base / "zookeeper.secret"
        self.zookeeper_secret = new_secret_file(self.zookeeper_secret_file)
        self.storage_ports = [free_port() for _ in range(self.storage_count)]
        self.service_ports = [free_port() for _ in range(self.service_count)]
        self.zookeeper = ZooKeeperServer(self.base / "zk", ServerPorts(free_port()))

    @property
    def storage_addresses(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.storage_ports]

    @property
    def service_addresses(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.service_ports]

    def conf(self) -> list[str]:
        return ["-D", f"journalnode.secret_file={self.secret}",
                "-D", f"logservice.secret_file={self.secret}",
                "-D", f"logservice.zookeeper_quorum={self.zookeeper.address}",
                "-D", f"logservice.zookeeper_secret_file={self.zookeeper_secret_file}",
                "-D", f"logservice.storage_nodes={json.dumps(self.storage_addresses)}",
                "-D", "logservice.zookeeper_session_timeout_s=4",
                "-D", "logservice.add_timeout_s=3",
                "-D", "logservice.call_timeout_s=3",
                # the storage nodes' heartbeats to the keeper, quick to notice a death
                "-D", f"logservice.instances={json.dumps(self.service_addresses)}",
                "-D", "logservice.heartbeat_interval_s=0.5",
                "-D", "logservice.keeper_interval_s=0.5",
                "-D", "logservice.node_dead_after_s=5",
                *self.extra]

    def start(self) -> LogCluster:
        self.start_zookeeper()
        for index in range(self.storage_count):
            self.start_storage(index)
        for index in range(self.service_count):
            self.start_service(index)
        return self

    def start_zookeeper(self) -> None:
        self.zookeeper.launch()
        assert self.zookeeper.process is not None
        self.group.processes.append(self.zookeeper.process)
        self.zookeeper.wait_serving(WAIT_S)

    def start_storage(self, index: int) -> ServerProcess:
        proc = self.group.start_xdfs(
            f"sn{index}", *self.conf(), "journalnode", "--journal-dir",
            str(self.base / f"sn{index}"), "--rpc-address", self.storage_addresses[index],
            ready_pattern=r"journalnode serving on (\S+)", deadline_s=WAIT_S)
        self.storage[index] = proc
        return proc

    def start_service(self, index: int, faults: str = "") -> ServerProcess:
        proc = self.group.start_xdfs(
            f"ls{index}", *self.conf(), "logservice", "--rpc-address",
            self.service_addresses[index], ready_pattern=r"logservice serving on (\S+)",
            deadline_s=WAIT_S, env={"XDFS_FAULTS": faults} if faults else None)
        self.services[index] = proc
        return proc

    def client(self, call_timeout_s: float = 30.0) -> AsyncLogClient:
        config = XdfsConfig()
        config = replace(config, rpc=replace(config.rpc, call_timeout_s=call_timeout_s,
                                             tries_per_address=2))
        return AsyncLogClient(self.service_addresses, password=self.secret.read_text().strip(),
                              config=config)


def through(cluster: LogCluster, index: int) -> AsyncLogClient:
    """A client that knows only instance ``index`` (it follows NotLogWriter from there)."""
    client = cluster.client()
    return AsyncLogClient(cluster.service_addresses[index], password=client.hello.password,
                          config=client.config)
