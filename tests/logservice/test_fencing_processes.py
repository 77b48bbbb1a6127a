"""Who may write a log, on real processes (issue 37): a client's ``open_writer`` fences
every append under an older writer epoch (a deposed leader cannot write, seed 002's "a new
writer fences the old one"), while appends with no writer (many producers) go on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.logservice.cluster import LogCluster, through
from tests.logservice.conftest import read_everything
from xdfs.common.process import ProcessGroup
from xdfs.errors import LogFenced


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LogCluster]:
    with ProcessGroup(tmp_path) as group:
        yield LogCluster(tmp_path, group, storage_count=3, service_count=2).start()


async def test_a_new_writer_fences_the_appends_of_the_old_one(cluster: LogCluster) -> None:
    a, b, producer = through(cluster, 0), through(cluster, 1), through(cluster, 0)
    try:
        await a.create("w")
        first = await a.open_writer("w")
        for i in range(5):
            await a.append("w", f"a{i}")
        second = await b.open_writer("w")
        assert second > first
        before = await b.stat("w")
        for i in range(3):  # the deposed writer: refused, every time
            with pytest.raises(LogFenced):
                await a.append("w", f"late{i}")
        after = await b.stat("w")  # ... and its refusals disturb the current writer not at all
        assert (after.writer_epoch, after.ledger_ids) == (before.writer_epoch, before.ledger_ids)
        with pytest.raises(LogFenced):
            await b.append("w", "forged", epoch=second + 7)  # an epoch nobody opened
        await b.append("w", "b0")
        await producer.append("w", "p0")  # many producers: no writer, not fenced
        await a.append("w", "p1", epoch=0)  # NO_WRITER: a producer's append
        got = [p for _, p in await read_everything(b, "w")]
        assert got == [b"a0", b"a1", b"a2", b"a3", b"a4", b"b0", b"p0", b"p1"]
        # the old writer takes the log back: now the other one is fenced
        await a.open_writer("w")
        await a.append("w", "a5")
        with pytest.raises(LogFenced):
            await b.append("w", "late-b")
        assert (await a.stat("w")).opened_epoch > second
        got = [p for _, p in await read_everything(a, "w")]
        assert got[-2:] == [b"p1", b"a5"] and b"late-b" not in got
    finally:
        for client in (a, b, producer):
            await client.close()
