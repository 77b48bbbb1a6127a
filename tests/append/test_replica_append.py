"""A DataNode's replica continued by an append (``ReplicaWriter.reopen``), on disk without
threads: the checksums go on from the partial last chunk, readers see the part written
before while it grows, and a crash at any point keeps every byte it had."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.test_dn_storage import CHUNK, open_storage, store
from xdfs.datanode.replica import Replica, ReplicaReader, ReplicaWriter
from xdfs.datanode.storage import DataStorage
from xdfs.errors import CorruptReplica

BLOCK = 1 << 30


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[DataStorage]:
    s = open_storage(tmp_path / "dn")
    yield s
    s.close()


def _read(replica: Replica) -> bytes:
    reader = ReplicaReader(replica, 0, replica.num_bytes, 1 << 20)
    try:
        out = b""
        while (piece := reader.read_piece()) is not None:
            out += bytes(piece)
        return out
    finally:
        reader.close()


def _reopen(storage: DataStorage, genstamp: int) -> tuple[ReplicaWriter, Replica]:
    old = storage.get(BLOCK)
    assert old is not None
    storage.claim(BLOCK)
    writer = storage.new_writer(BLOCK, genstamp)
    visible = writer.reopen(old, writer.prepare_reopen(old))
    writer.sync_reopened(old.data_path.parent)
    storage.add(visible)
    return writer, visible


@pytest.mark.parametrize("first", [CHUNK * 2, CHUNK * 2 + 100, 7])
@pytest.mark.parametrize("genstamp", [1000, 1001])  # an hflush's continuation, an append
def test_append_continues_checksums_and_finalizes(
    storage: DataStorage, first: int, genstamp: int
) -> None:
    data = random.Random(first).randbytes(first + 3 * CHUNK + 55)
    store(storage, BLOCK, 1000, data[:first])
    writer, visible = _reopen(storage, genstamp)
    writer.write(data[first : first + 10])
    assert _read(visible) == data[:first]  # readers see the part written before
    writer.write(data[first + 10 :])
    assert _read(visible) == data[:first]
    replica = writer.move_appended(storage.finish_append(writer))
    storage.add(replica)
    writer.sync_appended()
    storage.release(BLOCK)
    assert replica.record.genstamp == genstamp and replica.finalized
    assert _read(replica) == data
    metas = list(storage.finalized.glob("subdir*/subdir*/*.meta"))
    assert [m.name for m in metas] == [f"blk_{BLOCK}_{genstamp}.meta"]  # old one gone
    storage.close()
    again = open_storage(storage.root)
    reloaded = again.get(BLOCK)
    assert reloaded is not None and reloaded.record == replica.record
    again.close()


@pytest.mark.parametrize("written", [0, 10, CHUNK, 3 * CHUNK + 1])
def test_a_crash_mid_append_keeps_every_byte_it_had(
    storage: DataStorage, written: int
) -> None:
    first = CHUNK + 300  # a partial last chunk whose CRC the append rewrites
    data = random.Random(written).randbytes(first + written)
    store(storage, BLOCK, 1000, data[:first])
    writer, _visible = _reopen(storage, 1001)
    writer.write(data[first:])
    writer._close()  # kill -9: no checksum of the last chunk written, nothing finalized
    storage.close()
    again = open_storage(storage.root)
    try:
        replica = again.get(BLOCK)
        assert replica is not None and not replica.finalized and replica.genstamp == 1001
        assert first <= replica.num_bytes <= len(data)
        assert _read(replica) == data[: replica.num_bytes]
        assert not list(again.finalized.glob("subdir*/subdir*/blk_*"))  # old meta dropped
    finally:
        again.close()


def test_reopen_refuses_a_damaged_last_chunk(storage: DataStorage) -> None:
    store(storage, BLOCK, 1000, b"x" * (CHUNK + 10))
    old = storage.get(BLOCK)
    assert old is not None
    with open(old.data_path, "r+b") as f:
        f.seek(CHUNK + 5)
        f.write(b"y")
    storage.claim(BLOCK)
    writer = storage.new_writer(BLOCK, 1001)
    with pytest.raises(CorruptReplica):
        writer.prepare_reopen(old)
    assert os.path.exists(old.data_path)  # nothing moved
    assert not writer.meta_path.exists()
