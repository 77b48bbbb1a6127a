"""What a small file costs the NameNode: the file comes with its first block
(``create_with_block``), so a file under a block is one create, the DataNodes' writes and
one complete; an empty file gives its unused block back; a NameNode without the method is
served by plain ``create`` and ``add_block``. Through fsspec a small file is uploaded
from the caller's thread (created and completed there too with
``client.inline_create_complete``), and a target failing there is replaced on the loop;
one lease renewer serves the client."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import Counter
from collections.abc import AsyncIterator, Coroutine
from dataclasses import replace
from typing import Any

import fsspec
import pytest

from tests.datapath.conftest import Cluster, digest, payload
from tests.integration.conftest import ROOT, ROOT_PW
from xdfs.client.client import Client
from xdfs.client.datanodes import DataNodePool
from xdfs.client.sync_files import SyncWriter
from xdfs.client.writer import LeaseRenewer
from xdfs.config import XdfsConfig
from xdfs.protocol import namenode as p
from xdfs.rpc.client import RpcClient
from xdfs.rpc.service import Method
from xdfs.rpc.sync import LoopThread
from xdfs.testing.poll import eventually


def count_calls(monkeypatch: pytest.MonkeyPatch, rpc: RpcClient) -> Counter[str]:
    """The NameNode methods ``rpc`` calls from now on (each call once, retries aside)."""
    seen: Counter[str] = Counter()
    call = rpc.call

    async def counted(method: Method[Any, Any], request: Any, **kwargs: Any) -> Any:
        seen[method.name] += 1
        return await call(method, request, **kwargs)

    monkeypatch.setattr(rpc, "call", counted)
    return seen


async def test_a_small_file_is_one_create_and_one_complete(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = cluster.client
    data = payload(200 * 1024, seed=1)
    calls = count_calls(monkeypatch, client.rpc)
    writer = await client.open_write("/small/f")
    fs = cluster.mc.namenodes[0].fs
    assert fs is not None
    (first,) = fs.ns.get_blocks("/small/f")  # allocated with the file
    await writer.write(data)
    status = await writer.close()
    assert calls == Counter({"create_with_block": 1, "complete": 1})
    assert status.length == len(data) and not status.under_construction
    assert [b.block_id for b in fs.ns.get_blocks("/small/f")] == [first.block_id]
    assert digest(await client.read_file("/small/f")) == digest(data)


async def test_an_empty_file_gives_its_block_back(cluster: Cluster) -> None:
    client = cluster.client
    writer = await client.open_write("/small/empty")
    status = await writer.close()
    assert status.length == 0 and not status.under_construction
    assert (await client.block_locations("/small/empty")).blocks == []
    assert await client.read_file("/small/empty") == b""


async def test_a_namenode_without_create_with_block_gets_create_and_add_block(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A method the NameNode does not have stands in for an older NameNode: it answers
    # UnknownMethod, and the client goes on with create (and stops asking).
    missing = Method("create_with_block_v0", p.CreateRequest, p.CreateBlockResponse,
                     idempotent=False)
    monkeypatch.setattr(p, "CREATE_WITH_BLOCK", missing)
    client = cluster.client
    calls = count_calls(monkeypatch, client.rpc)
    data = payload(5000, seed=2)
    for name in ("a", "b"):
        writer = await client.open_write(f"/small/{name}")
        await writer.write(data)
        await writer.close()
        assert digest(await client.read_file(f"/small/{name}")) == digest(data)
    assert calls == Counter({"create_with_block_v0": 1, "create": 2, "add_block": 2,
                             "complete": 2, "block_locations": 2})


# -- the synchronous client (fsspec): a small file from the caller's thread --------------


def _fs(address: str, inline_create_complete: bool) -> Any:
    fs = fsspec.filesystem(
        "xdfs", fs=f"xdfs://{address}", user=ROOT, password=ROOT_PW, skip_instance_cache=True
    )
    client = fs.client.async_client
    client.config = replace(client.config, client=replace(
        client.config.client, inline_create_complete=inline_create_complete))
    return fs


def count_inline_stores(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The threads DataNodePool.store_inline runs in from now on."""
    threads: list[str] = []
    store = DataNodePool.store_inline

    def counted(self: DataNodePool, *args: Any) -> Any:
        threads.append(threading.current_thread().name)
        return store(self, *args)

    monkeypatch.setattr(DataNodePool, "store_inline", counted)
    return threads


