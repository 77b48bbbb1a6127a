"""A full block's targets finalize it while the next block streams (the writer keeps one
block behind): the answers of a block's uploads are held back here, as a slow fsync and
report would hold them, and the write goes on into the next block meanwhile."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.datapath.conftest import BLOCK_BYTES, Cluster, digest, payload
from xdfs.client.writer import FileWriter
from xdfs.datanode import handlers
from xdfs.datanode.transfer import receive_replica
from xdfs.errors import NotEnoughReplicas, XdfsError
from xdfs.rpc.client import RpcClient


class HeldAnswers:
    """Holds back the answers of the uploads of the first ``held`` blocks (any target)
    until :meth:`release`; ``fail`` makes them fail instead once released."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, held: int = 1) -> None:
        self.released = asyncio.Event()
        self.fail = False
        self.blocks: list[int] = []
        self._held = held
        original = RpcClient.upload

        async def upload(client: RpcClient, method: Any, request: Any, chunks: Any,
                         **kwargs: Any) -> Any:
            block_id = request.block.block_id
            if block_id not in self.blocks:
                self.blocks.append(block_id)
            answer = await original(client, method, request, chunks, **kwargs)
            if self.blocks.index(block_id) < self._held:
                await self.released.wait()
                if self.fail:
                    raise XdfsError(f"held upload of block {block_id} failed")
            return answer

        monkeypatch.setattr(RpcClient, "upload", upload)

    def release(self, fail: bool = False) -> None:
        self.fail = fail
        self.released.set()


async def test_the_next_block_streams_while_the_full_one_is_finalized(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = HeldAnswers(monkeypatch)
    data = payload(BLOCK_BYTES + BLOCK_BYTES // 2, seed=5)
    writer = await cluster.client.open_write("/pipelined", block_size=BLOCK_BYTES)
    # Returns with the first block's answers still held: its bytes are all sent, and
    # the second block was allocated and is being written.
    await asyncio.wait_for(writer.write(data), timeout=30)
    located = await cluster.client.block_locations("/pipelined")
    assert len(located.blocks) == 2
    closing = asyncio.ensure_future(writer.close())
    await asyncio.sleep(0.2)
    assert not closing.done()  # the close waits for the block behind
    held.release()
    status = await closing
    assert status.length == len(data)
    assert digest(await cluster.client.read_file("/pipelined")) == digest(data)


async def test_a_block_behind_whose_targets_all_fail_fails_the_write(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = HeldAnswers(monkeypatch)
    writer: FileWriter = await cluster.client.open_write("/behind", block_size=BLOCK_BYTES)
    await writer.write(payload(BLOCK_BYTES + 10, seed=6))
    held.release(fail=True)
    with pytest.raises(NotEnoughReplicas, match="after the next block had started"):
        await writer.close()


async def test_a_reader_of_the_open_file_waits_for_the_block_behind(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The NameNode learns a full block's length when the next block is added, before
    the DataNodes (slow here: 1.5 s, more than the 3 default read rounds wait) report it;
    a reader of the open file waits that out."""
    slow: set[int] = set()

    async def late(storage: Any, block_id: int, *args: Any, **kwargs: Any) -> Any:
        if not slow or block_id in slow:  # the file's first block, on every target
            slow.add(block_id)
            await asyncio.sleep(1.5)
        return await receive_replica(storage, block_id, *args, **kwargs)

    monkeypatch.setattr(handlers, "receive_replica", late)
    data = payload(BLOCK_BYTES + 100, seed=7)
    writer = await cluster.client.open_write("/tailed", block_size=BLOCK_BYTES)
    await writer.write(data)  # the first block behind, the second started
    assert (await cluster.client.stat("/tailed")).length == BLOCK_BYTES
    assert await cluster.client.read_file("/tailed") == data[:BLOCK_BYTES]
    await writer.close()
    assert await cluster.client.read_file("/tailed") == data
