"""A local in-progress segment against the shared journal (namenode/editlog/shared.py):
kept only as far as the journal holds the same records, byte for byte; a txid the journal
does not serve yet is not verified, so the records from it are cut (to be tailed again),
never a startup failure."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from xdfs.editlog.framing import encode_segment_header
from xdfs.editlog.segments import segment_name
from xdfs.namenode.editlog.codec import encode_record
from xdfs.namenode.editlog.shared import agreed_txid, trim_to_journal
from xdfs.namenode.namespace.ops import LAYOUT_VERSION, MkdirOp
from xdfs.protocol import journal as j
from xdfs.quorum.channel import JournalChannel


def _record(txid: int, path: str) -> bytes:
    return encode_record(txid, MkdirOp(path, inode_id=100 + txid, mode=0o755, owner="root",
                                       group="supergroup", mtime_ms=txid))


def _segment(current: Path, paths: list[str]) -> Path:
    path = current / segment_name(1)
    path.write_bytes(encode_segment_header(1, LAYOUT_VERSION)
                     + b"".join(_record(i + 1, p) for i, p in enumerate(paths)))
    return path


class Journal:
    """One JournalNode serving committed records ``1..len(paths)``."""

    name = "jn"

    def __init__(self, paths: list[str]) -> None:
        self.records = [_record(i + 1, p) for i, p in enumerate(paths)]

    async def get_journaled_edits(self, req: j.ReadEditsRequest) -> j.ReadEditsResponse:
        served = self.records[req.from_txid - 1:req.from_txid - 1 + req.max_txns]
        return j.ReadEditsResponse(req.from_txid, len(served), b"".join(served),
                                   len(self.records), LAYOUT_VERSION)


def _channels(*journals: Any) -> list[JournalChannel]:
    return cast(list[JournalChannel], list(journals))


async def test_the_segment_is_cut_at_the_first_record_the_journal_holds_otherwise(
    tmp_path: Path,
) -> None:
    path = _segment(tmp_path, ["/a", "/b", "/mine", "/mine2"])
    journal = Journal(["/a", "/b", "/theirs", "/theirs2", "/theirs3"])
    assert await agreed_txid(path, 1, 5, _channels(journal), "ns1") == 2
    await trim_to_journal(path, 1, 5, _channels(journal), "ns1")
    assert path.read_bytes() == encode_segment_header(1, LAYOUT_VERSION) + b"".join(
        journal.records[:2])
    unacked = path.with_name(path.name + ".unacked")
    assert unacked.read_bytes() == _record(3, "/mine") + _record(4, "/mine2")


async def test_a_journal_that_does_not_serve_the_txids_yet_cuts_without_failing(
    tmp_path: Path,
) -> None:
    path = _segment(tmp_path, ["/a", "/b"])
    assert await agreed_txid(path, 1, 2, _channels(Journal(["/a"])), "ns1") == 1
    assert await agreed_txid(path, 1, 2, _channels(), "ns1") == 0
    await trim_to_journal(path, 1, 2, _channels(), "ns1")
    assert not path.exists()
    assert path.with_name(path.name + ".unacked").exists()
    # a second cut of a segment with the same name never overwrites the first one's bytes
    path = _segment(tmp_path, ["/c"])
    await trim_to_journal(path, 1, 1, _channels(), "ns1")
    assert path.with_name(path.name + ".unacked.1").exists()
