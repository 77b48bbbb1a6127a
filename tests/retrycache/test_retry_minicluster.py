"""The NameNode's retry cache through real RPC (in-process MiniCluster): a call sent again
with the same client id and call number is answered with the first outcome, never run
twice; a new call number runs again (and shows what the retry would otherwise have got)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from xdfs.errors import AlreadyExists, NotFound
from xdfs.namenode.retry_cache import RetryCache
from xdfs.namenode.server import NameNode
from xdfs.protocol import namenode as p
from xdfs.protocol.blocks import BlockRecord
from xdfs.rpc.client import RpcClient
from xdfs.rpc.client_connection import ClientConnection
from xdfs.rpc.handling import CallContext
from xdfs.rpc.messages import PROTOCOL_VERSION, Empty, Hello
from xdfs.rpc.service import Method
from xdfs.testing.minicluster import MiniCluster
from xdfs.testing.poll import eventually

TIMEOUT_S = 30.0


def root_hello() -> Hello:
    return Hello(PROTOCOL_VERSION, client_name="retry-test", user="root", password="rootpw")


async def connection(client: RpcClient, nn: NameNode) -> ClientConnection:
    return await client.connection(nn.address)


async def send(conn: ClientConnection, method: Method[Any, Any], request: Any, call: int) -> Any:
    """One try of logical call ``call`` (what RpcClient sends on each retry of it)."""
    return await conn.call(method, request, TIMEOUT_S, call)


def cache_of(nn: NameNode) -> RetryCache:
    assert nn.fs is not None
    return nn.fs.retry_cache


@pytest.fixture
async def nn(minicluster: MiniCluster) -> NameNode:
    return await minicluster.start_namenode()


async def test_a_repeated_create_answers_the_first_status(
    minicluster: MiniCluster, nn: NameNode
) -> None:
    conn = await connection(minicluster.client(nn.address, hello=root_hello()), nn)
    request = p.CreateRequest("/tmp/f", "writer-1", overwrite=False)
    first = await send(conn, p.CREATE, request, 7)
    assert await send(conn, p.CREATE, request, 7) == first
    with pytest.raises(AlreadyExists):  # what a second execution answers
        await send(conn, p.CREATE, request, 8)


async def test_a_repeated_delete_rename_and_mkdirs_apply_once(
    minicluster: MiniCluster, nn: NameNode
) -> None:
    conn = await connection(minicluster.client(nn.address, hello=root_hello()), nn)
    made = await send(conn, p.MKDIRS, p.MkdirsRequest("/tmp/d", parents=False), 1)
    assert await send(conn, p.MKDIRS, p.MkdirsRequest("/tmp/d", parents=False), 1) == made
    with pytest.raises(AlreadyExists):
        await send(conn, p.MKDIRS, p.MkdirsRequest("/tmp/d", parents=False), 2)

    await send(conn, p.CREATE, p.CreateRequest("/tmp/d/a", "w"), 3)
    rename = p.RenameRequest("/tmp/d/a", "/tmp/d/b")
    assert await send(conn, p.RENAME, rename, 4) == p.RenameResponse("/tmp/d/b")
    assert await send(conn, p.RENAME, rename, 4) == p.RenameResponse("/tmp/d/b")
    with pytest.raises(AlreadyExists):  # a second execution: /tmp/d/b exists now
        await send(conn, p.RENAME, rename, 5)

    delete = p.DeleteRequest("/tmp/d/b", skip_trash=True)
    assert await send(conn, p.DELETE, delete, 6) == p.DeleteResponse(True, "")
    assert await send(conn, p.DELETE, delete, 6) == p.DeleteResponse(True, "")
    with pytest.raises(NotFound):
        await send(conn, p.DELETE, delete, 7)


async def test_a_retry_on_another_connection_is_recognised_by_the_client_id(
    minicluster: MiniCluster, nn: NameNode
) -> None:
    first_client = minicluster.client(nn.address, hello=root_hello())
    conn = await connection(first_client, nn)
    request = p.CreateRequest("/tmp/g", "writer-1")
    first = await send(conn, p.CREATE, request, 1)
    conn.close()  # the connection broke: the retry comes on a new one, same client id
    same_client = minicluster.client(nn.address, hello=first_client.hello)
    assert await send(await connection(same_client, nn), p.CREATE, request, 1) == first
    # the same call number from another client is another call
    other = minicluster.client(nn.address, hello=root_hello())
    assert other.hello.client_id != first_client.hello.client_id
    with pytest.raises(AlreadyExists):
        await send(await connection(other, nn), p.CREATE, request, 1)


async def test_a_retry_of_a_failed_call_gets_the_same_error(
    minicluster: MiniCluster, nn: NameNode
) -> None:
    conn = await connection(minicluster.client(nn.address, hello=root_hello()), nn)
    rename = p.RenameRequest("/tmp/missing", "/tmp/x")
    with pytest.raises(NotFound):
        await send(conn, p.RENAME, rename, 1)
    await send(conn, p.CREATE, p.CreateRequest("/tmp/missing", "w"), 2)
    with pytest.raises(NotFound):  # the first outcome, though it would succeed now
        await send(conn, p.RENAME, rename, 1)
    assert await send(conn, p.RENAME, rename, 3) == p.RenameResponse("/tmp/x")


async def test_a_retry_while_the_first_try_runs_waits_for_it(
    minicluster: MiniCluster, nn: NameNode
) -> None:
    conn = await connection(minicluster.client(nn.address, hello=root_hello()), nn)
    request = p.CreateRequest("/tmp/h", "writer-1", overwrite=False)
    answers = await asyncio.gather(*(send(conn, p.CREATE, request, 9) for _ in range(5)))
    assert all(answer == answers[0] for answer in answers)
    assert len(cache_of(nn)) == 1


async def test_calls_without_a_call_number_are_not_cached(
    minicluster: MiniCluster, nn: NameNode
) -> None:
    conn = await connection(minicluster.client(nn.address, hello=root_hello()), nn)
    await send(conn, p.MKDIRS, p.MkdirsRequest("/tmp/n", parents=False), 0)
    with pytest.raises(AlreadyExists):
        await send(conn, p.MKDIRS, p.MkdirsRequest("/tmp/n", parents=False), 0)
    assert len(cache_of(nn)) == 0


async def test_the_rpc_client_numbers_calls_and_keeps_the_number_on_retries(
    minicluster: MiniCluster, nn: NameNode
) -> None:
    """RpcClient itself: each call a new number (so two creates are two calls), and a
    retry after the connection broke mid-call is recognised (same number)."""
    client = minicluster.client(nn.address, hello=root_hello())
    await client.call(p.CREATE, p.CreateRequest("/tmp/r", "w"))
    with pytest.raises(AlreadyExists):
        await client.call(p.CREATE, p.CreateRequest("/tmp/r", "w"))
    # the server runs the rename, then loses the connection instead of answering (its
    # route replaced: the connection's own methods are compiled, not patchable)
    assert nn.server is not None
    (server_conn,) = nn.server.connections
    route = nn.server.routes["rename"]
    lost: list[int] = []

    def rename_and_lose_the_answer(ctx: CallContext, req: p.RenameRequest) -> Any:
        answer = route.handler(ctx, req)  # the rename is made (its sync under way)
        if not lost:
            lost.append(ctx.call)
            assert server_conn.transport is not None
            server_conn.transport.abort()
        return answer

    nn.server.routes["rename"] = dataclasses.replace(route, handler=rename_and_lose_the_answer)
    answer = await client.call(p.RENAME, p.RenameRequest("/tmp/r", "/tmp/s"))
    assert lost  # the first answer never left
    # a second execution would have failed (/tmp/s exists now): this is the first outcome
    assert answer == p.RenameResponse("/tmp/s")
    with pytest.raises(AlreadyExists):
        await client.call(p.RENAME, p.RenameRequest("/tmp/r", "/tmp/s"))


async def test_a_restarted_namenode_answers_a_retry_from_its_edits(
    minicluster: MiniCluster, nn: NameNode
) -> None:
    hello = root_hello()
    client = minicluster.client(nn.address, hello=hello)
    conn = await connection(client, nn)
    await send(conn, p.CREATE, p.CreateRequest("/tmp/src", "w"), 1)
    created = await send(conn, p.CREATE, p.CreateRequest("/tmp/new", "w"), 2)
    renamed = await send(conn, p.RENAME, p.RenameRequest("/tmp/src", "/tmp/dst"), 3)
    deleted = await send(conn, p.DELETE, p.DeleteRequest("/tmp/dst", skip_trash=False), 4)
    made = await send(conn, p.MKDIRS, p.MkdirsRequest("/tmp/m/n", parents=True), 5)
    assert deleted.trash_path  # to the trash: a rename whose answer is the trash path
    await minicluster.stop_namenode(nn)
    restarted = await minicluster.start_namenode(format_dirs=False)
    assert len(cache_of(restarted)) == 5
    again = minicluster.client(restarted.address, hello=client.hello)  # same client id
    conn = await connection(again, restarted)
    assert await send(conn, p.CREATE, p.CreateRequest("/tmp/new", "w"), 2) == created
    assert await send(conn, p.RENAME, p.RenameRequest("/tmp/src", "/tmp/dst"), 3) == renamed
    assert (
        await send(conn, p.DELETE, p.DeleteRequest("/tmp/dst", skip_trash=False), 4)
        == deleted
    )
    assert await send(conn, p.MKDIRS, p.MkdirsRequest("/tmp/m/n", parents=True), 5) == made


async def test_an_add_block_retry_unknown_to_the_cache_gets_the_same_block(
    minicluster: MiniCluster, nn: NameNode
) -> None:
    """add_block is remembered in memory only; a retry the cache does not know (a restarted
    or new active NameNode) is recognised from the file itself, as HDFS's onRetryBlock."""
    await minicluster.start_datanode()
    fs = nn.fs
    assert fs is not None
    await eventually(lambda: fs.blocks.datanodes.live_count() == 1, what="a live DataNode")
    conn = await connection(minicluster.client(nn.address, hello=root_hello()), nn)
    await send(conn, p.CREATE, p.CreateRequest("/tmp/w", "w", replication=1), 1)
    first_block = p.AddBlockRequest("/tmp/w", "w", None)
    first = await send(conn, p.ADD_BLOCK, first_block, 2)
    assert await send(conn, p.ADD_BLOCK, first_block, 2) == first  # from the cache
    again = await send(conn, p.ADD_BLOCK, first_block, 3)  # not in the cache
    assert (again.block, again.offset, again.locations) == (
        first.block, first.offset, first.locations)
    assert list(fs.ns.get_blocks("/tmp/w")) == [first.block]
    # the next block names the first one as previous; its retry gets the same second block
    written = BlockRecord(first.block.block_id, first.block.genstamp, 1024)
    next_block = p.AddBlockRequest("/tmp/w", "w", written)
    second = await send(conn, p.ADD_BLOCK, next_block, 4)
    assert second.block.block_id != first.block.block_id and second.offset == 1024
    retried = await send(conn, p.ADD_BLOCK, next_block, 5)
    assert (retried.block, retried.offset) == (second.block, 1024)
    assert [b.block_id for b in fs.ns.get_blocks("/tmp/w")] == [
        first.block.block_id, second.block.block_id]


