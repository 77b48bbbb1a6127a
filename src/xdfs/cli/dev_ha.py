"""``xdfs dev --ha``: two NameNodes (nn1, nn2) on the dev cluster's quorum journal, a
failover controller next to each, and one ZooKeeper server, all on loopback.

Ports are chosen once and kept in ``DIR/ha.json`` (the NameNodes' ids map to addresses in
``ha.namenodes``, so they must come back on the same ones; so do their WebHDFS gateways,
``ha.webhdfs``, which each NameNode serves whatever its state: a standby answers
StandbyException). The [ha] settings go into
``DIR/ha.toml`` (the user's --conf file, if any, merged under them), which every process
of the cluster reads. nn2's name dir starts as a copy of nn1's, taken right after the
journal was initialized from it (what ``-bootstrapStandby`` would download).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import click

from xdfs.common.files import atomic_write
from xdfs.common.process import ServerProcess
from xdfs.common.secrets import new_secret_file

IDS = ("nn1", "nn2")
LAYOUT_FILE = "ha.json"
CONF_FILE = "ha.toml"
ZKFC_SECRET_FILE = "zkfc.secret"
#: The ZooKeeper secret (digest login and znode ACLs), shared with --logservice's instance.
ZOOKEEPER_SECRET_FILE = "zookeeper.secret"


@dataclass(frozen=True)
class DevHa:
    base: Path
    namenode_ports: dict[str, int]
    zookeeper_port: int
    http_ports: dict[str, int]
    controller_ports: dict[str, int]

    @property
    def addresses(self) -> dict[str, str]:
        return {nn_id: f"127.0.0.1:{port}" for nn_id, port in self.namenode_ports.items()}

    @property
    def http_addresses(self) -> dict[str, str]:
        """NameNode id -> host:port of its WebHDFS gateway."""
        return {nn_id: f"127.0.0.1:{port}" for nn_id, port in self.http_ports.items()}

    @property
    def controller_addresses(self) -> dict[str, str]:
        """NameNode id -> host:port of its failover controller (ha.controllers)."""
        return {nn_id: f"127.0.0.1:{port}" for nn_id, port in self.controller_ports.items()}

    @property
    def zookeeper_address(self) -> str:
        return f"127.0.0.1:{self.zookeeper_port}"

    @property
    def conf_file(self) -> Path:
        return self.base / CONF_FILE

    def name_dir(self, nn_id: str) -> Path:
        return self.base / nn_id

    def write_conf(self, user_conf: str | None) -> list[str]:
        """DIR/ha.toml (the user's file under the [ha] settings); the --conf to pass."""
        from xdfs.config import read_toml, write_toml

        settings = read_toml(Path(user_conf)) if user_conf else {}
        settings["ha"] = {
            **settings.get("ha", {}),
            "namenodes": self.addresses,
            "webhdfs": self.http_addresses,
            "automatic_failover": True,
            "zookeeper_quorum": self.zookeeper_address,
            "controllers": self.controller_addresses,
            "zkfc_secret_file": str(self.base / ZKFC_SECRET_FILE),
            "zookeeper_secret_file": str(self.base / ZOOKEEPER_SECRET_FILE),
        }
        write_toml(self.conf_file, settings)
        return ["--conf", str(self.conf_file)]

    def prepare_standby_dir(self) -> None:
        """nn2 starts from nn1's dir the first time (same ids, image and edits)."""
        if not self.name_dir("nn2").exists():
            shutil.copytree(self.name_dir("nn1"), self.name_dir("nn2"),
                            ignore=shutil.ignore_patterns("in_use.lock"))


def dev_ha(base: Path) -> DevHa:
    """The HA layout of this base dir: made on first use, then always the same."""
    from xdfs.testing.net import free_port

    layout = base / LAYOUT_FILE
    data = json.loads(layout.read_text()) if layout.exists() else {}
    ha = DevHa(base, dict(data.get("namenodes") or {nn_id: free_port() for nn_id in IDS}),
               int(data.get("zookeeper") or free_port()),
               # (a layout from before the gateways, or the controllers, had fixed ports
               # gets them now)
               dict(data.get("http") or {nn_id: free_port() for nn_id in IDS}),
               dict(data.get("controllers") or {nn_id: free_port() for nn_id in IDS}))
    if "controllers" not in data:
        atomic_write(layout, json.dumps({"namenodes": ha.namenode_ports,
                                         "zookeeper": ha.zookeeper_port,
                                         "http": ha.http_ports,
                                         "controllers": ha.controller_ports}).encode())
    for name in (ZKFC_SECRET_FILE, ZOOKEEPER_SECRET_FILE):
        if not (base / name).exists():
            new_secret_file(base / name)
    return ha


def start_zookeeper(ha: DevHa, timeout_s: float) -> ServerProcess:
    """One ZooKeeper server (standalone) under DIR/zookeeper, stopped with the cluster."""
    return start_zookeeper_at(ha.base, ha.zookeeper_port, timeout_s)


def start_zookeeper_at(base: Path, port: int, timeout_s: float) -> ServerProcess:
    """One ZooKeeper server (standalone) under ``base``/zookeeper on ``port``."""
    from xdfs.common.process import ProcessError
    from xdfs.common.zookeeper import ServerPorts, ZooKeeperServer

    server = ZooKeeperServer(base / "zookeeper", ServerPorts(port),
                             tick_s=1.0, die_with_parent=True)
    try:
        server.launch()
        server.wait_serving(timeout_s)
    except ProcessError as exc:
        server.kill()
        raise click.ClickException(f"ZooKeeper did not start: {exc.last_line or exc} "
                                   f"(log: {server.log_path})") from None
    assert server.process is not None
    return server.process


def namenode_processes(ha: DevHa, conf: list[str], env: dict[str, str]
                       ) -> list[tuple[str, ServerProcess]]:
    """For each NameNode id, its NameNode and its failover controller."""
    children: list[tuple[str, ServerProcess]] = []
    for nn_id, address in ha.addresses.items():
        children.append(("namenode", ServerProcess.xdfs(
            *conf, "-D", f"namenode.http_address={ha.http_addresses[nn_id]}",
            "namenode", "--name-dir", str(ha.name_dir(nn_id)),
            "--rpc-address", address, log_path=ha.base / "logs" / f"{nn_id}.log",
            ready_pattern=r"namenode serving on (\S+)", env=env, die_with_parent=True)))
        children.append(("zkfc", ServerProcess.xdfs(
            *conf, "-D", "ha.zkfc_http_address=127.0.0.1:0", "zkfc", "--id", nn_id,
            log_path=ha.base / "logs" / f"zkfc-{nn_id}.log",
            ready_pattern=r"zkfc serving on (\S+)", env=env, die_with_parent=True)))
    return children
