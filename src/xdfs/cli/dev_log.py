"""``xdfs dev --logservice`` (next to the file system) or ``--logservice-only`` (alone):
ZooKeeper, three storage nodes and a log service instance.

The storage nodes are JournalNodes (their ``ledger`` service) in ``DIR/lognode<i>``; the
log service instance keeps nothing on disk (its state is ZooKeeper's and the ledgers').
Ports are chosen once and kept in ``DIR/logservice.json``: ledger metadata names storage
nodes by address, so they must come back on the same ones. ``DIR/logservice.secret`` (made
once, mode 0600) is both the storage nodes' secret and the one callers log in with (the
storage nodes send their heartbeats to the instance, the keeper, with it too); it and
the instance's address go into ``client.toml`` (``client.logservice``,
``client.logservice_password``) so that ``xdfs log ...`` and ``LogClient()`` need no
arguments. ``DIR/zookeeper.secret`` (shared with ``--ha``) is the instance's ZooKeeper login
and the ACL of its znodes: callers of the log service never hold it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import click

from xdfs.common.files import atomic_write
from xdfs.common.process import ServerProcess
from xdfs.common.secrets import new_secret_file, read_secret_file
from xdfs.common.zookeeper import ServerPorts, ZooKeeperServer

LAYOUT_FILE = "logservice.json"
SECRET_FILE = "logservice.secret"
STORAGE_NODES = 3


@dataclass
class DevLog:
    base: Path
    zookeeper: ZooKeeperServer
    storage: list[ServerProcess]
    service: ServerProcess
    service_address: str

    @property
    def secret(self) -> Path:
        return self.base / SECRET_FILE

    def processes(self) -> list[tuple[str, ServerProcess]]:
        """Every process of the log service that was started (in starting order)."""
        zookeeper = [] if self.zookeeper.process is None else [
            ("zookeeper", self.zookeeper.process)]
        every = [*zookeeper, *(("journalnode", p) for p in self.storage),
                 ("logservice", self.service)]
        return [(role, proc) for role, proc in every if proc.proc is not None]

    def cluster_entries(self) -> list[dict[str, object]]:
        addresses = [self.zookeeper.address, *self.storage_addresses, self.service_address]
        return [{"role": role, "pid": proc.pid, "address": address, "log": str(proc.log_path)}
                for (role, proc), address in zip(self.processes(), addresses, strict=True)]

    @property
    def storage_addresses(self) -> list[str]:
        return [f"127.0.0.1:{_port(p)}" for p in self.storage]

    def client_settings(self) -> dict[str, str]:
        return {"logservice": self.service_address,
                "logservice_password": read_secret_file(self.secret, "logservice secret")}


def _port(proc: ServerProcess) -> str:
    args = list(proc.args)
    return args[args.index("--rpc-address") + 1].rsplit(":", 1)[1]


def _layout(base: Path) -> dict[str, int | list[int]]:
    from xdfs.testing.net import free_port

    path = base / LAYOUT_FILE
    if path.exists():
        loaded: dict[str, int | list[int]] = json.loads(path.read_text())
        return loaded
    layout: dict[str, int | list[int]] = {
        "zookeeper": free_port(), "service": free_port(),
        "storage": [free_port() for _ in range(STORAGE_NODES)]}
    atomic_write(path, json.dumps(layout).encode())
    return layout


def dev_log(base: Path, conf: list[str]) -> DevLog:
    from xdfs.cli.dev_ha import ZOOKEEPER_SECRET_FILE

    layout = _layout(base)
    secret = base / SECRET_FILE
    zookeeper_secret = base / ZOOKEEPER_SECRET_FILE
    for path in (secret, zookeeper_secret):
        if not path.exists():
            new_secret_file(path)
    zk_port = layout["zookeeper"]
    storage_ports = layout["storage"]
    assert isinstance(zk_port, int) and isinstance(storage_ports, list)
    zookeeper = ZooKeeperServer(base / "zookeeper", ServerPorts(zk_port), die_with_parent=True)
    address = f"127.0.0.1:{layout['service']}"
    nodes = json.dumps([f"127.0.0.1:{p}" for p in storage_ports])
    storage = [
        ServerProcess.xdfs(  # heartbeats to the keeper: the one instance
            *conf, "-D", f"journalnode.secret_file={secret}",
            "-D", f"logservice.instances={json.dumps([address])}",
            "-D", f"logservice.storage_nodes={nodes}",  # the peers it may copy from
            "-D", "journalnode.http_address=127.0.0.1:0", "journalnode",
            "--journal-dir", str(base / f"lognode{i}"), "--rpc-address", f"127.0.0.1:{port}",
            log_path=base / "logs" / f"lognode{i}.log",
            ready_pattern=r"journalnode serving on (\S+)", die_with_parent=True)
        for i, port in enumerate(storage_ports)
    ]
    service = ServerProcess.xdfs(
        *conf, "-D", f"logservice.secret_file={secret}",
        "-D", f"logservice.instances={json.dumps([address])}",
        "-D", f"logservice.zookeeper_quorum={zookeeper.address}",
        "-D", f"logservice.zookeeper_secret_file={zookeeper_secret}",
        "-D", f"logservice.storage_nodes={nodes}",
        "-D", "logservice.http_address=127.0.0.1:0", "logservice", "--rpc-address", address,
        log_path=base / "logs" / "logservice.log",
        ready_pattern=r"logservice serving on (\S+)", die_with_parent=True)
    return DevLog(base, zookeeper, storage, service, address)


def start_dev_log(devlog: DevLog, start: Callable[[ServerProcess, float], str],
                  timeout_s: float) -> None:
    """ZooKeeper first (the service's metadata), then the storage nodes, then the service
    (``start``: how ``xdfs dev`` starts a process and reports one that does not)."""
    from xdfs.common.process import ProcessError

    devlog.zookeeper.launch()
    try:
        devlog.zookeeper.wait_serving(timeout_s)
    except ProcessError as exc:
        raise click.ClickException(f"ZooKeeper did not start: {exc.last_line or 'no output'} "
                                   f"(log: {devlog.zookeeper.log_path})") from None
    for proc in devlog.storage:
        start(proc, timeout_s)
    start(devlog.service, timeout_s)
