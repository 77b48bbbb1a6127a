"""A JournalNode's figures for /metrics and its status page (read when asked)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from xdfs.metrics import Family, gauges

if TYPE_CHECKING:
    from xdfs.journal.workers import Journals


def families(registry: Journals) -> Iterator[Family]:
    journals = [(name, worker.journal) for name, worker in registry.by_name()]
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


def status_facts(address: str, registry: Journals) -> list[tuple[str, object]]:
    facts: list[tuple[str, object]] = [
        ("RPC address", address),
        ("journal dir", str(registry.journal_dir)),
    ]
    for name, worker in registry.by_name():
        j = worker.journal
        facts.append((f"journal {name}",
                      f"last txid {j.last_txid}, committed {j.committed_txid}, writer epoch "
                      f"{j.writer_epoch}" + (f"; FAILED: {worker.failure}"
                                             if worker.failure else "")))
    return facts
