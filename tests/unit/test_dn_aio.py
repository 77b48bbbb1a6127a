"""Small replicas without worker threads. Written on the event loop and fsynced through the
kernel's AIO (``common/aio.py``, ``transfer.receive_replica``): durable files, the thread
fallback, a cancelled writer whose finalize still completes. Read on the loop when the page
cache holds them (``PieceStream``, ``ReplicaReader.read_piece(cached_only=True)``), in a
thread when it does not."""

from __future__ import annotations

import asyncio
import errno
import os
import platform
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import crc32c
import pytest

from xdfs.common import aio, files
from xdfs.common.aio import KernelSyncs, Request, open_kernel_syncs
from xdfs.config import RpcConfig
from xdfs.datanode import direct, transfer
from xdfs.datanode.replica import NotCached, Replica, ReplicaReader
from xdfs.datanode.storage import DataStorage
from xdfs.errors import CorruptReplica, StorageError
from xdfs.rpc.connection import RpcProtocol
from xdfs.rpc.messages import Chunk, InEnvelope, Tail
from xdfs.rpc.streams import StreamReceiver
from xdfs.testing.page_cache import cached_pages, drop_from_page_cache
from xdfs.testing.poll import eventually

CHUNK = 4096
NOW_MS = 1_700_000_000_000
SMALL = 200 * 1024 + 17


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[DataStorage]:
    s = DataStorage(tmp_path / "dn", CHUNK, direct_io=True, loop_write_max_bytes=512 * 1024)
    s.open(NOW_MS)
    yield s
    s.close()


