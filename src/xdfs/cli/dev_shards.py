"""``xdfs dev --shards N``: one namespace over N NameNode shards, on loopback.

One ZooKeeper server (the slot map, the shards' registrations and the controller), N
NameNodes with shard numbers 0..N-1 (``DIR/shard<k>/namenode``, formatted with ``--shard k``,
one cluster id and shard 0's DataNode secret) and DataNodes (``DIR/datanode<i>``) that keep
a block pool per shard and an actor per shard's NameNode (``datanode.shards``). The shards
write the initial map once all N have registered (``sharding.shards_expected``); ``xdfs dev``
waits for it, then for every shard to accept writes, and writes ``client.toml`` naming shard
0 only: clients learn the map from it.

Ports are chosen once and kept in ``DIR/shards.json``: the shards register their addresses
in ZooKeeper and a restart must find them where the map says.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from xdfs.cli.dev_ha import ZOOKEEPER_SECRET_FILE, start_zookeeper_at
from xdfs.common.files import atomic_write
from xdfs.common.secrets import new_secret_file

if TYPE_CHECKING:
    from xdfs.common.process import ServerProcess
    from xdfs.config import XdfsConfig

LAYOUT_FILE = "shards.json"
#: How long a shard's ZooKeeper session lives without its process answering.
SESSION_TIMEOUT_S = 4.0
MAP_POLL_S = 0.2


@dataclass(frozen=True)
class DevShards:
    base: Path
    ports: list[int]
    zookeeper_port: int
    #: One cluster id for every shard (a DataNode serving several shards checks it).
    cluster_id: str

    @property
    def count(self) -> int:
        return len(self.ports)

    @property
    def zookeeper_address(self) -> str:
        return f"127.0.0.1:{self.zookeeper_port}"

    def address(self, shard: int) -> str:
        return f"127.0.0.1:{self.ports[shard]}"

    def shard_dir(self, shard: int) -> Path:
        return self.base / f"shard{shard}"

    def name_dir(self, shard: int) -> Path:
        return self.shard_dir(shard) / "namenode"

    def conf(self, shard: int) -> list[str]:
        """The [sharding] settings of shard ``shard`` (-D overrides)."""
        settings = {
            "shard": shard,
            "zookeeper": f'"{self.zookeeper_address}"',
            "zookeeper_secret_file": f'"{self.base / ZOOKEEPER_SECRET_FILE}"',
            "shards_expected": self.count,
            "zookeeper_session_timeout_s": SESSION_TIMEOUT_S,
        }
        return [arg for key, value in settings.items()
                for arg in ("-D", f"sharding.{key}={value}")]


def dev_shards(base: Path, count: int) -> DevShards:
    """The sharded layout of this base dir: made on first use, then always the same."""
    from xdfs.testing.net import free_port

    layout = base / LAYOUT_FILE
    data = json.loads(layout.read_text()) if layout.exists() else {}
    ports = list(data.get("namenodes") or [])
    if ports and len(ports) != count:
        raise click.UsageError(f"{base} holds a cluster of {len(ports)} shards, not {count}: "
                               "use another --base-dir (shards cannot be added yet)")
    shards = DevShards(base, ports or [free_port() for _ in range(count)],
                       int(data.get("zookeeper") or free_port()),
                       str(data.get("cluster_id") or f"CID-{uuid.uuid4()}"))
    if not data:
        atomic_write(layout, json.dumps({"namenodes": shards.ports,
                                         "zookeeper": shards.zookeeper_port,
                                         "cluster_id": shards.cluster_id}).encode())
    if not (base / ZOOKEEPER_SECRET_FILE).exists():
        new_secret_file(base / ZOOKEEPER_SECRET_FILE)
    return shards


def zookeeper_process(shards: DevShards, timeout_s: float) -> ServerProcess:
    return start_zookeeper_at(shards.base, shards.zookeeper_port, timeout_s)


def namenode_process(shards: DevShards, shard: int, conf: list[str], env: dict[str, str]
                     ) -> ServerProcess:
    from xdfs.common.process import ServerProcess

    return ServerProcess.xdfs(
        *conf, *shards.conf(shard), "namenode", "--name-dir", str(shards.name_dir(shard)),
        "--rpc-address", shards.address(shard),
        log_path=shards.base / "logs" / f"namenode{shard}.log",
        ready_pattern=r"namenode serving on (\S+)", env=env, die_with_parent=True)


def datanode_process(shards: DevShards, index: int, conf: list[str]) -> ServerProcess:
    """DataNode ``index``, serving every shard (a block pool and an actor per shard)."""
    from xdfs.common.process import ServerProcess

    table = ", ".join(f'{k} = "{shards.address(k)}"' for k in range(shards.count))
    return ServerProcess.xdfs(
        *conf, "-D", f"datanode.shards={{{table}}}", "datanode",
        "--data-dir", str(shards.base / f"datanode{index}"), "--rpc-address", "127.0.0.1:0",
        log_path=shards.base / "logs" / f"datanode{index}.log",
        ready_pattern=r"datanode serving on (\S+)",
        env={"XDFS_USER": "", "XDFS_PASSWORD": ""}, die_with_parent=True)


def wait_for_map(config: XdfsConfig, shards: DevShards, credentials: dict[str, str]) -> None:
    """Until shard 0 holds a slot map naming every shard; bounded by
    dev.writable_timeout_s."""
    from xdfs.client.client import Client
    from xdfs.errors import NoSlotMap

    timeout_s = config.dev.writable_timeout_s
    deadline = time.monotonic() + timeout_s
    with Client(f"xdfs://{shards.address(0)}", config=config, token="", **credentials) as c:
        while True:
            try:
                answer = c.shard_maps()[0]
                if answer.shard and len({shard for _f, _l, shard in answer.ranges}) == shards.count:
                    return
            except NoSlotMap:
                pass
            if time.monotonic() > deadline:
                raise click.ClickException(
                    f"no slot map over {shards.count} shards after {timeout_s:.0f} s (logs "
                    f"in {shards.base / 'logs'})")
            time.sleep(MAP_POLL_S)
