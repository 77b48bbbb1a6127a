"""A NameNode's Prometheus series: the group-commit histograms (observed per flush) and
its figures read at scrape time (namespace, blocks by state, DataNodes, edits, backups)."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from prometheus_client.core import HistogramMetricFamily

from xdfs.http.ui import when
from xdfs.metrics import Family, ServerMetrics, gauge, gauges
from xdfs.namenode.blocks.fsck import datanode_report

if TYPE_CHECKING:
    from xdfs.config import XdfsConfig
    from xdfs.namenode.editlog.editlog import EditLog
    from xdfs.namenode.editlog.replicator import EditsReplicator
    from xdfs.namenode.image.storage import VersionInfo
    from xdfs.namenode.namesystem import Namesystem
    from xdfs.namenode.security.auth import NameNodeAuth
    from xdfs.namenode.standby import StandbyTailer
    from xdfs.rpc.server import RpcServer

SYNC_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384)


@dataclass
class Phase:
    name: str
    started_s: float
    ended_s: float = 0.0  # 0: under way
    detail: str = ""


@dataclass
class StartupProgress:
    """What a starting NameNode has done (HDFS's StartupProgress, coarse): each phase with
    its start, end and a one-line result. Safe mode, the last phase, is read live."""

    phases: list[Phase] = field(default_factory=list)

    def begin(self, name: str, now_s: float) -> None:
        self.phases.append(Phase(name, now_s))

    def end(self, detail: str, now_s: float) -> None:
        phase = self.phases[-1]
        phase.ended_s, phase.detail = now_s, detail


class Counts:
    """A histogram kept as plain counts on the event loop, turned into its family when
    scraped: an observation is a bisect and two additions (prometheus_client's Histogram
    takes a lock per bucket and sum and walks the buckets in Python, ~2 us: a lone
    mutation's flush observed two)."""

    def __init__(self, name: str, documentation: str, bounds: tuple[float, ...]) -> None:
        self.name = name
        self.documentation = documentation
        self.bounds = bounds
        self.buckets = [0] * (len(bounds) + 1)  # the last: above every bound
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.buckets[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def family(self) -> HistogramMetricFamily:
        bounds = [repr(float(bound)) for bound in self.bounds] + ["+Inf"]
        cumulative = itertools.accumulate(self.buckets)
        return HistogramMetricFamily(self.name, self.documentation,
                                     buckets=list(zip(bounds, cumulative, strict=True)),
                                     sum_value=self.total)


class NameNodeView(Protocol):
    """What the series here, the status page and the web UI read of a NameNode: its server
    (``xdfs.namenode.server.NameNode``) is one, and they never import it."""

    config: XdfsConfig
    clock: Callable[[], float]
    server: RpcServer | None
    edits: EditLog | None
    fs: Namesystem | None
    auth: NameNodeAuth | None
    replicator: EditsReplicator | None
    version: VersionInfo | None
    standby: StandbyTailer | None
    startup: StartupProgress
    ha_enabled: bool
    ha_state: str
    image_txid: int
    last_checkpoint_s: float
    started_at_ms: int

    @property
    def address(self) -> str: ...


class NameNodeMetrics:
    def __init__(self, node: NameNodeView, metrics: ServerMetrics) -> None:
        self.sync_seconds = Counts(
            "xdfs_namenode_edits_sync_seconds",
            "Time one group-commit flush of the edits log takes to be durable", SYNC_BUCKETS_S)
        self.batch_txns = Counts(
            "xdfs_namenode_edits_sync_batch_txns",
            "Transactions made durable by one group-commit flush", BATCH_BUCKETS)
        metrics.add_collector("namenode", lambda: self._families(node))

    def flushed(self, seconds: float, txns: int) -> None:
        self.sync_seconds.observe(seconds)
        self.batch_txns.observe(txns)

    def _families(self, node: NameNodeView) -> Iterator[Family]:
        yield self.sync_seconds.family()
        yield self.batch_txns.family()
        yield from _families(node)


def _families(node: NameNodeView) -> Iterator[Family]:
    yield gauge("xdfs_namenode_ha_state", "1, labelled with the NameNode's HA state",
                1, {"state": node.ha_state})
    standby = node.standby
    if standby is not None:
        yield gauge("xdfs_namenode_standby_applied_txid", "Last journal transaction this "
                    "standby has applied (the active's synced txid minus it: its lag)",
                    standby.last_txid)
    fs, edits = node.fs, node.edits
    if fs is None or edits is None:
        return
    ns = fs.ns
    yield gauge("xdfs_namenode_safe_mode", "1 while in safe mode", int(fs.safe_mode.on))
    yield gauge("xdfs_namenode_inodes", "Files and directories", ns.inode_count())
    yield gauge("xdfs_namenode_files_under_construction", "Files open for writing",
                len(ns.files_under_construction()))
    report = datanode_report(ns, fs.blocks)
    yield gauge("xdfs_namenode_blocks", "Blocks in the namespace", report.blocks)
    yield gauges("xdfs_namenode_blocks_by_state", "Blocks needing attention, by state",
                 "state", [("under_replicated", report.under_replicated),
                           ("missing", report.missing_blocks),
                           ("corrupt", report.corrupt_blocks),
                           ("pending_replication", report.pending_replication),
                           ("pending_deletion", report.pending_deletion),
                           ("future", report.future_blocks)])
    states: dict[str, int] = {"live": 0, "dead": 0}
    for info in report.nodes:
        states[info.state] = states.get(info.state, 0) + 1
    yield gauges("xdfs_namenode_datanodes", "DataNodes by state", "state", states.items())
    yield gauges("xdfs_namenode_datanode_heartbeat_age_seconds",
                 "Seconds since each DataNode's last heartbeat", "datanode",
                 [(info.address, info.last_contact_s) for info in report.nodes])
    yield gauges("xdfs_namenode_capacity_bytes", "Space of the live DataNodes", "kind",
                 [("total", report.capacity_bytes), ("used", report.used_bytes),
                  ("free", report.free_bytes)])
    yield gauge("xdfs_namenode_edits_last_txid", "Last transaction appended", edits.last_txid)
    yield gauge("xdfs_namenode_edits_synced_txid", "Last durable transaction",
                edits.synced_txid)
    yield gauge("xdfs_namenode_image_txid", "Transaction of the newest fsimage",
                node.image_txid)
    yield gauge("xdfs_namenode_last_checkpoint_age_seconds", "Seconds since the last "
                "checkpoint (fsimage) was written or installed",
                max(0.0, node.clock() - node.last_checkpoint_s))
    backups = (node.replicator.backup_infos(node.config.namenode.backup_forget_s)
               if node.replicator is not None else [])
    yield gauges("xdfs_namenode_journal_lag_txns", "Transactions each following BackupNode "
                 "is behind this NameNode's synced edits", "follower",
                 [(info.address, info.lag_txns) for info in backups])


def status_facts(node: NameNodeView) -> list[tuple[str, object]]:
    """The NameNode's status page (``/ui/status``, no login), active or standby."""
    standby, edits = node.standby, node.edits
    return [
        ("HA state", node.ha_state),
        ("cluster id", node.version.cluster_id if node.version else ""),
        ("RPC address", node.address if node.server is not None else ""),
        ("last txid", standby.last_txid if standby else edits.synced_txid if edits else ""),
        ("journal", (standby.error or "reading") if standby else "writing"),
        ("last checkpoint", f"txid {node.image_txid} at {when(node.last_checkpoint_s)}"),
        ("shared journal", node.config.namenode.shared_edits or "none (local edits)"),
    ]
