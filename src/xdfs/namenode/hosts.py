"""Reading the DataNode host lists and the rack topology (the I/O around the pure cores
:mod:`~xdfs.namenode.blocks.admin_states` and :mod:`~xdfs.namenode.blocks.topology`).

Read when the NameNode starts serving (a restart keeps decommissions and maintenance: the
files are the truth) and again by ``admin -refreshNodes``. A file that cannot be read or
parsed is a HostsFileError and changes nothing. The topology script runs synchronously at
a DataNode's first registration from an address (its answer is cached), bounded by
``topology_script_timeout_s``.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Sequence
from pathlib import Path

from xdfs.config import NameNodeConfig
from xdfs.errors import HostsFileError
from xdfs.namenode.blocks import decommission
from xdfs.namenode.blocks.admin_states import HostLists, parse_hosts, parse_maintenance
from xdfs.namenode.blocks.datanodes import DataNode
from xdfs.namenode.blocks.manager import BlockManager
from xdfs.namenode.blocks.topology import Resolver, Topology, parse_topology

log = logging.getLogger(__name__)


def _read(path: str, what: str) -> str:
    if not path:
        return ""
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise HostsFileError(f"cannot read the {what} {path}: {exc}") from exc


def load_host_lists(config: NameNodeConfig) -> HostLists:
    return HostLists(
        include=parse_hosts(_read(config.hosts_include_file, "include file")),
        exclude=parse_hosts(_read(config.hosts_exclude_file, "exclude file")),
        maintenance=parse_maintenance(
            _read(config.hosts_maintenance_file, "maintenance file"),
            config.hosts_maintenance_file,
        ),
    )


def load_topology(config: NameNodeConfig) -> Topology:
    mapping = parse_topology(_read(config.topology_file, "topology file"), config.topology_file)
    resolver = _script(config) if config.topology_script else None
    return Topology(mapping, resolver)


def _script(config: NameNodeConfig) -> Resolver:
    def resolve(addresses: Sequence[str]) -> list[str]:
        try:
            done = subprocess.run(
                [config.topology_script, *addresses], capture_output=True, text=True,
                timeout=config.topology_script_timeout_s, check=True,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise HostsFileError(f"topology script {config.topology_script}: {exc}") from exc
        racks = done.stdout.split()
        if len(racks) != len(addresses):
            raise HostsFileError(
                f"topology script {config.topology_script} printed {len(racks)} rack(s) "
                f"for {len(addresses)} address(es)"
            )
        return racks

    return resolve


def load(config: NameNodeConfig) -> tuple[Topology, HostLists]:
    """What a starting NameNode installs (read before it serves: a bad file stops it)."""
    return load_topology(config), load_host_lists(config)


def install(blocks: BlockManager, loaded: tuple[Topology, HostLists]) -> None:
    """Into a fresh block manager (no DataNode registered yet)."""
    blocks.datanodes.topology, blocks.datanodes.hosts = loaded


def refresh_nodes(blocks: BlockManager, config: NameNodeConfig) -> list[DataNode]:
    """``admin -refreshNodes``: re-read the host lists (and the topology file, for nodes
    registering from now on) and apply them; the nodes refused from now on."""
    hosts = load_host_lists(config)
    topology = load_topology(config)
    refused = decommission.refresh(blocks.replication, hosts, blocks.clock())
    blocks.datanodes.topology = topology
    for node in refused:
        blocks.declare_dead(node)
        log.warning("DataNode %s at %s is no longer allowed (include file)",
                    node.node_id, node.address)
    return refused
