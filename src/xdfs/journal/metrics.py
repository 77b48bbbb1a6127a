"""A JournalNode's figures for /metrics and its status page (read when asked)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from xdfs.metrics import Family, gauges

if TYPE_CHECKING:
    from xdfs.journal.server import JournalNode


def families(node: JournalNode) -> Iterator[Family]:
    journals = [(name, worker.journal) for name, worker in sorted(node.workers.items())]
    yield gauges("xdfs_journalnode_last_txid", "Last transaction this JournalNode holds, by "
                 "journal", "journal", [(name, j.last_txid) for name, j in journals])
    yield gauges("xdfs_journalnode_committed_txid", "Last transaction known committed (on "
                 "a majority), by journal", "journal",
                 [(name, j.committed_txid) for name, j in journals])
    yield gauges("xdfs_journalnode_journal_lag_txns", "Committed transactions this "
                 "JournalNode does not hold yet (it catches up by syncing), by journal",
                 "journal", [(name, max(0, j.committed_txid - j.last_txid))
                             for name, j in journals])
    yield gauges("xdfs_journalnode_writer_epoch", "Epoch of the journal's current writer",
                 "journal", [(name, j.writer_epoch) for name, j in journals])


def status_facts(node: JournalNode) -> list[tuple[str, object]]:
    facts: list[tuple[str, object]] = [
        ("RPC address", node.address if node.server is not None else ""),
        ("journal dir", str(node.journal_dir)),
    ]
    for name, worker in sorted(node.workers.items()):
        j = worker.journal
        facts.append((f"journal {name}",
                      f"last txid {j.last_txid}, committed {j.committed_txid}, writer epoch "
                      f"{j.writer_epoch}" + (f"; FAILED: {worker.failure}"
                                             if worker.failure else "")))
    return facts