def count_hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Coroutines the synchronous clients hand to their loop threads from now on."""
    hops: list[str] = []
    run = LoopThread.run

    def counted(self: LoopThread, coro: Coroutine[Any, Any, Any]) -> Any:
        hops.append(getattr(coro, "__qualname__", "?"))
        return run(self, coro)

    monkeypatch.setattr(LoopThread, "run", counted)
    return hops


@pytest.mark.parametrize("inline_create_complete", [False, True])
async def test_fsspec_sends_a_small_file_from_the_callers_thread(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, inline_create_complete: bool
) -> None:
    fs = await asyncio.to_thread(_fs, cluster.mc.namenodes[0].address, inline_create_complete)
    data = payload(200 * 1024, seed=3)
    hops = count_hops(monkeypatch)
    stores = count_inline_stores(monkeypatch)

    def write() -> str:
        with fs.open("/small/sync", "wb") as fh:
            fh.write(data)
        return threading.current_thread().name

    try:
        caller = await asyncio.to_thread(write)
        assert stores == [caller]  # the block went to its DataNodes from the caller's thread
        # create and complete on the loop's connection, or from the caller's thread too
        assert hops == ([] if inline_create_complete
                        else ["AsyncClient.open_write", "FileWriter.close"])
        # Acknowledged: complete, not under construction, both replicas on disk.
        status = await cluster.client.stat("/small/sync")
        assert status.length == len(data) and not status.under_construction
        (block,) = (await cluster.client.block_locations("/small/sync")).blocks
        assert len(cluster.holders(block.block.block_id)) == 2
        assert digest(await cluster.client.read_file("/small/sync")) == digest(data)
    finally:
        await asyncio.to_thread(fs.client.close)


async def test_fsspec_opens_a_file_for_reading_from_the_callers_thread(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The block locations come from the caller's thread; only the data is read on the
    loop (one hop per read, none for the open)."""
    fs = await asyncio.to_thread(_fs, cluster.mc.namenodes[0].address, True)
    data = payload(200 * 1024, seed=4)
    await cluster.client.write_file("/small/read", data)
    hops = count_hops(monkeypatch)

    def read() -> bytes:
        with fs.open("/small/read", "rb") as fh:
            body: bytes = fh.read()
        return body

    try:
        assert await asyncio.to_thread(read) == data
        assert "AsyncClient.open_read" not in hops
        assert hops and all(hop == "FileReader.read_at" for hop in hops)
    finally:
        await asyncio.to_thread(fs.client.close)


