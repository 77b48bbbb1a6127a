"""Writing a file: split into blocks, each streamed to the targets the NameNode chose.

The client sends each block to all of its targets at once (one upload stream per target,
each flow-controlled by the DataNode's credit) rather than through a DataNode pipeline: on
one machine or a fast LAN the client's CPU, not its link, limits a write, and a failed
target then never stalls the others. The block's bytes stay in memory until every target
has finalized it, so:

* a target that fails mid-block is dropped; when the block is done, the NameNode is asked
  for a replacement (``additional_datanode``) and the block is sent to it from memory;
* when every target failed, the block is abandoned and re-sent to fresh targets, up to
  ``client.block_write_tries`` times;
* targets that failed are excluded for the rest of the file.

A full new block is not waited for before the next one starts: its targets finalize it (the
last window's write, the fsync, the report to the NameNode: 50-200 ms for a 64 MiB block)
while the next block streams, so the DataNodes are not left idle at a block boundary.
At most one block is *behind* like that (so at most two blocks are in memory per open
file): the next full block, an hflush and the close wait for it first, and its failure
surfaces there. A block behind is no longer the file's last, so when *every* one of its
targets fails it cannot be abandoned and resent: the write fails with NotEnoughReplicas
(a single failed target is replaced as before). A reader of the file meanwhile may find
the NameNode knows the block's length before its replicas are finalized: its read
rounds (``client.read_rounds``, 0.2 s apart and more) wait that out. A continued block (an
append, or the block an hflush cut) is still stored before the write goes on: readers of
the flushed file read its replicas in place.

A DataNode answers a block write only after reporting the replica to the NameNode, so
``complete`` normally succeeds at once; it is retried while the NameNode says the last
block lacks replicas. The client's :class:`LeaseRenewer` renews its lease while files are
open.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator

from xdfs.client.datanodes import DataNodePool, InlineUploads
from xdfs.config import ClientConfig
from xdfs.errors import NotEnoughReplicas, XdfsError
from xdfs.protocol import namenode as p
from xdfs.protocol.blocks import BlockRecord
from xdfs.protocol.datanode import WRITE_BLOCK, WriteBlockRequest, WriteBlockResponse
from xdfs.rpc.client import RpcClient
from xdfs.rpc.streams import SealedChunk
from xdfs.rpc.sync import inline_loop

log = logging.getLogger(__name__)

#: Tries of ``complete`` while the NameNode waits for the last block's replicas.
COMPLETE_TRIES = 5
LEASE_RENEWAL_INTERVAL_S = 20.0  # well inside the default 60 s soft limit


class LeaseRenewer:
    """Renews a client's lease while it has files open for writing: one task per client,
    not one per file (HDFS's LeaseRenewer; the NameNode's lease is the client's).

    Writers are counted from any thread (a synchronous client opens files from its
    callers' threads, see :meth:`FileWriter.write_and_close`); the task runs on the
    client's event loop from the first open writer, renewing every ``interval_s``. The
    last close on the loop stops it at once; a last close in a caller's thread leaves it
    to end itself at its next turn if nothing is open by then (waking the loop's thread to
    stop it, and again to start it for the next file, cost a file written from one thread
    two thread switches). An idle client has no task after at most ``interval_s``."""

    def __init__(
        self, nn: RpcClient, client_name: str, interval_s: float = LEASE_RENEWAL_INTERVAL_S
    ) -> None:
        self.nn = nn
        self.client_name = client_name
        self.interval_s = interval_s
        self.open_writers = 0
        self._lock = threading.Lock()
        self._task: asyncio.Task[None] | None = None
        #: A task runs or is on its way (under _lock: callers' threads start it).
        self._wanted = False

    @property
    def running(self) -> bool:
        """Whether the renewing task exists."""
        return self._task is not None

    def opened(self) -> None:
        with self._lock:
            self.open_writers += 1
            start = not self._wanted
            self._wanted = True
        if start:
            inline = inline_loop()
            if inline is not None:
                inline.loop.call_soon_threadsafe(self._start)
            else:
                self._start()

    def closed(self) -> None:
        with self._lock:
            self.open_writers -= 1
            last = self.open_writers == 0
        if last and inline_loop() is None:
            self._stop()  # on the loop: at once (a caller's thread leaves it to the task)

    def _start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def _stop(self) -> None:
        with self._lock:
            if self.open_writers or self._task is None:
                return
            task, self._task = self._task, None
            self._wanted = False
        task.cancel()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            with self._lock:
                if not self.open_writers:  # the last close came from a caller's thread
                    self._task = None
                    self._wanted = False
                    return
            try:
                await self.nn.call(p.RENEW_LEASE, p.RenewLeaseRequest(self.client_name))
            except XdfsError as exc:
                log.warning("renewing the lease of %s failed: %s", self.client_name, exc)

    async def close(self) -> None:
        with self._lock:
            task, self._task = self._task, None
            self._wanted = False
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class BlockBuffer:
    """The bytes of the block being written; any number of readers replay it from the
    start while it grows (a replacement target joins late and catches up from memory).

    Replayed as stream chunks of ``chunk_bytes`` with their CRC32C, each computed by the
    first reader to reach it and kept for the others (the CRC of every byte once per
    block, not once per target: it was a sixth of a large write's client CPU)."""

    def __init__(self, chunk_bytes: int) -> None:
        self.chunk_bytes = chunk_bytes
        self.chunks: list[bytes] = []
        #: The stream chunks of each of ``chunks``, sealed by the first replay there.
        self._sealed: list[list[SealedChunk] | None] = []
        self.num_bytes = 0
        self.closed = False
        #: What a reader waiting for more waits on, made by the first one to wait.
        self._changed: asyncio.Event | None = None

    def _notify(self) -> None:
        # A fresh event after each change: waiters keep the one they saw, so no wakeup is
        # lost; none is made while nobody waits (a small file's block is never waited on).
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def append(self, data: bytes) -> None:
        assert not self.closed, "append to a closed block buffer"
        if data:
            self.chunks.append(data)
            self._sealed.append(None)
            self.num_bytes += len(data)
            self._notify()

    def close(self) -> None:
        self.closed = True
        self._notify()

    def _sealed_at(self, index: int) -> list[SealedChunk]:
        sealed = self._sealed[index]
        if sealed is None:
            data, step = self.chunks[index], self.chunk_bytes
            view = memoryview(data) if len(data) > step else data
            sealed = [SealedChunk.of(view[start : start + step])
                      for start in range(0, len(data), step)]
            self._sealed[index] = sealed
        return sealed

    async def replay(self) -> AsyncIterator[SealedChunk]:
        index = 0
        while True:
            while index < len(self.chunks):
                for chunk in self._sealed_at(index):
                    yield chunk
                index += 1
            if self.closed:
                return
            if self._changed is None:
                self._changed = asyncio.Event()
            await self._changed.wait()


class _BlockWrite:
    """One block in flight: its buffer and one upload task per target. An appended block
    continues replicas of ``base`` bytes (``append_to``) that the buffer does not hold."""

    def __init__(
        self, located: p.LocatedBlock, buffer: BlockBuffer, append_to: BlockRecord | None = None
    ) -> None:
        self.located = located
        self.buffer = buffer
        self.append_to = append_to
        self.base = append_to.num_bytes if append_to is not None else 0
        self.uploads: dict[str, asyncio.Task[WriteBlockResponse]] = {}
        #: Outcomes of uploads made without tasks (from a caller's thread), by address.
        self.outcomes: dict[str, WriteBlockResponse | XdfsError | OSError] = {}

    @property
    def num_bytes(self) -> int:
        return self.base + self.buffer.num_bytes


class FileWriter:
    def __init__(
        self,
        nn: RpcClient,
        pool: DataNodePool,
        config: ClientConfig,
        client_name: str,
        status: p.FileStatus,
        leases: LeaseRenewer,
        blocks: list[BlockRecord] | None = None,
        first: p.LocatedBlock | None = None,
    ) -> None:
        """``first``: the file's first block, allocated by ``create_with_block``;
        ``leases``: the client's lease renewer."""
        self.nn = nn
        self.pool = pool
        self.config = config
        self.client_name = client_name
        self.path = status.path
        #: The file's status when opened (its inode id: what a mount numbers it by).
        self.status = status
        self.block_size = status.block_size
        self.replication = status.replication
        #: The file's blocks so far (an appended file starts with the ones it had).
        self.blocks: list[BlockRecord] = list(blocks or ())
        self.bytes_written = 0
        self.closed = False
        self._current: _BlockWrite | None = None
        #: The last full block, its targets still finalizing it (see the module docstring):
        #: the task that waits for them (and replaces a failed one).
        self._behind: asyncio.Task[list[str]] | None = None
        #: A partial last block (reopened by append, or cut by hflush) the next write
        #: continues on the replicas that hold it: where they are, and what they hold.
        self._continue: tuple[p.LocatedBlock, BlockRecord] | None = None
        self._excluded: set[str] = set()
        #: A block the NameNode allocated with the file, used by the first write.
        self._first = first
        self._leases = leases
        self._leases.opened()

    @classmethod
    def appending(
        cls, nn: RpcClient, pool: DataNodePool, config: ClientConfig, client_name: str,
        reopened: p.AppendResponse, leases: LeaseRenewer,
    ) -> FileWriter:
        """The writer of a file reopened by ``append``: a partial last block is continued
        at once, so its replicas take the new genstamp before anyone reads them again."""
        writer = cls(nn, pool, config, client_name, reopened.status, leases, reopened.blocks)
        last = reopened.last
        if last is not None:
            block = last.block
            held = BlockRecord(block.block_id, reopened.old_genstamp, block.num_bytes)
            writer._continue = (last, held)
            writer._current = writer._continue_block()
        return writer

    async def __aenter__(self) -> FileWriter:
        return self

    async def __aexit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            await self.close()
        else:
            await self.abort()

    # -- writing --------------------------------------------------------------------------

    async def write(self, data: bytes | bytearray | memoryview) -> int:
        if self.closed:
            raise ValueError("write to a closed xdfs file")
        view = memoryview(data).cast("B")
        while view:
            if self._current is None:
                self._current = (self._continue_block() if self._continue is not None
                                 else await self._start_block())
            buffer = self._current.buffer
            take = view[: self.block_size - self._current.num_bytes]
            # The block keeps what it is given until stored: immutable bytes are kept as
            # they are, anything else (or a part) is copied once.
            kept = data if isinstance(data, bytes) and len(take) == len(data) else bytes(take)
            buffer.append(kept)
            view = view[len(take) :]
            self.bytes_written += len(take)
            if self._current.num_bytes < self.block_size:
                await asyncio.sleep(0)  # let the uploads take what arrived
            elif self._current.append_to is None:
                await self._leave_behind()
            else:  # a continued block: its replicas' new length is what readers of a
                await self._finish_block()  # flushed file see, so only once stored
        return len(data)

    async def hflush(self) -> None:
        """Make every byte written so far visible to new readers (HDFS's hflush): the
        block being written is finalized on its targets at its current length and the
        NameNode learns that length; the next write continues the block there."""
        if self.closed:
            raise ValueError("hflush of a closed xdfs file")
        await self._settle_behind()
        block = self._current
        if block is not None:
            stored = await self._finish_block()
            record = self.blocks[-1]
            if record.num_bytes < self.block_size:
                located = p.LocatedBlock(record, block.located.offset, stored,
                                         block.located.token)
                self._continue = (located, record)
        if self.blocks:
            request = p.FsyncRequest(self.path, self.client_name, self.blocks[-1])
            await self.nn.call(p.FSYNC, request)

    async def write_and_close(self, data: bytes | bytearray | memoryview) -> p.FileStatus:
        """:meth:`write` the last bytes, then :meth:`close` (fsspec's close).

        Run by a synchronous client from its caller's thread (``LoopThread.run_inline``):
        a file written whole here whose bytes fit in one stream chunk of its first block
        (a small file) is stored from that thread: each target gets the block's head, chunk
        and tail in one write over a blocking connection
        (:meth:`DataNodePool.store_inline`); the rest of the close (``complete``; replacing
        a failed target, or resending the block) then runs on the loop, or, with
        ``client.inline_create_complete``, ``complete`` from this thread too, made as soon
        as the first target answered (:meth:`_complete_with_first`). Anything else
        written this way runs on the loop whole."""
        if self.closed:
            raise ValueError("write to a closed xdfs file")
        loop = inline_loop()
        if loop is None:
            await self.write(data)
            return await self.close()
        if not self._nothing_in_flight() or (data and not self._fits_first_chunk(len(data))):
            return loop.run(self.write_and_close(data))
        if data:
            status = await self._complete_with_first(self._store_inline(bytes(data)))
            if status is not None:
                return status
        failed = any(not isinstance(outcome, WriteBlockResponse)
                     for outcome in self._outcomes_pending())
        if failed or not self.config.inline_create_complete:
            return loop.run(self.close())  # replacing a failed target; or complete there
        return await self.close()  # nothing left to upload: NameNode calls only

    def _nothing_in_flight(self) -> bool:
        """No block is being written (its uploads are tasks of the loop)."""
        return self._current is None and self._continue is None and self._behind is None

    def _fits_first_chunk(self, size: int) -> bool:
        return self._first is not None and size <= min(
            self.block_size, self.pool.config.stream_chunk_bytes)

    def _store_inline(self, data: bytes) -> InlineUploads[WriteBlockResponse]:
        """Upload ``data`` as the whole first block from this thread (see
        :meth:`write_and_close`); the caller reads the answers."""
        assert self._first is not None
        block = _BlockWrite(self._first, self._new_buffer())
        self._first = None
        block.buffer.append(data)
        block.buffer.close()
        self.bytes_written += len(data)
        self._current = block
        requests = {address: self._write_request(block, block.located.token)
                    for address in block.located.locations}
        try:
            return self.pool.store_inline(WRITE_BLOCK, requests, data)
        except BaseException:  # Ctrl-C: as abort, the file stays open until its lease ends
            self._current = None
            self._end()
            raise

    async def _complete_with_first(
        self, uploads: InlineUploads[WriteBlockResponse]
    ) -> p.FileStatus | None:
        """The answers of a block stored from this thread. With
        ``client.inline_create_complete``, once the first target has stored it (its
        replica durable and reported) while the others still work, ``complete`` is made at
        once: the NameNode's edits sync overlaps the other targets' work (the slower of
        two DataNodes answered ~6 ms after the faster, measured from 8 threads), and the
        close still returns only once every target answered. Returns the file's status
        then; None when the close goes on as before (the outcomes are in the block): a
        target failed before the complete (it is replaced first), or one target only.
        A target failing after the complete leaves the block short of a replica, which
        the NameNode's replication restores (as when a DataNode dies after a close)."""
        block = self._current
        assert block is not None
        try:
            if self.config.inline_create_complete:
                uploads.next()
                if uploads.pending and uploads.none_failed():
                    return await self._complete_before_all(block, uploads)
            block.outcomes = uploads.all()
        except BaseException:  # Ctrl-C: as abort, the file stays open until its lease ends
            uploads.abandon()
            if not self.closed:
                self._current = None
                self._end()
            raise
        return None

    async def _complete_before_all(
        self, block: _BlockWrite, uploads: InlineUploads[WriteBlockResponse]
    ) -> p.FileStatus:
        """``complete`` with the block as one target stored it, then the other answers."""
        self._block_done(block)
        try:
            status = await self._complete()
            outcomes = uploads.all()
        finally:
            self._end()  # (closed either way, as by close)
        for address, outcome in outcomes.items():
            if isinstance(outcome, XdfsError | OSError):
                log.warning("%s: DataNode %s failed after the file was completed (%s); the "
                            "NameNode restores the block's replicas", self.path, address,
                            outcome)
        return status

    def _outcomes_pending(self) -> list[WriteBlockResponse | XdfsError | OSError]:
        return list(self._current.outcomes.values()) if self._current is not None else []

    async def close(self) -> p.FileStatus:
        """Store the last block and close the file; returns its final status."""
        if self.closed:
            raise ValueError("xdfs file already closed")
        try:
            await self._settle_behind()
            if self._current is not None:
                await self._finish_block()
            if self._first is not None:  # an empty file: its block goes unused
                await self._abandon(self._first.block.block_id)
                self._first = None
            return await self._complete()
        finally:
            await self._stop()

    async def abort(self) -> None:
        """Stop writing; the file stays open until its lease expires (as in HDFS)."""
        behind, self._behind = self._behind, None
        if behind is not None:
            behind.cancel()
            await asyncio.gather(behind, return_exceptions=True)
        await self._drop_current()
        await self._stop()

    async def _drop_current(self) -> None:
        """Stop the uploads of the block being written (the write is given up)."""
        if self._current is not None:
            for task in self._current.uploads.values():
                task.cancel()
            await asyncio.gather(*self._current.uploads.values(), return_exceptions=True)
            self._current = None

    async def _stop(self) -> None:
        self._end()

    def _end(self) -> None:
        if not self.closed:
            self.closed = True
            self._leases.closed()

    # -- blocks -----------------------------------------------------------------------------

    async def _start_block(self, buffer: BlockBuffer | None = None) -> _BlockWrite:
        """Ask for the next block (unless the file came with it) and start its uploads
        (replaying ``buffer`` when given)."""
        located = self._first
        self._first = None
        if located is None:
            request = p.AddBlockRequest(
                self.path,
                self.client_name,
                self.blocks[-1] if self.blocks else None,
                sorted(self._excluded),
            )
            located = await self.nn.call(p.ADD_BLOCK, request)
        block = _BlockWrite(located, buffer or self._new_buffer())
        for address in block.located.locations:
            self._upload(block, address, block.located.token)
        return block

    def _continue_block(self) -> _BlockWrite:
        """Continue the partial last block on the replicas that hold it (see _continue)."""
        assert self._continue is not None
        located, held = self._continue
        self._continue = None
        self.blocks.pop()  # back once it is finished, with its new length
        block = _BlockWrite(located, self._new_buffer(), held)
        for address in located.locations:
            self._upload(block, address, located.token)
        return block

    def _new_buffer(self) -> BlockBuffer:
        return BlockBuffer(self.pool.config.stream_chunk_bytes)

    def _write_request(self, block: _BlockWrite, token: str) -> WriteBlockRequest:
        return WriteBlockRequest(block.located.block, token, self.client_name, block.append_to)

    def _upload(self, block: _BlockWrite, address: str, token: str) -> None:
        request = self._write_request(block, token)
        node = self.pool.get(address)
        block.uploads[address] = asyncio.get_running_loop().create_task(
            node.upload(WRITE_BLOCK, request, block.buffer.replay())
        )

    async def _leave_behind(self) -> None:
        """The current block is full: its targets finalize it while the next block starts
        (once the block behind before it has settled, see the module docstring)."""
        block = self._current
        assert block is not None
        block.buffer.close()
        await self._settle_behind()
        self._block_done(block)
        self._behind = asyncio.get_running_loop().create_task(self._settle(block))

    async def _settle_behind(self) -> None:
        """Wait for the block behind, if any. Its failure is raised here, and fails the
        write: the uploads of the block being written are stopped."""
        behind, self._behind = self._behind, None
        if behind is not None:
            try:
                await behind
            except BaseException:
                await self._drop_current()
                raise

    async def _settle(self, block: _BlockWrite) -> list[str]:
        """Wait for the targets of a block left behind (no longer the file's last: it
        cannot be abandoned and resent) and replace the ones that failed."""
        stored = await self._wait_uploads(block)
        if not stored:
            raise NotEnoughReplicas(
                f"{self.path}: every target of block {block.located.block.block_id} failed "
                f"after the next block had started (excluded: {self._excluded_list})"
            )
        return stored + await self._replace_some(block, stored)

    async def _replace_some(self, block: _BlockWrite, stored: list[str]) -> list[str]:
        """Replacements of the block's failed targets, when the configuration asks for
        them and the block can be sent whole (not one continued from earlier bytes)."""
        if (len(stored) < len(block.located.locations) and self.config.replace_failed_target
                and block.append_to is None):  # a replacement needs the whole block
            return await self._replace_failed(block, stored)
        return []

    async def _finish_block(self) -> list[str]:
        """Store the current block; returns the addresses that hold it."""
        block = self._current
        assert block is not None
        block.buffer.close()
        for attempt in range(1, self.config.block_write_tries + 1):
            stored = await self._wait_uploads(block)
            if stored:
                break
            if block.append_to is not None:
                # its first bytes are on the DataNodes only: there is nothing to resend
                raise NotEnoughReplicas(
                    f"{self.path}: no DataNode could continue block "
                    f"{block.located.block.block_id} (excluded: {self._excluded_list})"
                )
            log.warning(
                "%s: every target of block %d failed (try %d of %d)",
                self.path, block.located.block.block_id, attempt, self.config.block_write_tries,
            )
            if attempt == self.config.block_write_tries:
                raise NotEnoughReplicas(
                    f"{self.path}: block {block.located.block.block_id} could not be stored "
                    f"on any DataNode (excluded: {self._excluded_list})"
                )
            block = await self._resend(block)
        stored += await self._replace_some(block, stored)
        self._block_done(block)
        return stored

    def _block_done(self, block: _BlockWrite) -> None:
        """``block`` is the file's newest block with its length; none is being written."""
        record = block.located.block
        self.blocks.append(BlockRecord(record.block_id, record.genstamp, block.num_bytes))
        self._current = None

    @property
    def _excluded_list(self) -> str:
        return ", ".join(sorted(self._excluded))

    async def _wait_uploads(self, block: _BlockWrite) -> list[str]:
        """Addresses that stored the block; the others are excluded from now on."""
        outcomes: dict[str, WriteBlockResponse | BaseException] = dict(block.outcomes)
        block.outcomes.clear()
        if block.uploads:
            results = await asyncio.gather(*block.uploads.values(), return_exceptions=True)
            outcomes.update(zip(list(block.uploads), results, strict=True))
        stored: list[str] = []
        for address, result in outcomes.items():
            if isinstance(result, BaseException):
                if not isinstance(result, XdfsError | OSError):
                    raise result
                log.warning("%s: DataNode %s failed: %s", self.path, address, result)
                self._excluded.add(address)
                await self.pool.forget(address)
            else:
                stored.append(address)
        block.uploads.clear()
        return stored

    async def _resend(self, failed: _BlockWrite) -> _BlockWrite:
        """Abandon a block no target stored and send its bytes to fresh targets."""
        await self._abandon(failed.located.block.block_id)
        return await self._start_block(failed.buffer)

    async def _abandon(self, block_id: int) -> None:
        request = p.AbandonBlockRequest(self.path, self.client_name, block_id)
        await self.nn.call(p.ABANDON_BLOCK, request)  # complete: the new uploads replay it

    async def _replace_failed(self, block: _BlockWrite, stored: list[str]) -> list[str]:
        """Send the finished block to replacements for failed targets (best effort: the
        NameNode's replication monitor restores the count if this fails too)."""
        added: list[str] = []
        for _ in range(len(block.located.locations) - len(stored)):
            request = p.AdditionalDataNodeRequest(
                self.path, self.client_name, block.located.block, stored + added,
                sorted(self._excluded),
            )
            try:
                extra = await self.nn.call(p.ADDITIONAL_DATANODE, request)
            except NotEnoughReplicas:
                return added
            for address in extra.locations:
                self._upload(block, address, extra.token)
            added += await self._wait_uploads(block)
        return added

    async def _complete(self) -> p.FileStatus:
        request = p.CompleteRequest(self.path, self.client_name, list(self.blocks))
        for attempt in range(1, COMPLETE_TRIES + 1):
            try:
                return await self.nn.call(p.COMPLETE, request)
            except NotEnoughReplicas:
                if attempt == COMPLETE_TRIES:
                    raise
                await _pause(0.2 * attempt)
        raise AssertionError("unreachable")


async def _pause(seconds: float) -> None:
    """Sleep: in the caller's thread when it runs the writer itself (run_inline)."""
    if inline_loop() is not None:
        time.sleep(seconds)  # noqa: ASYNC251 (a caller's thread, no event loop runs here)
    else:
        await asyncio.sleep(seconds)
