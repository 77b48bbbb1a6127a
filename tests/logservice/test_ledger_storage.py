"""Ledger storage on a storage node: durable adds in order, fencing, recovery adds, reads,
a torn tail cut at load, and hostile input refused with typed errors (directly and over
RPC, where only callers with the secret get in)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.logservice.conftest import Storage
from xdfs.config import XdfsConfig
from xdfs.errors import (
    AuthenticationFailed,
    InvalidArgument,
    LedgerFenced,
    LedgerOutOfOrder,
    Unavailable,
)
from xdfs.ledger.storage import LedgerStore
from xdfs.log.nodes import NodePool, frame_entries
from xdfs.protocol import ledger as lp
from xdfs.rpc.messages import PROTOCOL_VERSION, Hello


def add(ledger_id: int, first: int, *payloads: bytes, recovery: bool = False
        ) -> lp.AddEntriesRequest:
    frames, count = frame_entries(first, payloads)
    return lp.AddEntriesRequest(ledger_id, first, count, frames, first - 1, recovery)


def read(store: LedgerStore, ledger_id: int, first: int, count: int = 100,
         max_bytes: int = 1 << 20) -> lp.ReadEntriesResponse:
    return store.read(lp.ReadEntriesRequest(ledger_id, first, count, max_bytes))


def test_entries_are_kept_in_order_and_survive_a_reload(tmp_path: Path) -> None:
    store = LedgerStore(tmp_path)
    store.load()
    assert store.add(add(7, 0, b"a", b"b")) == 1
    assert store.add(add(7, 2, b"c")) == 2
    with pytest.raises(LedgerOutOfOrder):
        store.add(add(7, 5, b"gap"))
    with pytest.raises(LedgerOutOfOrder):
        store.add(add(7, 1, b"again"))  # a plain add never rewrites
    again = LedgerStore(tmp_path)
    again.load()
    assert again.state(7) == lp.LedgerState(True, 0, 2, -1, False)
    got = read(again, 7, 1)
    assert got.count == 2 and got.last_entry == 2
    assert read(again, 7, 0, max_bytes=1).count == 1  # at least one, then what fits
    assert read(again, 7, 3).count == 0


def test_a_node_that_joined_later_holds_a_suffix(tmp_path: Path) -> None:
    store = LedgerStore(tmp_path)
    store.load()
    store.add(add(3, 40, b"x"))
    assert store.state(3).first_entry == 40 and read(store, 3, 39).count == 0


def test_fencing_stops_plain_adds_but_not_recovery_and_survives_a_reload(
        tmp_path: Path) -> None:
    store = LedgerStore(tmp_path)
    store.load()
    store.add(add(1, 0, b"a"))
    assert store.fence(1).fenced
    assert store.fence(9).fenced  # a ledger this node never saw: no add may come later
    with pytest.raises(LedgerFenced):
        store.add(add(1, 1, b"late"))
    with pytest.raises(LedgerFenced):
        store.add(add(9, 0, b"late"))
    assert store.add(add(1, 0, b"a", b"b", recovery=True)) == 1  # resent prefix skipped
    again = LedgerStore(tmp_path)
    again.load()
    assert again.state(1).fenced and again.state(9).fenced
    with pytest.raises(LedgerFenced):
        again.add(add(9, 0, b"late"))


def test_a_torn_tail_is_cut_at_load(tmp_path: Path) -> None:
    store = LedgerStore(tmp_path)
    store.load()
    store.add(add(2, 0, b"kept", b"kept too"))
    path = next(tmp_path.glob("*.ledger"))
    size = path.stat().st_size
    with open(path, "ab") as f:
        f.write(add(2, 2, b"torn").entries[:-3])  # a crash inside the write
    again = LedgerStore(tmp_path)
    again.load()
    assert again.state(2).last_entry == 1 and path.stat().st_size == size
    assert again.add(add(2, 2, b"next")) == 2


@pytest.mark.parametrize("request_", [
    lp.AddEntriesRequest(1, 0, 1, b"garbage", -1),
    lp.AddEntriesRequest(1, 0, 2, add(1, 0, b"only one").entries, -1),
    lp.AddEntriesRequest(1, 0, 1, add(1, 0, b"x").entries + b"tail", -1),
    lp.AddEntriesRequest(1, 0, 1, add(1, 5, b"wrong id").entries, -1),
    lp.AddEntriesRequest(0, 0, 1, add(0, 0, b"x").entries, -1),
    lp.AddEntriesRequest(-5, 0, 1, add(1, 0, b"x").entries, -1),
    lp.AddEntriesRequest(1, 0, 0, b"", -1),
])
def test_hostile_adds_are_refused_and_change_nothing(tmp_path: Path,
                                                     request_: lp.AddEntriesRequest) -> None:
    store = LedgerStore(tmp_path)
    store.load()
    with pytest.raises(InvalidArgument):
        store.add(request_)
    assert store.ledger_ids() == [] and list(tmp_path.glob("*.ledger")) == []


def test_delete_removes_entries_and_fence(tmp_path: Path) -> None:
    store = LedgerStore(tmp_path)
    store.load()
    store.add(add(4, 0, b"a"))
    store.fence(4)
    store.delete(4)
    store.delete(4)  # idempotent
    assert not store.state(4).exists and list(tmp_path.iterdir()) == []


async def test_storage_nodes_refuse_intruders_and_hostile_requests(storage: Storage) -> None:
    intruder = NodePool(XdfsConfig().rpc, Hello(PROTOCOL_VERSION, user="journal",
                                                password="0" * 64), 5.0)
    with pytest.raises((AuthenticationFailed, Unavailable)):
        await intruder.node(storage.addresses[0]).call(lp.LEDGER_STATE, lp.LedgerIdRequest(1))
    await intruder.close()
    pool = NodePool(XdfsConfig().rpc, storage.hello(), 5.0)
    node = pool.node(storage.addresses[0])
    with pytest.raises(InvalidArgument):
        await node.call(lp.LEDGER_STATE, lp.LedgerIdRequest(0))
    with pytest.raises(InvalidArgument):
        await node.call(lp.ADD_ENTRIES, lp.AddEntriesRequest(1, 0, 1, b"\x00" * 50, -1))
    with pytest.raises(InvalidArgument):
        await node.call(lp.READ_ENTRIES, lp.ReadEntriesRequest(1, -1, 0, 0))
    # the node still serves afterwards
    assert await node.add(add(1, 0, b"fine"), 5.0) == 0
    await pool.close()