async def test_concat_applies_once_also_after_a_restart(
    minicluster: MiniCluster, nn: NameNode
) -> None:
    """A repeated concat answers its first outcome, from the live cache and from the
    edits a restarted NameNode replays; a new call number is a second execution (the
    sources are gone: NotFound)."""
    first = minicluster.client(nn.address, hello=root_hello())
    conn = await connection(first, nn)
    for call, name in enumerate(("a", "b", "c"), start=1):
        await send(conn, p.CREATE, p.CreateRequest(f"/tmp/{name}", "w"), call)
        await send(conn, p.COMPLETE, p.CompleteRequest(f"/tmp/{name}", "w", []), 10 + call)
    concat = p.ConcatRequest("/tmp/a", ["/tmp/b", "/tmp/c"])
    await send(conn, p.CONCAT, concat, 21)
    assert await send(conn, p.CONCAT, concat, 21) == Empty()
    with pytest.raises(NotFound):
        await send(conn, p.CONCAT, concat, 22)
    await minicluster.stop_namenode(nn)
    restarted = await minicluster.start_namenode(format_dirs=False)
    again = minicluster.client(restarted.address, hello=first.hello)  # same client id
    conn = await connection(again, restarted)
    assert await send(conn, p.CONCAT, concat, 21) == Empty()


