"""A DataNode's figures for /metrics and its status page (read when asked, never kept)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from xdfs.errors import StorageError
from xdfs.http.ui import size
from xdfs.metrics import Family, ServerMetrics, counter, gauge

if TYPE_CHECKING:
    from pathlib import Path

    from xdfs.datanode.scanner import BlockScanner
    from xdfs.datanode.storage import DataStorage
    from xdfs.datanode.transfer import Transfers
    from xdfs.rpc.server import RpcServer


class DataNodeView(Protocol):
    """What the series here and the status page read of a DataNode (``server.DataNode``
    is one; this module never imports it)."""

    data_dir: Path
    namenode_addresses: list[str]
    #: Shard -> its NameNode addresses (one entry, shard 0, without sharding).
    shard_addresses: dict[int, list[str]]
    server: RpcServer | None

    @property
    def address(self) -> str: ...
    @property
    def cluster_id(self) -> str: ...

    storage: DataStorage
    scanner: BlockScanner
    transfers: Transfers
    bytes_read: int
    bytes_written: int

    @property
    def registered(self) -> bool: ...


def register_metrics(node: DataNodeView, metrics: ServerMetrics) -> None:
    metrics.add_collector("datanode", lambda: _families(node))


def _families(node: DataNodeView) -> Iterator[Family]:
    storage = node.storage
    replicas = storage.replicas
    yield counter("xdfs_datanode_read_bytes", "Block bytes served by block reads",
                  node.bytes_read)
    yield counter("xdfs_datanode_written_bytes", "Block bytes stored from writers and "
                  "replications", node.bytes_written)
    yield gauge("xdfs_datanode_replicas", "Replicas held (finalized and being written)",
                len(replicas))
    yield gauge("xdfs_datanode_used_bytes", "Bytes of block and checksum files",
                storage.used_bytes)
    yield gauge("xdfs_datanode_transfers", "Block reads, writes and copies running",
                node.transfers.count)
    scanner = node.scanner
    yield counter("xdfs_datanode_scanner_passes", "Block scanner passes completed",
                  scanner.passes)
    yield gauge("xdfs_datanode_scanner_pass_replicas", "Replicas the block scanner has "
                "verified so far in its current pass", scanner.current.replicas)
    yield gauge("xdfs_datanode_scanner_pass_bytes", "Bytes the block scanner has verified "
                "so far in its current pass", scanner.current.bytes)
    yield gauge("xdfs_datanode_registered", "1 while registered with a NameNode",
                1 if node.registered else 0)


def status_facts(node: DataNodeView) -> list[tuple[str, object]]:
    try:
        report = node.storage.storage_report()
        space = f"{size(report.used_bytes)} used, {size(report.free_bytes)} free"
    except StorageError as exc:
        space = f"unreadable: {exc.message}"
    scanner = node.scanner
    return [
        ("node id", node.storage.node_id),
        ("cluster id", node.cluster_id),
        ("RPC address", node.address if node.server is not None else ""),
        ("data dir", str(node.data_dir)),
        ("NameNodes", ", ".join(node.namenode_addresses) if len(node.shard_addresses) < 2
         else "; ".join(f"shard {k}: {', '.join(a)}" for k, a in node.shard_addresses.items())),
        ("registered", "yes" if node.registered else "no"),
        ("replicas", len(node.storage.replicas)),
        ("space", space),
        ("transfers running", node.transfers.count),
        ("bytes read / written", f"{size(node.bytes_read)} / {size(node.bytes_written)}"),
        ("block scanner", f"{scanner.passes} passes; this pass {scanner.current.replicas} "
                          f"replicas, {size(scanner.current.bytes)}"),
    ]