@pytest.fixture
async def syncs() -> AsyncIterator[KernelSyncs]:
    opened = open_kernel_syncs(asyncio.get_running_loop())
    assert opened is not None, "Linux AIO is available on the machines xdfs runs on"
    yield opened
    opened.close()


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of what ``transfer.in_thread`` ran in a worker thread."""
    seen: list[str] = []
    real = transfer.in_thread

    async def counted(fn: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(getattr(fn, "__name__", repr(fn)))
        return await real(fn, *args, **kwargs)

    monkeypatch.setattr(transfer, "in_thread", counted)
    return seen


async def chunks(data: bytes, size: int = 64 * 1024) -> AsyncIterator[bytes]:
    for at in range(0, len(data), size):
        yield data[at : at + size]


async def receive(storage: DataStorage, block_id: int, data: bytes,
                  syncs: KernelSyncs | None) -> Replica:
    storage.claim(block_id)
    try:
        return await transfer.receive_replica(
            storage, block_id, 1, chunks(data), lambda _kept: None, None, syncs)
    finally:
        storage.release(block_id)


class _Quiet(RpcProtocol):
    def on_envelope(self, envelope: InEnvelope) -> None:
        pass


def whole_stream(data: bytes, chunk_bytes: int = 1 << 20) -> StreamReceiver:
    """A stream whose chunks and tail have all arrived, as a small write's head, chunk and
    tail come in one read: its consumer takes it in one batch that ends it."""
    proto = _Quiet(RpcConfig())
    receiver = StreamReceiver(proto, 1, window_chunks=8)
    pieces = [data[at : at + chunk_bytes] for at in range(0, len(data), chunk_bytes)]
    for seq, piece in enumerate(pieces):
        receiver.on_chunk(Chunk(seq, crc32c.crc32c(piece), memoryview(piece)))
    receiver.on_tail(Tail(len(pieces), len(data)))
    return receiver


async def receive_whole(storage: DataStorage, block_id: int, data: bytes,
                        syncs: KernelSyncs | None) -> Replica:
    storage.claim(block_id)
    try:
        return await transfer.receive_replica(
            storage, block_id, 1, whole_stream(data), lambda _kept: None, None, syncs)
    finally:
        storage.release(block_id)


def read_back(replica: Replica) -> bytes:
    """The replica, verified, in one piece (in this thread)."""
    reader = ReplicaReader(replica, 0, replica.num_bytes, 8 << 20)
    try:
        return bytes(reader.read_piece() or b"")
    finally:
        reader.close()


async def test_files_and_directories_are_synced_and_errors_reported(
    syncs: KernelSyncs, tmp_path: Path
) -> None:
    fds = [os.open(tmp_path / f"f{i}", os.O_WRONLY | os.O_CREAT, 0o644) for i in range(3)]
    directory = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for fd in fds:
            os.write(fd, b"x" * 5000)
        await syncs.sync(fds, data_only=True)
        await syncs.sync([directory], data_only=False)
        closed = os.dup(fds[0])
        os.close(closed)
        with pytest.raises(OSError) as bad:
            await syncs.sync([closed], data_only=True)
        assert bad.value.errno == errno.EBADF and syncs.enabled
    finally:
        for fd in (*fds, directory):
            os.close(fd)


async def test_a_file_without_fsync_turns_aio_off(syncs: KernelSyncs) -> None:
    read_end, write_end = os.pipe()  # a pipe has no fsync: the kernel says EINVAL
    try:
        with pytest.raises(OSError) as refused:
            await syncs.sync([write_end], data_only=True)
    finally:
        os.close(read_end)
        os.close(write_end)
    assert refused.value.errno == errno.EINVAL
    assert not syncs.enabled and not syncs.available(1)


async def test_a_small_replica_needs_no_worker_thread(
    storage: DataStorage, syncs: KernelSyncs, hops: list[str]
) -> None:
    data = os.urandom(SMALL)
    replica = await receive(storage, 7, data, syncs)
    assert replica.finalized and replica.num_bytes == SMALL
    assert replica.data_path.parent == storage.finalized / "subdir0" / "subdir0"
    assert read_back(replica) == data and storage.get(7) is replica
    assert list(storage.rbw.iterdir()) == []
    assert hops == ["finalized_dir"]  # the leaf's first replica makes the directories
    await receive(storage, 8, data, syncs)  # the same leaf (256 consecutive ids share it)
    assert hops == ["finalized_dir"]


async def test_the_next_directory_is_made_ahead_of_the_writes(
    storage: DataStorage, syncs: KernelSyncs
) -> None:
    """Once a replica is written, the next leaf (block ids 256 further) is made in the
    background, so the write that first lands there makes no directory; the ones made
    are remembered, and made only once."""
    data = os.urandom(SMALL)
    await receive(storage, 7, data, syncs)
    first = storage.finalized / "subdir0"
    await eventually(lambda: storage.made_finalized_dir(256 + 7) is not None,
                     what="leaf subdir0/subdir1 made")
    assert sorted(os.listdir(first)) == ["subdir0", "subdir1"]  # one leaf ahead, no more
    assert storage.leaf_ahead(9) is None  # made: nothing more to do
    replica = await receive(storage, 256 + 9, data, syncs)
    assert replica.data_path.parent == first / "subdir1"
    await eventually(lambda: storage.made_finalized_dir(512) is not None,
                     what="leaf subdir0/subdir2 made")
    # the last leaf of a first-level directory: the next one's first leaf, parent and all
    await receive(storage, 0xFFFF, data, syncs)
    await eventually(lambda: storage.made_finalized_dir(0x10000) is not None,
                     what="leaf subdir1/subdir0 made")
    assert (storage.finalized / "subdir1" / "subdir0").is_dir()


async def test_directories_not_made_ahead_are_made_by_the_write_needing_them(
    storage: DataStorage, syncs: KernelSyncs, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    data = os.urandom(SMALL)
    make = storage.finalized_dir

    def failing(block_id: int) -> Path:
        if block_id >= 256:
            raise StorageError("no space left on device")
        return make(block_id)

    monkeypatch.setattr(storage, "finalized_dir", failing)
    await receive(storage, 7, data, syncs)  # written all the same
    await eventually(lambda: "cannot make the directory of block 263" in caplog.text,
                     what="the failure logged")
    assert storage.made_finalized_dir(263) is None
    monkeypatch.setattr(storage, "finalized_dir", make)
    replica = await receive(storage, 263, data, syncs)
    assert replica.data_path.parent == storage.finalized / "subdir0" / "subdir1"


async def test_without_aio_the_small_replica_is_committed_in_a_thread(
    storage: DataStorage, hops: list[str], syncs: KernelSyncs
) -> None:
    data = os.urandom(SMALL)
    for syncer in (None, syncs):
        syncs.enabled = False  # (as after an EINVAL)
        block_id = 10 if syncer is None else 11
        replica = await receive(storage, block_id, data, syncer)
        assert read_back(replica) == data and replica.finalized
    assert hops == ["commit", "commit"]


async def test_a_large_replica_goes_to_worker_threads(
    storage: DataStorage, syncs: KernelSyncs, hops: list[str]
) -> None:
    data = os.urandom(3 * 1024 * 1024 + 5)
    replica = await receive(storage, 12, data, syncs)
    assert read_back(replica) == data
    assert hops and hops[-1] == "_write_new" and "commit" not in hops


def hold_submissions(monkeypatch: pytest.MonkeyPatch) -> tuple[asyncio.Event, asyncio.Event]:
    """(entered, release): AIO submissions wait for ``release``; ``entered`` is set once
    the first one was asked for."""
    entered, release = asyncio.Event(), asyncio.Event()
    real = KernelSyncs.start_calling
    held: set[asyncio.Task[None]] = set()

    def holding(self: KernelSyncs, requests: list[Request], done: Any) -> None:
        entered.set()

        async def later() -> None:
            await release.wait()
            real(self, requests, done)

        task = asyncio.ensure_future(later())
        held.add(task)
        task.add_done_callback(held.discard)

    monkeypatch.setattr(KernelSyncs, "start_calling", holding)
    return entered, release


async def test_a_writer_cancelled_during_the_finalize_still_finalizes(
    storage: DataStorage, syncs: KernelSyncs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As with a finalize in a worker thread: once the fsyncs are under way the replica is
    finished, put in the map, and only then does the cancellation reach the caller."""
    await _cancel_while_the_kernel_holds_it(
        storage, monkeypatch, lambda data: receive(storage, 20, data, syncs), 20)


