"""Two real NameNodes (nn1, nn2) on a quorum journal of three JournalNodes, for the HA
process tests; optionally a ZooKeeper ensemble and a failover controller per NameNode."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import tomli_w

from xdfs.client.client import AsyncClient
from xdfs.common.process import ServerProcess
from xdfs.common.secrets import new_secret_file
from xdfs.config import XdfsConfig
from xdfs.errors import XdfsError
from xdfs.testing.net import free_port

from ..journal.qjm_cluster import ENV, PASSWORD, USER, QjmCluster, make_cluster, running

IDS = ("nn1", "nn2")
#: Deadline of anything a test waits for (generous: a loaded 2-core machine).
WAIT_S = 60.0


@dataclass
class HaCluster:
    qjm: QjmCluster
    base: Path
    ha: dict[str, object] = field(default_factory=dict)  # extra [ha] settings
    ports: dict[str, int] = field(default_factory=lambda: {i: free_port() for i in IDS})
    namenodes: dict[str, ServerProcess] = field(default_factory=dict)
    controllers: dict[str, ServerProcess] = field(default_factory=dict)
    datanodes: list[ServerProcess] = field(default_factory=list)

    @property
    def addresses(self) -> dict[str, str]:
        return {nn_id: f"127.0.0.1:{port}" for nn_id, port in self.ports.items()}

    @property
    def conf_file(self) -> Path:
        return self.base / "xdfs.toml"

    def name_dir(self, nn_id: str) -> Path:
        return self.base / nn_id

    def write_conf(self) -> None:
        ha = {"namenodes": self.addresses, "automatic_failover": False, **self.ha}
        client = {"user": USER, "password": PASSWORD}
        self.conf_file.write_text(tomli_w.dumps({"ha": ha, "client": client}))

    def automatic(self, quorum: str) -> None:
        """Automatic failover through ZooKeeper at ``quorum`` (test-sized timeouts)."""
        secret = self.base / "zkfc.secret"
        new_secret_file(secret)
        zookeeper_secret = self.base / "zookeeper.secret"
        new_secret_file(zookeeper_secret)
        nameservice = f"ns-{self.base.name}-{os.getpid()}"
        self.ha.update({
            "automatic_failover": True, "zookeeper_quorum": quorum,
            "nameservice": nameservice, "zookeeper_parent": f"/xdfs-ha-{nameservice}",
            "zookeeper_secret_file": str(zookeeper_secret),
            "controllers": {nn_id: f"127.0.0.1:{free_port()}" for nn_id in self.addresses},
            "zookeeper_session_timeout_s": 4.0, "health_check_interval_s": 0.5,
            "health_check_timeout_s": 2.0, "health_failures_max": 3,
            "graceful_fence_timeout_s": 2.0, "retry_after_failure_s": 0.5,
            "zkfc_rpc_address": "127.0.0.1:0", "zkfc_secret_file": str(secret),
        })
        self.write_conf()

    def start_controller(self, nn_id: str) -> ServerProcess:
        proc = self.qjm.group.start_xdfs(
            f"zkfc-{nn_id}-{len(self.controllers)}", "--conf", str(self.conf_file),
            *self.qjm.conf(), "zkfc", "--id", nn_id, ready_pattern=r"zkfc serving on (\S+)",
            deadline_s=WAIT_S, env=ENV,
        )
        self.controllers[nn_id] = proc
        return proc

    def start_datanode(self, index: int) -> ServerProcess:
        proc = self.qjm.group.start_xdfs(
            f"dn{index}", "--conf", str(self.conf_file), *self.qjm.conf(), "datanode",
            "--data-dir", str(self.base / f"dn{index}"), "--rpc-address", "127.0.0.1:0",
            ready_pattern=r"datanode serving on (\S+)", env=ENV,
        )
        self.datanodes.append(proc)
        return proc

    def active(self) -> str | None:
        states = {nn_id: self.state(nn_id) for nn_id in IDS}
        actives = [nn_id for nn_id, state in states.items() if state == "active"]
        assert len(actives) <= 1, f"two active NameNodes: {states}"
        return actives[0] if actives else None

    def format(self, copy_to_nn2: bool = True) -> None:
        """nn1's dir formatted and the journal initialized from it; nn2's a copy of it
        (or, without ``copy_to_nn2``, left for -bootstrapStandby)."""
        self.write_conf()
        for index in range(3):
            self.qjm.start_journalnode(index)
        self.qjm.format(self.name_dir("nn1"))
        if copy_to_nn2:
            shutil.copytree(self.name_dir("nn1"), self.name_dir("nn2"))

    def start(self, nn_id: str, *extra: str) -> ServerProcess:
        """Start NameNode ``nn_id`` (``extra``: its own -D settings)."""
        proc = self.qjm.group.start_xdfs(
            nn_id, "--conf", str(self.conf_file), *self.qjm.conf(), *extra, "namenode",
            "--name-dir", str(self.name_dir(nn_id)),
            "--rpc-address", self.addresses[nn_id],
            ready_pattern=r"namenode serving on (\S+)", env=ENV,
        )
        self.namenodes[nn_id] = proc
        return proc

    def xdfs(self, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "xdfs", "--conf", str(self.conf_file), *self.qjm.conf(),
             *args], env={**os.environ, **ENV}, capture_output=True, text=True,
            timeout=timeout_s)

    def admin(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.xdfs("admin", *args)

    def state(self, nn_id: str) -> str:
        """What the NameNode says it is ("unreachable" when it does not answer in 2 s)."""
        from xdfs.protocol.ha import GET_SERVICE_STATE
        from xdfs.rpc.messages import Empty

        async def ask() -> str:
            async with self.client(nn_id) as client:
                async with asyncio.timeout(2.0):
                    status = await client.rpc.call(GET_SERVICE_STATE, Empty())
                return str(status.state)

        try:
            return asyncio.run(ask())
        except (XdfsError, TimeoutError):
            return "unreachable"

    def client(self, *ids: str) -> AsyncClient:
        uri = "xdfs://" + ",".join(self.addresses[i] for i in (ids or IDS))
        return AsyncClient(uri, user=USER, password=PASSWORD, config=XdfsConfig())

    def wait(self, predicate: Callable[[], object], what: str) -> None:
        end = time.monotonic() + WAIT_S
        while not predicate():
            if time.monotonic() > end:
                raise AssertionError(f"not within {WAIT_S} s: {what}\n{self.logs()}")
            time.sleep(0.1)

    def logs(self) -> str:
        procs = {**self.namenodes, **{f"zkfc-{k}": v for k, v in self.controllers.items()}}
        return "\n".join(f"--- {name}\n{proc.log_text()[-3000:]}"
                         for name, proc in procs.items())

    def writable(self, datanodes: int = 1) -> bool:
        """The active is out of safe mode with ``datanodes`` live DataNodes."""
        async def ask() -> bool:
            async with self.client() as client:
                if (await client.safe_mode("get")).on:
                    return False
                report = await client.datanode_report()
                return sum(node.state == "live" for node in report.nodes) >= datanodes

        try:
            return asyncio.run(ask())
        except XdfsError:
            return False


@contextlib.contextmanager
def formatted_pair(tmp_path: Path, *extra: str) -> Iterator[HaCluster]:
    """nn1 and nn2 formatted on three JournalNodes (``extra``: arguments for every
    process), nothing started yet; every process killed after it."""
    with running(make_cluster(tmp_path, tmp_path)) as qjm:
        qjm.extra += list(extra)
        cluster = HaCluster(qjm, tmp_path)
        cluster.format()
        yield cluster
