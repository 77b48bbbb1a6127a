"""What a small file costs the NameNode: the file comes with its first block
(``create_with_block``), so a file under a block is one create, the DataNodes' writes and
one complete; an empty file gives its unused block back; a NameNode without the method is
served by plain ``create`` and ``add_block``."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests.datapath.conftest import Cluster, digest, payload
from xdfs.protocol import namenode as p
from xdfs.rpc.client import RpcClient
from xdfs.rpc.service import Method


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