async def test_a_failed_fsync_is_a_storage_error_and_leaves_nothing(
    storage: DataStorage, syncs: KernelSyncs, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(self: KernelSyncs, requests: list[Request], done: Any) -> None:
        asyncio.get_running_loop().call_soon(done, [-errno.EIO] * len(requests))

    monkeypatch.setattr(KernelSyncs, "start_calling", failing)
    with pytest.raises(StorageError, match="fsync of block 30"):
        await receive(storage, 30, os.urandom(SMALL), syncs)
    with pytest.raises(StorageError, match="fsync of block 31"):
        await receive_whole(storage, 31, os.urandom(SMALL), syncs)
    assert storage.get(30) is None and storage.get(31) is None
    assert list(storage.rbw.iterdir()) == []


def test_unknown_machines_have_no_aio(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(platform, "machine", lambda: "vax")
    loop = asyncio.new_event_loop()
    try:
        assert open_kernel_syncs(loop) is None
    finally:
        loop.close()


async def test_in_thread_passes_positional_and_keyword_arguments() -> None:
    assert await transfer.in_thread(int, "101", base=2) == 5
    assert await transfer.in_thread(divmod, 7, 2) == (3, 1)


async def stream(replica: Replica, offset: int = 0, length: int | None = None) -> bytes:
    size = replica.num_bytes - offset if length is None else length
    reader = ReplicaReader(replica, offset, size, 64 * 1024)
    pieces = transfer.PieceStream(reader, lambda _r, _e: None, transfer.Transfers())
    return b"".join([bytes(piece) async for piece in pieces])


async def test_a_cached_small_replica_is_read_on_the_loop(
    storage: DataStorage, syncs: KernelSyncs, hops: list[str]
) -> None:
    data = os.urandom(SMALL)
    replica = await receive(storage, 40, data, syncs)
    hops.clear()
    assert await stream(replica) == data
    assert await stream(replica, 70_000, 100_001) == data[70_000:170_001]
    assert hops == []


#: Tries of an uncached read: a read that does not wait still starts read-ahead, and on a
#: fast (virtual) disk that read-ahead can land before the read looks, so the read finds
#: the pages after all. That race is the kernel's; each try drops the pages again.
UNCACHED_TRIES = 50


async def test_an_uncached_replica_is_read_in_a_thread(
    storage: DataStorage, syncs: KernelSyncs, hops: list[str]
) -> None:
    data = os.urandom(SMALL)
    replica = await receive(storage, 41, data, syncs)
    for _ in range(UNCACHED_TRIES):
        drop_from_page_cache(replica.data_path)
        reader = ReplicaReader(replica, 0, SMALL, 1 << 20)
        try:
            assert reader.cached_reads
            try:
                reader.read_piece(cached_only=True)
                continue  # read-ahead won the race: drop and try again
            except NotCached:
                pass
            piece = reader.read_piece()  # nothing moved: the thread reads the same piece
            assert piece is not None and bytes(piece) == data
            break
        finally:
            reader.close()
    else:
        pytest.fail("a read from the page cache only never missed")
    for _ in range(UNCACHED_TRIES):
        drop_from_page_cache(replica.data_path)
        hops.clear()
        assert await stream(replica) == data
        if hops == ["read_piece"]:
            break
        assert hops == []  # read-ahead won the race: read on the loop, as cached
    else:
        pytest.fail("an uncached replica was never read in a thread")


async def test_a_corrupt_cached_replica_fails_its_read_on_the_loop(
    storage: DataStorage, syncs: KernelSyncs
) -> None:
    data = os.urandom(SMALL)
    replica = await receive(storage, 42, data, syncs)
    fd = os.open(replica.data_path, os.O_WRONLY)
    try:
        os.pwrite(fd, bytes([data[1000] ^ 0xFF]), 1000)
    finally:
        os.close(fd)
    with pytest.raises(CorruptReplica, match="checksum mismatch"):
        await stream(replica)


@pytest.fixture
def submissions(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """The opcodes of each submission to the kernel's AIO (a write with ``RWF_DSYNC``:
    DSYNC_WRITE)."""
    seen: list[list[int]] = []
    real = KernelSyncs.start_calling

    def counted(self: KernelSyncs, requests: list[Request], done: Any) -> None:
        seen.append([DSYNC_WRITE if request[5] & os.RWF_DSYNC else request[0]
                     for request in requests])
        real(self, requests, done)

    monkeypatch.setattr(KernelSyncs, "start_calling", counted)
    return seen


FDSYNC, FSYNC, PREAD, PWRITE = 3, 2, 0, 1
DSYNC_WRITE = 101


@pytest.mark.parametrize("size", [SMALL, 200 * 1024, 100, 0])
async def test_a_small_replica_in_hand_is_written_direct_by_the_kernel(
    storage: DataStorage, syncs: KernelSyncs, hops: list[str],
    submissions: list[list[int]], size: int,
) -> None:
    """Where the file system is not known to honour RWF_DSYNC: data written direct in the
    submission that fdatasyncs the checksum file, then the data file fdatasynced (with
    its unaligned end, written through the page cache), then the directory."""
    storage.dsync_direct_writes = False
    data = os.urandom(size)
    replica = await receive_whole(storage, 50, data, syncs)
    # only the unaligned end went through the page cache
    assert cached_pages(replica.data_path, max(size, 1)) == (1 if size % aio.ALIGN else 0)
    assert replica.finalized and replica.num_bytes == size and read_back(replica) == data
    assert list(storage.rbw.iterdir()) == [] and hops == ["finalized_dir"]
    aligned = size - size % aio.ALIGN
    syncs_data = [[PWRITE, FDSYNC], [FDSYNC]] if aligned else [[FDSYNC, FDSYNC]]
    assert submissions == [*syncs_data, [FSYNC]]


@pytest.mark.parametrize("size", [SMALL, 200 * 1024, 100])
async def test_a_direct_write_made_durable_by_the_kernel_needs_no_fdatasync_of_its_own(
    storage: DataStorage, syncs: KernelSyncs, submissions: list[list[int]], size: int,
) -> None:
    """On ext4 (the tests' file system): the direct write carries RWF_DSYNC, the checksum
    file's fdatasync (and the unaligned end's) go in the same submission, and the next
    step is the directory's fsync."""
    assert storage.dsync_direct_writes, "the tests run on ext4, xfs or btrfs"
    data = os.urandom(size)
    replica = await receive_whole(storage, 52, data, syncs)
    assert replica.finalized and replica.num_bytes == size and read_back(replica) == data
    if size < aio.ALIGN:  # nothing to write direct: both files fdatasynced
        assert submissions == [[FDSYNC, FDSYNC], [FSYNC]]
    else:
        tail = [FDSYNC] if size % aio.ALIGN else []
        assert submissions == [[DSYNC_WRITE, FDSYNC, *tail], [FSYNC]]


def test_the_file_system_of_a_path_is_its_longest_mount_point_s() -> None:
    mountinfo = ("22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
                 "40 22 0:35 / /mnt/lazy\\040fs rw,nosuid - fuse.lazyfs lazyfs rw\n"
                 "41 22 0:36 / /mnt/lazy rw master:2 - xfs /dev/sdb rw\n")
    assert files.file_system_type("/mnt/lazy fs/dn", mountinfo) == "fuse.lazyfs"
    assert files.file_system_type("/mnt/lazy/dn", mountinfo) == "xfs"
    assert files.file_system_type("/mnt/lazyx", mountinfo) == "ext4"
    assert files.file_system_type("/x", "") == ""
    assert "fuse.lazyfs" not in files.DSYNC_FILE_SYSTEMS


async def test_a_direct_write_the_file_system_refuses_goes_through_the_page_cache(
    storage: DataStorage, syncs: KernelSyncs, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = KernelSyncs.start_calling

    def refusing(self: KernelSyncs, requests: list[Request], done: Any) -> None:
        def merged(kept_results: list[int]) -> None:
            results = iter(kept_results)
            done([-errno.EINVAL if request[0] == PWRITE else next(results)
                  for request in requests])
        real(self, [request for request in requests if request[0] != PWRITE], merged)

    monkeypatch.setattr(KernelSyncs, "start_calling", refusing)
    data = os.urandom(SMALL)
    replica = await receive_whole(storage, 51, data, syncs)
    assert read_back(replica) == data and replica.finalized and syncs.enabled


@pytest.mark.parametrize("refused", [FDSYNC, FSYNC])
async def test_fsyncs_the_kernel_refuses_are_done_in_threads(
    storage: DataStorage, syncs: KernelSyncs, hops: list[str],
    monkeypatch: pytest.MonkeyPatch, refused: int,
) -> None:
    """A kernel that refuses the files' (or the directory's) AIO fsync turns AIO off and
    that step of the commit is done in a worker thread: the replica is finalized all the
    same."""
    real = KernelSyncs.start_calling

    def refusing(self: KernelSyncs, requests: list[Request], done: Any) -> None:
        if any(request[0] == refused for request in requests):
            asyncio.get_running_loop().call_soon(done, [-errno.EINVAL] * len(requests))
        else:
            real(self, requests, done)

    monkeypatch.setattr(KernelSyncs, "start_calling", refusing)
    data = os.urandom(SMALL)
    replica = await receive_whole(storage, 54, data, syncs)
    assert replica.finalized and read_back(replica) == data and storage.get(54) is replica
    assert not syncs.enabled and list(storage.rbw.iterdir()) == []
    in_threads = (["sync_and_close", "finalized_dir"] if refused == FDSYNC
                  else ["finalized_dir", "fsync_dir"])  # (the steps in the sequence's order)
    assert hops == in_threads


async def test_a_failed_direct_write_is_a_storage_error_and_leaves_nothing(
    storage: DataStorage, syncs: KernelSyncs, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = KernelSyncs.start_calling

    def failing(self: KernelSyncs, requests: list[Request], done: Any) -> None:
        real(self, requests, lambda results: done(
            [-errno.ENOSPC if request[0] == PWRITE else result
             for request, result in zip(requests, results, strict=True)]))

    monkeypatch.setattr(KernelSyncs, "start_calling", failing)
    with pytest.raises(StorageError, match=r"direct write of block 52.*No space"):
        await receive_whole(storage, 52, os.urandom(SMALL), syncs)
    assert storage.get(52) is None and list(storage.rbw.iterdir()) == []


async def test_a_writer_cancelled_during_the_direct_write_still_finalizes(
    storage: DataStorage, syncs: KernelSyncs, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _cancel_while_the_kernel_holds_it(
        storage, monkeypatch, lambda data: receive_whole(storage, 53, data, syncs), 53)


async def _cancel_while_the_kernel_holds_it(
    storage: DataStorage, monkeypatch: pytest.MonkeyPatch,
    write: Callable[[bytes], Awaitable[object]], block_id: int,
) -> None:
    """Cancel ``write(data)`` (of ``block_id``) once its first AIO submission is held; the
    cancellation reaches the caller, and the replica is finalized with the data anyway."""
    entered, release = hold_submissions(monkeypatch)
    data = os.urandom(SMALL)
    task = asyncio.ensure_future(write(data))
    await entered.wait()
    task.cancel()
    await asyncio.sleep(0)
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    replica = storage.get(block_id)
    assert replica is not None and replica.finalized and read_back(replica) == data


async def kernel_stream(replica: Replica, syncs: KernelSyncs, offset: int = 0,
                        length: int | None = None) -> bytes:
    size = replica.num_bytes - offset if length is None else length
    reader = ReplicaReader(replica, offset, size, 64 * 1024, direct_io=True, kernel_reads=True)
    assert reader.kernel_reads
    pieces = transfer.PieceStream(reader, lambda _r, _e: None, transfer.Transfers(), syncs)
    return b"".join([bytes(piece) async for piece in pieces])


async def test_a_small_replica_written_direct_is_read_by_the_kernel(
    storage: DataStorage, syncs: KernelSyncs, hops: list[str], submissions: list[list[int]]
) -> None:
    data = os.urandom(SMALL)
    replica = await receive_whole(storage, 54, data, syncs)
    hops.clear()
    submissions.clear()
    assert await kernel_stream(replica, syncs) == data
    assert await kernel_stream(replica, syncs, 70_000, 100_001) == data[70_000:170_001]
    assert hops == [] and submissions == [[PREAD], [PREAD]]
    assert cached_pages(replica.data_path, SMALL) == 1  # (the end written buffered)


async def test_a_corrupt_replica_fails_its_kernel_read(
    storage: DataStorage, syncs: KernelSyncs
) -> None:
    data = os.urandom(SMALL)
    replica = await receive_whole(storage, 55, data, syncs)
    fd = os.open(replica.data_path, os.O_WRONLY)
    try:
        os.pwrite(fd, bytes([data[1000] ^ 0xFF]), 1000)
        os.fsync(fd)
    finally:
        os.close(fd)
    drop_from_page_cache(replica.data_path)
    with pytest.raises(CorruptReplica, match="checksum mismatch in bytes 0-4095"):
        await kernel_stream(replica, syncs)


async def test_a_pooled_read_buffer_still_viewed_is_not_reused(
    storage: DataStorage, syncs: KernelSyncs, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An empty pool to start from (the pool is the process's: earlier tests' readers give
    # their buffers back to it, and the second reader here would take one of them).
    monkeypatch.setattr(direct, "_pool", [])
    data = os.urandom(SMALL)
    replica = await receive_whole(storage, 56, data, syncs)
    reader = ReplicaReader(replica, 0, SMALL, 64 * 1024, direct_io=True, kernel_reads=True)
    piece = reader.read_piece()
    assert piece is not None and bytes(piece) == data
    pooled = len(direct._pool)
    reader.close()  # a piece of its buffer is still in use: the buffer leaves the pool
    assert len(direct._pool) == pooled and bytes(piece) == data
    del piece
    reader = ReplicaReader(replica, 0, SMALL, 64 * 1024, direct_io=True, kernel_reads=True)
    assert bytes(reader.read_piece() or b"") == data
    reader.close()  # nothing views it: back in the pool
    assert len(direct._pool) == min(pooled + 1, direct._POOL_MAX)


async def test_a_stream_read_by_the_kernel_gives_its_buffer_back_to_the_pool(
    storage: DataStorage, syncs: KernelSyncs
) -> None:
    # The task that takes the last piece runs inside the loop's handle that woke it, which
    # still refers to the kernel read's future and so to the piece: a reader closed in
    # that turn had its buffer refused by the pool (unmapped; the next reader faulted a
    # fresh one in). Each stream here must leave the pool as it found it.
    data = os.urandom(SMALL)
    replica = await receive_whole(storage, 57, data, syncs)
    await kernel_stream(replica, syncs)
    await asyncio.sleep(0)
    pooled = len(direct._pool)
    assert pooled >= 1
    for _ in range(5):
        assert await kernel_stream(replica, syncs) == data
        await asyncio.sleep(0)  # (the reader closes at the next turn of the loop)
        assert len(direct._pool) == pooled


async def test_small_direct_io_off_keeps_small_replicas_in_the_page_cache(
    tmp_path: Path, syncs: KernelSyncs, submissions: list[list[int]]
) -> None:
    storage = DataStorage(tmp_path / "dn", CHUNK, direct_io=True,
                          loop_write_max_bytes=512 * 1024, small_direct_io=False)
    storage.open(NOW_MS)
    try:
        data = os.urandom(SMALL)
        replica = await receive_whole(storage, 57, data, syncs)
        assert cached_pages(replica.data_path, SMALL) == -(-SMALL // aio.ALIGN)
        assert submissions == [[FDSYNC, FDSYNC], [FSYNC]]  # no direct write
        assert read_back(replica) == data
    finally:
        storage.close()


async def test_a_paused_stream_has_every_byte_it_brought_in_the_rbw_file(
    storage: DataStorage, syncs: KernelSyncs
) -> None:
    """A large replica's writer keeps bytes staged between batches (to write them in large
    pieces); once the sender pauses (``transfer.PAUSE_S``) they are in the rbw file with
    their checksums, as a block recovery after a client's crash expects; the stream then
    goes on and ends as usual."""
    proto = _Quiet(RpcConfig())
    receiver = StreamReceiver(proto, 1, window_chunks=8)
    data = os.urandom(3 * direct.STAGE_BYTES + 5000)
    pieces = [data[at : at + direct.STAGE_BYTES] for at in range(0, len(data),
                                                                   direct.STAGE_BYTES)]
    for seq, piece in enumerate(pieces[:-1]):
        receiver.on_chunk(Chunk(seq, crc32c.crc32c(piece), memoryview(piece)))
    storage.claim(7)
    writing = asyncio.ensure_future(transfer.receive_replica(
        storage, 7, 1, receiver, lambda _kept: None, None, syncs))
    rbw_file = storage.rbw / "blk_7"
    sent = 3 * direct.STAGE_BYTES
    await eventually(lambda: rbw_file.exists() and rbw_file.stat().st_size == sent,
                     what="the staged bytes in the rbw file")
    meta = storage.rbw / "blk_7_1.meta"
    assert meta.stat().st_size == 16 + 4 * (sent // CHUNK)  # header + every chunk's CRC
    assert rbw_file.read_bytes() == data[:sent]
    receiver.on_chunk(Chunk(len(pieces) - 1, crc32c.crc32c(pieces[-1]),
                            memoryview(pieces[-1])))
    receiver.on_tail(Tail(len(pieces), len(data)))
    try:
        replica = await writing
    finally:
        storage.release(7)
    assert replica.num_bytes == len(data) and read_back(replica) == data
