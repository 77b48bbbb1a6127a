"""Record framing (pure): layout, round trip of every op, and every corruption case."""

from __future__ import annotations

import struct

import crc32c
import pytest

from xdfs.editlog.framing import (
    CRC_BYTES,
    LENGTH_MIN,
    RECORD_BYTES_MAX,
    RECORD_HEAD_BYTES,
    SEGMENT_HEADER_BYTES,
    Frame,
    FrameProblem,
    Problem,
    SegmentHeader,
    decode_segment_header,
    encode_segment_header,
    frame_record,
    is_zero_fill,
    parse_frame,
)
from xdfs.editlog.segments import parse_segment_name, segment_name
from xdfs.namenode.editlog.codec import decode_frame, decode_payload, encode_record
from xdfs.namenode.namespace.ops import (
    LAYOUT_VERSION,
    AddBlockOp,
    AddFileOp,
    AddTokenKeyOp,
    AddUserOp,
    CloseFileOp,
    DeleteOp,
    MkdirOp,
    Op,
    ReassignLeaseOp,
    RemoveTokenKeyOp,
    RemoveUserOp,
    RenameOp,
    SetOwnerOp,
    SetPasswordOp,
    SetPermissionOp,
    SetReplicationOp,
    SetTimesOp,
    UpdateBlocksOp,
    encode_op,
)
from xdfs.protocol.blocks import BlockRecord

B = BlockRecord(1 << 30, 1001, 4096)
SAMPLES: list[Op] = [
    MkdirOp("/a", 2, 0o755, "alice", "staff", 1),
    AddFileOp("/a/f", 3, 0o644, "alice", "staff", 2, 3, 1 << 26, "c1", overwrite=True),
    AddBlockOp("/a/f", B),
    UpdateBlocksOp("/a/f", (B, BlockRecord(2, 3, 4))),
    CloseFileOp("/a/f", 5, 6, (B,)),
    DeleteOp("/a/f", 7),
    RenameOp("/a", "/b", 8),
    SetPermissionOp("/b", 0o700),
    SetOwnerOp("/b", "bob", ""),
    SetReplicationOp("/b/f", 2),
    SetTimesOp("/b", -1, 9),
    ReassignLeaseOp("/b/f", "c2"),
    AddUserOp("bob", b"\x00hash", b"salt", ("g1", "g2"), 10),
    RemoveUserOp("bob"),
    SetPasswordOp("bob", b"h", b"s"),
    AddTokenKeyOp(1, b"k" * 32, 11),
    RemoveTokenKeyOp(1),
]


def test_layout_is_exactly_as_documented() -> None:
    op = MkdirOp("/x", 2, 0o755, "u", "g", 1)
    payload = encode_op(op)
    record = encode_record(77, op)
    assert len(record) == 4 + 1 + 8 + len(payload) + 4
    length, opcode, txid = struct.unpack_from(">IBQ", record)
    assert (length, opcode, txid) == (1 + 8 + len(payload), MkdirOp.OPCODE, 77)
    assert record[13:-4] == payload
    (crc,) = struct.unpack(">I", record[-4:])
    assert crc == crc32c.crc32c(record[4:-4])


@pytest.mark.parametrize("op", SAMPLES, ids=lambda op: op.NAME)
def test_every_op_round_trips(op: Op) -> None:
    record = encode_record(123456789012, op)
    frame = parse_frame(record, 0)
    assert isinstance(frame, Frame)
    assert (frame.offset, frame.txid, frame.opcode, frame.end) == (
        0, 123456789012, op.OPCODE, len(record))
    assert decode_frame(record, frame) == op
    # also inside a bigger buffer, at an offset, as bytearray and memoryview
    buf = bytearray(b"xx" + record + b"yy")
    for data in (buf, memoryview(buf), bytes(buf)):
        frame = parse_frame(data, 2)
        assert isinstance(frame, Frame) and decode_frame(data, frame) == op