async def test_a_target_failing_under_an_inline_small_file_is_replaced(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The target stops between the create and the upload: its try from the caller's thread
    # fails, and the rest of the close (a replacement target) runs on the loop (which
    # would have been the caller's thread with inline_create_complete).
    fs = await asyncio.to_thread(_fs, cluster.mc.namenodes[0].address, True)
    data = payload(100 * 1024, seed=4)
    try:
        fh = await asyncio.to_thread(fs.open, "/small/failing", "wb")
        current = fh._writer.writer
        assert current._first is not None
        victim_address = current._first.locations[0]
        victim = next(dn for dn in cluster.mc.datanodes if dn.address == victim_address)
        await cluster.mc.stop_datanode(victim)
        hops = count_hops(monkeypatch)
        stores = count_inline_stores(monkeypatch)
        await asyncio.to_thread(fh.write, data)
        await asyncio.to_thread(fh.close)
        assert len(stores) == 1 and hops == ["FileWriter.close"]
        assert digest(await cluster.client.read_file("/small/failing")) == digest(data)
        (block,) = (await cluster.client.block_locations("/small/failing")).blocks
        assert victim_address not in block.locations
        assert len(block.locations) == 2  # the failed target was replaced
    finally:
        await asyncio.to_thread(fs.client.close)


async def test_an_inline_small_file_is_completed_once_its_first_target_answered(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One target's answer is held (its received-replica report waits): the file is
    # completed with the other's, while the close still waits for the held one.
    fs = await asyncio.to_thread(_fs, cluster.mc.namenodes[0].address, True)
    data = payload(150 * 1024, seed=6)
    gate = asyncio.Event()
    try:
        fh = await asyncio.to_thread(fs.open, "/small/first", "wb")
        first = fh._writer.writer._first
        assert first is not None and len(first.locations) == 2
        held = next(dn for dn in cluster.mc.datanodes if dn.address == first.locations[1])
        assert held.actor is not None
        report = held.actor.report_received

        async def held_report(record: Any) -> None:
            await gate.wait()
            await report(record)

        monkeypatch.setattr(held.actor, "report_received", held_report)
        await asyncio.to_thread(fh.write, data)
        closing = asyncio.ensure_future(asyncio.to_thread(fh.close))

        async def completed() -> bool:
            status = await cluster.client.stat("/small/first")
            return not status.under_construction

        await eventually(completed, what="the file completed with one target's answer")
        assert not closing.done()  # the close waits for the held target
        gate.set()
        await closing
        (block,) = (await cluster.client.block_locations("/small/first")).blocks
        assert len(cluster.holders(block.block.block_id)) == 2
        assert digest(await cluster.client.read_file("/small/first")) == digest(data)
    finally:
        gate.set()
        await asyncio.to_thread(fs.client.close)


async def test_the_client_renews_its_lease_while_files_are_open(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = cluster.client
    client.leases.interval_s = 0.05
    calls = count_calls(monkeypatch, client.rpc)
    assert not client.leases.running
    first = await client.open_write("/small/lease-a")
    second = await client.open_write("/small/lease-b")
    await eventually(lambda: calls["renew_lease"] >= 3, what="renewals")
    await first.close()
    renewed = calls["renew_lease"]
    await eventually(lambda: calls["renew_lease"] >= renewed + 2, what="renewals, one open")
    await second.close()
    assert client.leases.open_writers == 0
    assert not client.leases.running  # an idle client has no renewing task
    renewed = calls["renew_lease"]
    await asyncio.sleep(0.3)  # several intervals: nothing is open, nothing renewed
    assert calls["renew_lease"] <= renewed + 1  # one may have been on its way


@pytest.mark.parametrize("inline_create_complete", [False, True])
async def test_fsspec_file_flushed_before_its_close_completes_on_the_loop(
    cluster: Cluster, inline_create_complete: bool
) -> None:
    # fsspec flushes a full buffer (its block_size) before the close, so the close brings
    # nothing new while the block's uploads run on the loop: the close waits for them there.
    fs = await asyncio.to_thread(_fs, cluster.mc.namenodes[0].address, inline_create_complete)
    piece = 64 * 1024
    data = payload(2 * piece, seed=5)

    def write(path: str, size: int) -> None:
        with fs.open(path, "wb", block_size=piece) as fh:
            fh.write(data[:size])

    try:
        for path, size in (("/small/flushed", piece), ("/small/flushed2", 2 * piece)):
            await asyncio.to_thread(write, path, size)
            assert await cluster.client.read_file(path) == data[:size]
    finally:
        await asyncio.to_thread(fs.client.close)


async def test_client_open_sends_a_small_file_with_its_close(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The buffered file's first buffer is held for the close: a small file goes to its
    # DataNodes from the caller's thread; a larger one as it is written, on the loop.
    address = cluster.mc.namenodes[0].address
    small, large = payload(300 * 1024, seed=6), payload(3 * 1024 * 1024 + 5, seed=7)
    stores = count_inline_stores(monkeypatch)

    def write() -> str:
        with Client(f"xdfs://{address}", user=ROOT, password=ROOT_PW,
                    config=XdfsConfig()) as client:
            with client.open("/small/opened", "wb") as fh:
                fh.write(small[:1000])
                fh.write(small[1000:])
            with client.open("/small/opened-large", "wb") as fh:
                for start in range(0, len(large), 700 * 1024):
                    fh.write(large[start : start + 700 * 1024])
        return threading.current_thread().name

    caller = await asyncio.to_thread(write)
    assert stores == [caller]  # the small file only
    assert await cluster.client.read_file("/small/opened") == small
    assert await cluster.client.read_file("/small/opened-large") == large


@contextlib.asynccontextmanager
async def _sync_fs(cluster: Cluster, count: int = 1) -> AsyncIterator[list[Any]]:
    """``count`` fsspec file systems on the cluster (defaults: create and complete from
    the caller's thread), closed afterwards."""
    address = cluster.mc.namenodes[0].address
    made = [await asyncio.to_thread(_fs, address, True) for _ in range(count)]
    try:
        yield made
    finally:
        for fs in made:
            await asyncio.to_thread(fs.client.close)


async def test_a_file_written_in_one_write_reaches_the_writer_uncopied(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # fsspec's buffer holds a first write of bytes as it is (PartsBuffer): the close hands
    # the very object to the writer; a small file of several writes is joined once.
    body = payload(200 * 1024, seed=8)
    given: list[Any] = []
    write_and_close = SyncWriter.write_and_close

    def seen(self: SyncWriter, data: Any) -> Any:
        given.append(data)
        return write_and_close(self, data)

    monkeypatch.setattr(SyncWriter, "write_and_close", seen)
    files = {"/small/whole": body, "/small/pieces": body, "/small/nothing": b""}
    async with _sync_fs(cluster) as (fs,):

        def write() -> None:
            with fs.open("/small/whole", "wb") as fh:
                fh.write(body)
            with fs.open("/small/pieces", "wb") as fh:
                fh.write(body[:1000])
                fh.write(memoryview(body)[1000:])
            with fs.open("/small/nothing", "wb"):
                pass

        await asyncio.to_thread(write)
    assert given[0] is body
    assert given[1] == body and given[1] is not body
    assert given[2] == b""
    assert {path: await cluster.client.read_file(path) for path in files} == files


async def test_large_writes_reach_the_writer_uncopied(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Writes of 2 MiB (fsspec flushes every 5 MiB): each reaches the writer as the very
    # object written, the small writes between them joined; the file reads back whole.
    pieces = [payload(2 * 1024 * 1024, seed=20 + i) for i in range(4)]
    tail = [b"x" * 100, b"y" * 200]
    given: list[Any] = []
    write, write_and_close = SyncWriter.write, SyncWriter.write_and_close

    def seen_write(self: SyncWriter, data: Any) -> Any:
        given.append(data)
        return write(self, data)

    def seen_close(self: SyncWriter, data: Any) -> Any:
        given.append(data)
        return write_and_close(self, data)

    monkeypatch.setattr(SyncWriter, "write", seen_write)
    monkeypatch.setattr(SyncWriter, "write_and_close", seen_close)
    async with _sync_fs(cluster) as (fs,):

        def write_file() -> None:
            with fs.open("/small/large", "wb") as fh:
                for piece in [*pieces, *tail]:
                    fh.write(piece)

        await asyncio.to_thread(write_file)
    assert [id(data) for data in given[:4]] == [id(piece) for piece in pieces]
    assert given[4:] == [b"".join(tail)]
    assert await cluster.client.read_file("/small/large") == b"".join([*pieces, *tail])


async def test_files_written_from_a_callers_thread_share_one_lease_renewal_task(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One file after another from one thread: the renewing task is started once (a close
    # in a caller's thread does not stop it, which would wake the loop's thread twice per
    # file); it ends by itself at its next turn once nothing is open, and the next file
    # starts it again.
    started: list[LeaseRenewer] = []
    start = LeaseRenewer._start

    def counted(self: LeaseRenewer) -> None:
        started.append(self)
        start(self)

    monkeypatch.setattr(LeaseRenewer, "_start", counted)
    data = payload(10_000, seed=9)

    def write(fs: Any, prefix: str, count: int) -> None:
        for i in range(count):
            with fs.open(f"/small/{prefix}{i}", "wb") as fh:
                fh.write(data)

    async with _sync_fs(cluster, 2) as (busy, idle):
        busy_leases = busy.client.async_client.leases
        busy_leases.interval_s = 600.0  # no turn during the writes
        leases = idle.client.async_client.leases
        leases.interval_s = 0.05
        await asyncio.to_thread(write, busy, "renewed", 20)
        assert started == [busy_leases]
        assert busy_leases.running  # left to its next turn
        await asyncio.to_thread(write, idle, "idle", 1)
        await eventually(lambda: not leases.running, what="the idle renewer ended")
        assert leases.open_writers == 0
        await asyncio.to_thread(write, idle, "again", 1)
        assert started.count(leases) == 2
    assert await cluster.client.read_file("/small/again0") == data
