"""The log engine on real storage nodes and a real ZooKeeper: appends, reads, rotation,
fencing of an old writer, ensemble change, recovery, truncation and reclamation."""

from __future__ import annotations

import asyncio

import pytest

from tests.logservice.conftest import SMALL, EngineFactory, Storage, read_everything
from xdfs.errors import (
    LogExists,
    LogFenced,
    LogNotFound,
    LsnOutOfRange,
    NotLogWriter,
)
from xdfs.protocol.log import Lsn, Record


def rec(text: str) -> Record:
    return Record(text.encode(), key=b"k", headers=(("h", b"v"),))


async def test_appends_are_read_back_in_lsn_order_across_rotations(
        engines: EngineFactory) -> None:
    engine = await engines()
    await engine.create("orders", SMALL, 0)
    with pytest.raises(LogExists):
        await engine.create("orders", SMALL, 0)
    lsns = [await engine.append_batch("orders", [rec(f"r{i}")]) for i in range(120)]
    batch = await engine.append_batch("orders", [rec("b0"), rec("b1"), rec("b2")])
    flat = [x[0] for x in lsns] + batch
    assert flat == sorted(flat) and len(set(flat)) == len(flat)
    assert [x.batch_index for x in batch] == [0, 1, 2]
    meta, end = await engine.stat("orders")
    assert len(meta.ledgers) >= 3  # 50 entries a ledger
    got = await read_everything(engine, "orders")
    assert [p for _, p in got] == [f"r{i}".encode() for i in range(120)] + [b"b0", b"b1", b"b2"]
    assert [lsn for lsn, _ in got] == flat
    # reading from the middle of a batch, and in small pieces
    records, following = await engine.read("orders", batch[1], 1)
    assert [r.lsn for r in records] == [batch[1]] and following == batch[2]
    with pytest.raises(LsnOutOfRange):
        await engine.read("orders", Lsn(end.ledger_id, end.entry_id + 5, 0), 100)
    with pytest.raises(LogNotFound):
        await engine.append_batch("nope", [rec("x")])


async def test_a_second_writer_fences_the_first(engines: EngineFactory) -> None:
    first = await engines("instance-1")
    second = await engines("instance-2")
    await first.create("l", SMALL, 0)
    acked = [await first.append_batch("l", [rec(f"a{i}")]) for i in range(10)]
    with pytest.raises(NotLogWriter) as info:
        await second.append_batch("l", [rec("x")])
    assert info.value.holder == "instance-1"
    # instance-1 "dies": its lock goes with its session; instance-2 takes over
    first.store.zk.stop()
    taken = await second.append_batch("l", [rec("b0")])
    with pytest.raises(LogFenced):
        await first.writers["l"].append_batch([rec("stale")])
    got = await read_everything(second, "l")
    assert [p for _, p in got] == [f"a{i}".encode() for i in range(10)] + [b"b0"]
    assert [lsn for lsn, _ in got][:10] == [a[0] for a in acked]
    assert got[-1][0] == taken[0] > acked[-1][0]


async def test_appends_go_on_when_a_storage_node_fails(
        engines: EngineFactory, storage: Storage) -> None:
    engine = await engines(nodes=storage.addresses[:3], add_timeout_s=3.0)
    await engine.create("l", SMALL, 0)
    await engine.append_batch("l", [rec("before")])
    victim = engine.writers["l"].write_set[0]
    await storage.stop(storage.addresses.index(victim))
    after = [await engine.append_batch("l", [rec(f"after{i}")]) for i in range(60)]
    assert len(after) == 60
    got = await read_everything(engine, "l")
    assert [p for _, p in got] == [b"before"] + [f"after{i}".encode() for i in range(60)]


async def test_ensemble_change_takes_a_spare_node(
        engines: EngineFactory, storage: Storage) -> None:
    engine = await engines(add_timeout_s=3.0)
    await engine.create("l", SMALL, 0)
    await engine.append_batch("l", [rec("x")])
    writer = engine.writers["l"]
    victim = writer.write_set[1]
    await storage.stop(storage.addresses.index(victim))
    for i in range(5):
        await engine.append_batch("l", [rec(f"y{i}")])
    for _ in range(100):
        if victim not in writer.write_set:
            break
        await asyncio.sleep(0.05)
    assert victim not in writer.write_set and len(writer.write_set) == 3
    meta, _ = await engine.stat("l")
    assert len(meta.ledgers[-1].fragments) == 2
    got = await read_everything(engine, "l")
    assert [p for _, p in got] == [b"x"] + [f"y{i}".encode() for i in range(5)]


async def test_truncation_and_reclamation_respect_readers(engines: EngineFactory) -> None:
    engine = await engines()
    await engine.create("l", SMALL, 0)
    lsns = [(await engine.append_batch("l", [rec(f"r{i}")]))[0] for i in range(160)]
    await engine.register_reader("l", "slow", lsns[10])
    assert await engine.truncate("l", lsns[130]) == lsns[130]
    assert await engine.reclaim("l") == []  # the slow reader needs ledger 1
    with pytest.raises(LsnOutOfRange):
        await engine.read("l", lsns[5], 100)
    await engine.register_reader("l", "slow", None)
    gone = await engine.reclaim("l")
    assert len(gone) == 2  # ledgers of entries 0-49 and 50-99; 100-149 holds 130
    got = await read_everything(engine, "l", lsns[130])
    assert [p for _, p in got] == [f"r{i}".encode() for i in range(130, 160)]
    # the truncation point never goes back
    assert await engine.truncate("l", lsns[3]) == lsns[130]


async def test_tso_ranges_increase(engines: EngineFactory) -> None:
    engine = await engines()
    first = await engine.tso(10)
    second = await engine.tso(1)
    assert second >= first + 10


async def test_a_writer_dying_right_after_an_ensemble_change_loses_nothing(
        engines: EngineFactory, storage: Storage) -> None:
    first = await engines("instance-1", add_timeout_s=3.0)
    await first.create("l", SMALL, 0)
    acked = [await first.append_batch("l", [rec(f"a{i}")]) for i in range(4)]
    writer = first.writers["l"]
    victim = writer.write_set[2]
    await storage.stop(storage.addresses.index(victim))
    acked.append(await first.append_batch("l", [rec("a4")]))  # c fails: ensemble change
    for _ in range(100):
        if victim not in writer.write_set:
            break
        await asyncio.sleep(0.05)
    meta, _ = await first.stat("l")
    assert len(meta.ledgers[-1].fragments) == 2  # the new fragment holds no entry yet
    first.store.zk.stop()  # the writer's instance dies
    second = await engines("instance-2")
    got = await read_everything(second, "l")
    assert [p for _, p in got] == [f"a{i}".encode() for i in range(5)]
    assert [lsn for lsn, _ in got] == [x[0] for x in acked]