def test_short_at_every_cut() -> None:
    record = encode_record(5, SAMPLES[1])
    for cut in range(len(record)):
        result = parse_frame(record[:cut], 0)
        assert isinstance(result, FrameProblem), cut
        assert result.problem is Problem.SHORT, cut
        assert result.offset == 0
        if cut >= RECORD_HEAD_BYTES:
            assert result.claimed_end == len(record)


def test_crc_mismatch_on_any_flipped_byte_after_length() -> None:
    record = encode_record(5, SAMPLES[0])
    for i in range(4, len(record)):
        bad = bytearray(record)
        bad[i] ^= 0x40
        result = parse_frame(bytes(bad), 0)
        assert isinstance(result, FrameProblem), i
        assert result.problem is Problem.BAD_CRC, i
        assert result.claimed_end == len(record)


def test_flipped_length_is_bad_length_or_short_or_crc() -> None:
    record = encode_record(5, SAMPLES[0])
    for i in range(4):
        for bit in range(8):
            bad = bytearray(record)
            bad[i] ^= 1 << bit
            result = parse_frame(bytes(bad), 0)
            assert isinstance(result, FrameProblem)
            assert result.problem in (Problem.BAD_LENGTH, Problem.SHORT, Problem.BAD_CRC)


def test_bad_lengths() -> None:
    for length in (0, LENGTH_MIN - 1, RECORD_BYTES_MAX + 1):
        data = struct.pack(">IBQ", length, 1, 1) + b"\0" * 64
        result = parse_frame(data, 0)
        assert isinstance(result, FrameProblem) and result.problem is Problem.BAD_LENGTH


def test_empty_payload_is_a_valid_frame_but_not_an_op() -> None:
    record = frame_record(1, 9, b"")
    assert len(record) == RECORD_HEAD_BYTES + CRC_BYTES
    frame = parse_frame(record, 0)
    assert isinstance(frame, Frame)
    with pytest.raises(ValueError, match="bad payload"):
        decode_frame(record, frame)


def test_unknown_opcode_and_wrong_payload() -> None:
    with pytest.raises(ValueError, match="unknown opcode 99"):
        decode_payload(99, encode_op(SAMPLES[0]))
    with pytest.raises(ValueError, match="opcode 2: bad payload"):
        decode_payload(AddFileOp.OPCODE, encode_op(SAMPLES[0]))  # a mkdir payload


def test_segment_header() -> None:
    head = encode_segment_header(1234, LAYOUT_VERSION)
    assert len(head) == SEGMENT_HEADER_BYTES == 20
    assert head[:8] == b"XDFSEDIT"
    assert decode_segment_header(head, LAYOUT_VERSION) == SegmentHeader(LAYOUT_VERSION, 1234)
    assert "short" in str(decode_segment_header(head[:10], LAYOUT_VERSION))
    assert "magic" in str(decode_segment_header(b"XDFSEDIX" + head[8:], LAYOUT_VERSION))
    other = encode_segment_header(1, 99)
    assert "layout version 99" in str(decode_segment_header(other, LAYOUT_VERSION))
    assert decode_segment_header(other, None) == SegmentHeader(99, 1)  # the caller decides


def test_zero_fill() -> None:
    assert is_zero_fill(b"abc\0\0\0", 3)
    assert is_zero_fill(b"abc", 3)
    assert not is_zero_fill(b"abc\0\0\1", 3)


def test_segment_names() -> None:
    assert segment_name(1) == "edits_inprogress_0000000000000000001"
    assert segment_name(1, 20) == "edits_0000000000000000001-0000000000000000020"
    assert parse_segment_name(segment_name(3619794209, 3619813881)) == (3619794209, 3619813881)
    assert parse_segment_name(segment_name(3620060870)) == (3620060870, None)
    for bad in ("edits_1-2", "edits_inprogress_1", "edits_0000000000000000005-"
                "0000000000000000004", "fsimage_0000000000000000001", "edits_inprogress_"
                "0000000000000000001.tmp", "seen_txid"):
        assert parse_segment_name(bad) is None, bad
