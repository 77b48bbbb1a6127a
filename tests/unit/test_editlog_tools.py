"""``xdfs oev`` logic: dump_edits and edits_stats over files and directories."""

from __future__ import annotations

from pathlib import Path

import pytest

from xdfs.editlog.segments import segment_name
from xdfs.errors import StorageError
from xdfs.namenode.editlog.editlog import EditLog
from xdfs.namenode.image.storage import StorageDirectory
from xdfs.namenode.namespace.ops import AddBlockOp, AddUserOp, MkdirOp, Op
from xdfs.namenode.tools import dump_edits, edits_stats
from xdfs.protocol.blocks import BlockRecord

OPS: list[Op] = [
    MkdirOp("/a", 2, 0o755, "alice", "staff", 1),
    MkdirOp("/b", 3, 0o755, "alice", "staff", 2),
    AddBlockOp("/a/f", BlockRecord(7, 1001, 0)),
    AddUserOp("bob", b"\x01\x02", b"\xff", ("staff",), 5),
]


@pytest.fixture
async def name_dir(tmp_path: Path) -> StorageDirectory:
    sd = StorageDirectory(tmp_path / "nn")
    sd.format("CID", 1, 1)
    log = EditLog.for_storage([sd])
    await log.open_for_write(1)
    for op in OPS[:2]:
        log.append(op)
    await log.roll()
    for op in OPS[2:]:
        log.append(op)
    await log.sync()
    for journal in log.journals:  # leave the second segment in progress
        await journal.close()
    return sd


def test_dump_edits_of_a_directory(name_dir: StorageDirectory) -> None:
    rows = list(dump_edits(name_dir.root))
    assert rows == [
        {"txid": 1, "op": "mkdir", "path": "/a", "inode_id": 2, "mode": 0o755,
         "owner": "alice", "group": "staff", "mtime_ms": 1},
        {"txid": 2, "op": "mkdir", "path": "/b", "inode_id": 3, "mode": 0o755,
         "owner": "alice", "group": "staff", "mtime_ms": 2},
        {"txid": 3, "op": "add_block", "path": "/a/f",
         "block": {"block_id": 7, "genstamp": 1001, "bytes": 0}},
        {"txid": 4, "op": "add_user", "name": "bob", "password_hash": "0102", "salt": "ff",
         "groups": ["staff"], "created_ms": 5, "stored_key": "", "server_key": "",
         "iterations": 0},
    ]
    assert list(dump_edits(name_dir.current)) == rows


def test_dump_edits_of_one_file(name_dir: StorageDirectory) -> None:
    rows = list(dump_edits(name_dir.current / segment_name(3)))
    assert [r["txid"] for r in rows] == [3, 4]
    copy = name_dir.root / "copy.bin"  # any name: the header gives the start
    copy.write_bytes((name_dir.current / segment_name(1, 2)).read_bytes())
    assert [r["txid"] for r in dump_edits(copy)] == [1, 2]


def test_edits_stats(name_dir: StorageDirectory) -> None:
    assert edits_stats(name_dir.root) == {"add_block": 1, "add_user": 1, "mkdir": 2}


def test_torn_tail_ends_the_dump_quietly(name_dir: StorageDirectory) -> None:
    path = name_dir.current / segment_name(3)
    data = path.read_bytes().rstrip(b"\0")  # the records, without the zeros written ahead
    path.write_bytes(data[:-3])
    assert [r["txid"] for r in dump_edits(name_dir.root)] == [1, 2, 3]
    assert path.read_bytes() == data[:-3]  # read-only: nothing truncated


def test_corruption_is_reported(name_dir: StorageDirectory) -> None:
    path = name_dir.current / segment_name(1, 2)
    data = bytearray(path.read_bytes())
    data[25] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(StorageError, match=rf"{path.name} at byte offset 20"):
        list(dump_edits(name_dir.root))