async def test_create_with_block_applies_once_and_a_restart_hands_its_block_to_add_block(
    minicluster: MiniCluster, nn: NameNode
) -> None:
    """create_with_block's retry gets the first answer from the cache; after a restart the
    answer comes from the edits (the key is on its add_file op): the status, without the
    block, whose targets were in memory only; add_block then gets that same block."""
    datanode = await minicluster.start_datanode()
    fs = nn.fs
    assert fs is not None
    await eventually(lambda: fs.blocks.datanodes.live_count() == 1, what="a live DataNode")
    client = minicluster.client(nn.address, hello=root_hello())
    conn = await connection(client, nn)
    request = p.CreateRequest("/tmp/cwb", "w", replication=1, overwrite=False)
    first = await send(conn, p.CREATE_WITH_BLOCK, request, 1)
    assert first.block is not None and first.block.offset == 0
    assert first.status.under_construction
    assert await send(conn, p.CREATE_WITH_BLOCK, request, 1) == first  # from the cache
    with pytest.raises(AlreadyExists):  # what a second execution answers
        await send(conn, p.CREATE_WITH_BLOCK, request, 2)
    assert list(fs.ns.get_blocks("/tmp/cwb")) == [first.block.block]

    await minicluster.stop_datanode(datanode)
    await minicluster.stop_namenode(nn)
    restarted = await minicluster.start_namenode(format_dirs=False)
    same_id = minicluster.client(restarted.address, hello=client.hello)
    again = await connection(same_id, restarted)
    replayed = await send(again, p.CREATE_WITH_BLOCK, request, 1)
    assert replayed == p.CreateBlockResponse(first.status, None)
    await minicluster.start_datanode()  # the same DataNode, registering with the new one
    assert restarted.fs is not None
    live = restarted.fs.blocks.datanodes.live_count
    await eventually(lambda: live() == 1, what="a live DataNode")
    await send(again, p.SAFE_MODE, p.SafeModeRequest("leave"), 0)
    located = await send(again, p.ADD_BLOCK, p.AddBlockRequest("/tmp/cwb", "w", None), 3)
    assert located.block == first.block.block


async def test_create_with_block_leaves_the_block_to_add_block_under_quotas(
    minicluster: MiniCluster, nn: NameNode
) -> None:
    await minicluster.start_datanode()
    fs = nn.fs
    assert fs is not None
    await eventually(lambda: fs.blocks.datanodes.live_count() == 1, what="a live DataNode")
    conn = await connection(minicluster.client(nn.address, hello=root_hello()), nn)
    await send(conn, p.MKDIRS, p.MkdirsRequest("/q"), 1)
    await send(conn, p.SET_QUOTA, p.SetQuotaRequest("/q", None, 1), 0)  # one byte of space
    made = await send(conn, p.CREATE_WITH_BLOCK, p.CreateRequest("/tmp/f", "w"), 2)
    assert made.block is None and list(fs.ns.get_blocks("/tmp/f")) == []
