"""Append and truncate repeated across a real failover (processes: three JournalNodes, two
NameNodes, a DataNode).

An append is at most once: its op carries the call key in the edits, the standby that
tails them remembers the answer, and a retry with the same client id and call number on
the new active gets the first answer (HDFS: append is @AtMostOnce, answered with the last
block and the file's status) instead of a LeaseError (the file is already open for it).
A truncate is idempotent by its arguments (HDFS's @Idempotent): repeated on the new
active it answers as the first did and cuts nothing more."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from xdfs.config import RpcConfig
from xdfs.errors import LeaseError
from xdfs.protocol import namenode as p
from xdfs.rpc.client import RpcClient
from xdfs.rpc.messages import PROTOCOL_VERSION, Hello
from xdfs.rpc.service import Method

from ..ha.cluster import WAIT_S, HaCluster
from ..journal.qjm_cluster import PASSWORD, USER, make_cluster

pytestmark = pytest.mark.slow

DATA = bytes(range(256)) * 2  # 512 bytes: one partial block
CUT = 200  # inside the block: the truncate recovers it (answer False at first)
APPEND_CALL, TRUNCATE_CALL = 21, 22


@pytest.fixture
def ha(tmp_path: Path) -> Iterator[HaCluster]:
    qjm = make_cluster(tmp_path, tmp_path)
    cluster = HaCluster(qjm, tmp_path)
    try:
        cluster.format()
        cluster.start("nn1")
        cluster.start("nn2")
        result = cluster.admin("-transitionToActive", "nn1")
        assert result.returncode == 0, result.stderr
        cluster.start_datanode(0)
        cluster.wait(cluster.writable, "nn1 takes writes")
        yield cluster
    finally:
        qjm.group.kill_all()


class Caller:
    """Sends tries of numbered calls to one NameNode, as RpcClient sends the retries of
    one logical call (same client id in the handshake, same call number)."""

    def __init__(self, hello: Hello, address: str) -> None:
        self.address = address
        self.rpc = RpcClient(address, RpcConfig(), hello=hello)

    async def __call__(self, method: Method[Any, Any], request: Any, number: int) -> Any:
        conn = await self.rpc.connection(self.address)
        return await conn.call(method, request, WAIT_S, number)


async def _write(ha: HaCluster) -> None:
    async with ha.client() as client:
        for path in ("/a", "/t"):
            await client.write_file(path, DATA, replication=1)


async def _first_tries(ha: HaCluster, hello: Hello) -> tuple[p.AppendResponse, bool]:
    caller = Caller(hello, ha.addresses["nn1"])
    try:
        appended = await caller(p.APPEND, p.AppendRequest("/a", hello.client_name), APPEND_CALL)
        cut = await caller(p.TRUNCATE, p.TruncateRequest("/t", CUT), TRUNCATE_CALL)
        return appended, cut.done
    finally:
        await caller.rpc.close()


async def _retries(ha: HaCluster, hello: Hello) -> tuple[p.AppendResponse, bool]:
    caller = Caller(hello, ha.addresses["nn2"])
    try:
        appended = await caller(p.APPEND, p.AppendRequest("/a", hello.client_name), APPEND_CALL)
        cut = await caller(p.TRUNCATE, p.TruncateRequest("/t", CUT), TRUNCATE_CALL)
        # What a second execution of the append would have answered: the file is open.
        with pytest.raises(LeaseError):
            await caller(p.APPEND, p.AppendRequest("/a", hello.client_name), 0)
        return appended, cut.done
    finally:
        await caller.rpc.close()


def test_append_and_truncate_repeated_on_the_new_active_answer_as_the_first(
    ha: HaCluster,
) -> None:
    asyncio.run(_write(ha))
    hello = Hello(PROTOCOL_VERSION, client_name="retrier", user=USER, password=PASSWORD,
                  client_id=os.urandom(16))
    first_append, first_cut = asyncio.run(_first_tries(ha, hello))
    assert first_append.last is not None and first_append.old_genstamp > 0
    ha.namenodes["nn1"].kill()  # the answers may as well have been lost with it
    result = ha.admin("-transitionToActive", "nn2")
    assert result.returncode == 0, result.stderr

    again_append, again_cut = asyncio.run(_retries(ha, hello))
    assert again_append.status == first_append.status
    assert again_append.blocks == first_append.blocks
    assert again_append.old_genstamp == first_append.old_genstamp
    assert again_append.last is not None
    assert again_append.last.block == first_append.last.block
    assert again_append.last.offset == first_append.last.offset
    # The cut is under way (False, as the first answer) or done by now (True); never
    # refused, never a second cut.
    assert first_cut is False and again_cut in (False, True)

    async def length_of_t() -> int:
        async with ha.client("nn2") as client:
            status = await client.stat("/t")
            return status.length if not status.under_construction else -1

    ha.wait(lambda: asyncio.run(length_of_t()) == CUT, "the truncate of /t completes")

    async def read_t() -> bytes:
        async with ha.client("nn2") as client:
            return await client.read_file("/t")

    assert asyncio.run(read_t()) == DATA[:CUT]
