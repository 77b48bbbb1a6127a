"""The NameNode's edits log: record framing, the double buffer with group commit, segment
files, and the asyncio :class:`EditLog` that ties them together.

Modules: :mod:`.records` (framing, pure), :mod:`.buffer` (double buffer and group-commit
bookkeeping, pure), :mod:`.segments` (segment names, validating reader, FileJournal),
:mod:`.editlog` (the driver and the read side).
"""

from __future__ import annotations

from xdfs.namenode.editlog.buffer import DoubleBuffer, FlushBatch
from xdfs.namenode.editlog.editlog import EditLog, EditLogSettings, Journal, read_edits
from xdfs.namenode.editlog.records import encode_record, frame_record, parse_frame
from xdfs.namenode.editlog.segments import (
    FileJournal,
    SegmentInfo,
    SegmentReader,
    parse_segment_name,
    segment_index,
    segment_name,
)
from xdfs.namenode.storage import FAULTS, fault_point

__all__ = [
    "FAULTS",
    "DoubleBuffer",
    "EditLog",
    "EditLogSettings",
    "FileJournal",
    "FlushBatch",
    "Journal",
    "SegmentInfo",
    "SegmentReader",
    "encode_record",
    "fault_point",
    "frame_record",
    "parse_frame",
    "parse_segment_name",
    "read_edits",
    "segment_index",
    "segment_name",
]
