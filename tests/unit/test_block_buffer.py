"""The writer's BlockBuffer: a block replayed to each target as sealed stream chunks."""

from __future__ import annotations

import asyncio
import random

import crc32c

from xdfs.client.writer import BlockBuffer
from xdfs.rpc.streams import SealedChunk

CHUNK = 1000


async def replayed(buffer: BlockBuffer) -> list[SealedChunk]:
    return [chunk async for chunk in buffer.replay()]


async def test_each_target_gets_the_same_chunks_checksummed_once() -> None:
    rng = random.Random(1)
    parts = [rng.randbytes(size) for size in (1, CHUNK, CHUNK + 1, 3 * CHUNK - 7)]
    buffer = BlockBuffer(CHUNK)
    for part in parts:
        buffer.append(part)
    buffer.close()
    first, second, third = await asyncio.gather(*(replayed(buffer) for _ in range(3)))
    # Chunk boundaries as a sender splitting each part would make them, never merged.
    assert [len(c.data) for c in first] == [1, CHUNK, CHUNK, 1, CHUNK, CHUNK, CHUNK - 7]
    assert b"".join(bytes(c.data) for c in first) == b"".join(parts)
    assert all(c.crc32c == crc32c.crc32c(c.data) for c in first)
    # The same sealed objects for every target: each CRC was computed once.
    assert all(a is b is c for a, b, c in zip(first, second, third, strict=True))


async def test_a_late_replay_catches_up_while_the_block_grows() -> None:
    buffer = BlockBuffer(CHUNK)
    buffer.append(b"a" * (CHUNK + 5))
    late = asyncio.ensure_future(replayed(buffer))
    await asyncio.sleep(0)
    buffer.append(b"b" * 10)
    buffer.close()
    assert [bytes(c.data) for c in await late] == [b"a" * CHUNK, b"a" * 5, b"b" * 10]
