"""A JournalNode's journal on disk: the protocol's rules, refusals that change nothing,
and what survives a restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from xdfs.editlog.framing import frame_record
from xdfs.errors import (
    Fenced,
    InvalidArgument,
    JournalOutOfSync,
    NotFormatted,
    StorageError,
    WrongCluster,
)
from xdfs.journal.storage import Journal
from xdfs.protocol import journal as j

NS = j.JournalNamespace("CID-test", 7)
LAYOUT = 3


def records(first: int, count: int) -> bytes:
    return b"".join(frame_record(1, t, f"op {t}".encode()) for t in range(first, first + count))


def req(epoch: int, committed: int = 0) -> j.RequestInfo:
    return j.RequestInfo("nn", epoch, committed)


def files(journal: Journal) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted(journal.current.iterdir()) if p.is_file()}


@pytest.fixture
def journal(tmp_path: Path) -> Journal:
    jn = Journal(tmp_path / "nn", "nn")
    jn.load()
    jn.format(NS, force=False)
    return jn


def writing(journal: Journal, epoch: int = 1, start: int = 1) -> Journal:
    journal.new_epoch(NS, epoch)
    journal.start_log_segment(req(epoch), start, LAYOUT)
    return journal


def reloaded(journal: Journal) -> Journal:
    journal.close()
    again = Journal(journal.root, journal.journal_id)
    again.load()
    return again


def test_bad_journal_ids_are_refused(tmp_path: Path) -> None:
    for bad in ("", "../x", "a/b", "x" * 65, "nn\x00"):
        with pytest.raises(InvalidArgument):
            Journal(tmp_path / "j", bad)
        with pytest.raises(InvalidArgument):
            j.check_journal_id(bad)


def test_an_unformatted_journal_refuses_writers(tmp_path: Path) -> None:
    jn = Journal(tmp_path / "nn", "nn")
    jn.load()
    assert not jn.state().formatted
    with pytest.raises(NotFormatted):
        jn.new_epoch(NS, 1)


def test_another_namespace_is_refused(journal: Journal) -> None:
    with pytest.raises(WrongCluster):
        journal.new_epoch(j.JournalNamespace("CID-other", 7), 1)


def test_format_refuses_a_journal_with_edits_unless_forced(journal: Journal) -> None:
    writing(journal).journal(req(1), 1, 1, 2, records(1, 2))
    with pytest.raises(InvalidArgument, match="holds edits"):
        journal.format(NS, force=False)
    journal.format(NS, force=True)
    assert journal.state() == j.JournalState(True, NS, 0, 0, 0, 0)


def test_epochs_only_go_up_and_a_stale_writer_changes_nothing(journal: Journal) -> None:
    writing(journal, epoch=2).journal(req(2), 1, 1, 2, records(1, 2))
    with pytest.raises(Fenced):
        journal.new_epoch(NS, 2)
    journal.new_epoch(NS, 3)
    before = files(journal)
    for call in (
        lambda: journal.journal(req(2), 1, 3, 1, records(3, 1)),
        lambda: journal.journal(req(1), 1, 3, 1, records(3, 1)),
        lambda: journal.start_log_segment(req(2), 3, LAYOUT),
        lambda: journal.finalize(req(2), 1, 2),
        lambda: journal.heartbeat(req(2)),
        lambda: journal.purge(req(2), 10),
        lambda: journal.prepare_recovery(req(2), 1),
    ):
        with pytest.raises(Fenced):
            call()
    assert files(journal) == before
    assert reloaded(journal).promised_epoch == 3


@pytest.mark.parametrize(
    ("first", "data", "count", "error"),
    [
        (4, records(4, 1), 1, JournalOutOfSync),  # a gap (3 is missing)
        (2, records(2, 1), 1, JournalOutOfSync),  # an overlap
        (3, records(4, 1), 1, JournalOutOfSync),  # txids not the ones announced
        (3, records(3, 2)[::-1], 2, InvalidArgument),  # garbage
        (3, records(3, 1) + b"x", 1, InvalidArgument),  # bytes after the batch
        (3, records(3, 1)[:-1] + b"\x00", 1, InvalidArgument),  # a bad crc
        (3, records(3, 1), 0, InvalidArgument),
    ],
)
def test_bad_batches_are_refused_and_write_nothing(
    journal: Journal, first: int, data: bytes, count: int, error: type[Exception]
) -> None:
    writing(journal).journal(req(1), 1, 1, 2, records(1, 2))
    before = files(journal)
    with pytest.raises(error):
        journal.journal(req(1), 1, first, count, data)
    assert files(journal) == before
    journal.journal(req(1), 1, 3, 1, records(3, 1))  # the right next batch still goes in


def test_records_survive_a_restart_and_a_torn_tail_is_cut(journal: Journal) -> None:
    writing(journal).journal(req(1, committed=0), 1, 1, 3, records(1, 3))
    path = journal.current / "edits_inprogress_0000000000000000001"
    with open(path, "ab") as f:
        f.write(records(4, 1)[:7])  # a write the crash cut short (never acknowledged)
    again = reloaded(journal)
    assert again.last_txid == 3
    assert again.prepare_recovery(req(1), 1).segment == j.SegmentState(1, 3, True)


def test_finalize_checks_the_end_and_is_idempotent(journal: Journal) -> None:
    writing(journal).journal(req(1), 1, 1, 3, records(1, 3))
    with pytest.raises(JournalOutOfSync, match="holds txids up to 3"):
        journal.finalize(req(1), 1, 5)
    journal.finalize(req(1), 1, 3)
    journal.finalize(req(1), 1, 3)
    assert [s for s in journal.manifest(0, in_progress_ok=True).segments] == [
        j.SegmentState(1, 3, False)
    ]


def test_a_corrupt_finalized_segment_is_named_with_file_and_offset(journal: Journal) -> None:
    writing(journal).journal(req(1), 1, 1, 3, records(1, 3))
    journal.finalize(req(1), 1, 3)
    path = journal.current / "edits_0000000000000000001-0000000000000000003"
    data = bytearray(path.read_bytes())
    data[40] ^= 0xFF
    path.write_bytes(bytes(data))
    again = reloaded(journal)
    with pytest.raises(StorageError, match=rf"{path.name} at byte offset \d+"):
        again.read(1, 3, 1 << 20, 0)


def test_tailing_readers_see_committed_records_of_the_open_segment_only(
    journal: Journal,
) -> None:
    writing(journal).journal(req(1), 1, 1, 3, records(1, 3))
    assert journal.read(1, 10, 1 << 20, 0).count == 0  # nothing committed yet
    journal.heartbeat(req(1, committed=2))
    assert journal.read(1, 10, 1 << 20, 0).count == 2
    assert journal.read(1, 10, 1 << 20, 1).count == 3  # the writer sees everything
    again = reloaded(journal)  # no open segment after a restart: nothing for tailers
    assert again.read(1, 10, 1 << 20, 0).count == 0
    answer = again.read(1, 10, 30, again.promised_epoch)
    assert answer.count == 1 and answer.records == records(1, 1)  # at least one record


def test_an_older_writers_in_progress_segment_is_moved_aside_not_deleted(
    journal: Journal,
) -> None:
    writing(journal, epoch=1).journal(req(1), 1, 1, 3, records(1, 3))
    journal.new_epoch(NS, 2)  # the newer writer recovered elsewhere up to 1
    journal.start_log_segment(req(2), 2, LAYOUT)
    names = files(journal)
    assert "edits_inprogress_0000000000000000001.stale" in names
    assert "edits_inprogress_0000000000000000002" in names


def test_a_lagging_prefix_of_the_same_writer_is_finalized_at_its_own_end(
    journal: Journal,
) -> None:
    writing(journal).journal(req(1), 1, 1, 2, records(1, 2))
    journal.start_log_segment(req(1), 6, LAYOUT)  # it missed 3-5, the others have them
    assert journal.manifest(0, in_progress_ok=True).segments == [j.SegmentState(1, 2, False)]
    journal.journal(req(1), 6, 6, 1, records(6, 1))
    assert journal.manifest(3, in_progress_ok=True).segments == [j.SegmentState(6, 6, True)]


def test_a_segment_cannot_start_inside_stored_txids(journal: Journal) -> None:
    writing(journal).journal(req(1), 1, 1, 3, records(1, 3))
    journal.finalize(req(1), 1, 3)
    with pytest.raises(JournalOutOfSync, match="overlap"):
        journal.start_log_segment(req(1), 2, LAYOUT)


def test_recovery_never_drops_committed_txids(journal: Journal) -> None:
    writing(journal).journal(req(1, committed=3), 1, 1, 3, records(1, 3))
    journal.new_epoch(NS, 2)
    with pytest.raises(InvalidArgument, match="committed"):
        journal.accept_recovery(req(2), j.SegmentState(1, 2, False), LAYOUT, records(1, 2))
    journal.accept_recovery(req(2), j.SegmentState(1, 3, False), LAYOUT, records(1, 3))
    answer = journal.prepare_recovery(req(2), 1)
    assert (answer.segment, answer.accepted_epoch) == (j.SegmentState(1, 3, True), 2)


def test_purge_keeps_what_is_in_progress(journal: Journal) -> None:
    writing(journal).journal(req(1), 1, 1, 3, records(1, 3))
    journal.finalize(req(1), 1, 3)
    journal.start_log_segment(req(1), 4, LAYOUT)
    journal.journal(req(1), 4, 4, 1, records(4, 1))
    assert journal.purge(req(1), 10) == 1
    assert journal.manifest(0, in_progress_ok=True).segments == [j.SegmentState(4, 4, True)]


def test_a_writer_that_started_no_segment_here_is_out_of_sync_not_fenced(
    journal: Journal,
) -> None:
    """A node that joined late (formatted, or back from a crash) gets batches of the
    current writer before its next segment start: out of sync for now, never a fence."""
    writing(journal, epoch=1).journal(req(1), 1, 1, 2, records(1, 2))
    journal.new_epoch(NS, 2)
    with pytest.raises(JournalOutOfSync, match="started no segment here"):
        journal.journal(req(2), 1, 3, 1, records(3, 1))
    with pytest.raises(JournalOutOfSync):
        journal.heartbeat(req(2))
